//! `dedup`: the near-duplicate groups of a set of files or lines.

use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::json;
use simhashdb::batch::{clusters, find_all};
use simhashdb::hamming;
use simhashdb::plan::{Budget, Plan};
use simhashdb::recheck::{JaccardRule, ShingleSet};

use crate::dataset::{self, DatasetArgs};
use crate::docs::{Blank, FingerprintArgs, ReadArgs, collect_inputs, read_documents};
use crate::error::CliError;
use crate::input::{escape_field, open_output};
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Files or directories (read recursively, in name order); `-` reads
    /// standard input. Blank documents (no letter or digit, such as blank
    /// lines) are left out.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<std::ffi::OsString>,
    #[command(flatten)]
    read: ReadArgs,
    #[command(flatten)]
    fingerprint: FingerprintArgs,
    /// Largest Hamming distance between fingerprints that counts as a
    /// near-duplicate (default 3). For datasets (verified), the pairs within
    /// this distance are the ones checked, instead of the pairs that share a
    /// MinHash band: see "Datasets" below.
    #[arg(short, long)]
    distance: Option<u32>,
    /// Re-check every candidate pair with the exact Jaccard similarity of the
    /// two texts' shingle sets and drop pairs below T. `jaccard:T` compares
    /// shingles of 2 tokens (tokens as --tokenizer makes them); `jaccard:T:W`
    /// sets the width W (1 = sets of single tokens, best for titles).
    /// Measured in docs/QUALITY.md: `jaccard:0.6` for documents; for texts of
    /// 140 characters or less, `-d 8` to `-d 13` with `jaccard:0.4`.
    #[arg(long, value_name = "jaccard:T[:W]")]
    verify: Option<JaccardRule>,
    /// Print the groups as one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dataset: DatasetArgs,
}

struct Doc {
    name: String,
    fingerprint: u64,
    shingles: Option<ShingleSet>,
}

struct Member {
    doc: usize,
    distance: u32,
    jaccard: Option<f64>,
}

pub fn run(args: &Args) -> Result<(), CliError> {
    let hasher = args.fingerprint.hasher()?;
    if dataset::is_dataset_mode(&args.paths, &args.read.walk, &args.dataset) {
        if args.read.lines || args.read.html || args.json {
            return Err(CliError::Input(
                "--lines, --html and --json are for files and lines, not datasets \
                 (datasets: --emit groups)"
                    .into(),
            ));
        }
        let hasher_explicit = hasher.config() != simhashdb::Simhasher::default().config();
        let common = dataset::Common {
            paths: &args.paths,
            walk: &args.read.walk,
            hasher,
            hasher_explicit,
            distance: args.distance,
            rule: args.verify,
        };
        return dataset::run(common, &args.dataset);
    }
    if args.dataset.any_given() {
        return Err(CliError::Input(
            "the dataset options (--output, --emit, --keep, --text-field, --id-field, \
             --against, --add-to, --no-verify, --stats-json, --format) need dataset inputs \
             (.jsonl, .ndjson, .csv, .tsv, .parquet, optionally .gz/.zst) or --format"
                .into(),
        ));
    }
    let distance = args.distance.unwrap_or(3);
    let plan = Plan::new(distance.saturating_add(1), distance)
        .map_err(|e| CliError::Input(e.to_string()))?;

    let (files, mut skipped) = collect_inputs(&args.paths, &args.read.walk);
    let bar = progress::bytes(files.iter().map(|f| f.len).sum(), "reading");
    let (docs, unreadable, blanks) =
        read_documents(&files, &args.read, Blank::Skip, &bar, |d| Doc {
            fingerprint: d.fingerprint(&hasher, args.read.heading_weight),
            shingles: args
                .verify
                .map(|v| ShingleSet::from_text(&hasher, &d.text, v.width)),
            name: d.name,
        });
    bar.finish_and_clear();
    skipped.extend(unreadable);
    if blanks > 0 {
        eprintln!("simhashdb: left out {blanks} blank document(s) (no letter or digit)");
    }

    let fps: Vec<u64> = docs.iter().map(|d| d.fingerprint).collect();
    // The plan only changes the speed, never the answer; size it for the input.
    let plan = Plan::choose(fps.len() as u64, distance, Budget::Unprobed).unwrap_or(plan);
    let spinner = progress::spinner("searching");
    let groups: Vec<Vec<usize>> = match args.verify {
        None => clusters(&fps, &plan),
        Some(v) => {
            let pairs = find_all(&fps, &plan)
                .into_iter()
                .filter(|&(i, j)| jaccard(&docs[i], &docs[j]).is_some_and(|s| s >= v.threshold));
            components(fps.len(), pairs)
        }
    };
    let mut groups: Vec<Vec<Member>> = groups
        .into_iter()
        .map(|members| {
            let first = members[0];
            members
                .into_iter()
                .map(|doc| Member {
                    doc,
                    distance: hamming(fps[first], fps[doc]),
                    jaccard: args.verify.and_then(|_| jaccard(&docs[first], &docs[doc])),
                })
                .collect()
        })
        .collect();
    groups.sort_by(|a, b| b.len().cmp(&a.len()).then(a[0].doc.cmp(&b[0].doc)));
    spinner.finish_and_clear();

    let text = if args.json {
        json_report(&docs, &groups, &skipped)
    } else {
        text_report(&docs, &groups)
    };
    let mut out = open_output("-")?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::write("standard output", e))?;

    let in_groups: usize = groups.iter().map(Vec::len).sum();
    eprintln!(
        "simhashdb: {} documents, {} groups of near-duplicates holding {} of them (distance <= {}{})",
        docs.len(),
        groups.len(),
        in_groups,
        distance,
        args.verify
            .map(|v| format!(", Jaccard of {}-shingles >= {}", v.width, v.threshold))
            .unwrap_or_default()
    );
    match skipped.len() {
        0 => Ok(()),
        n => Err(CliError::Failure(format!(
            "skipped {n} input(s) that could not be read"
        ))),
    }
}

fn jaccard(a: &Doc, b: &Doc) -> Option<f64> {
    Some(a.shingles.as_ref()?.jaccard(b.shingles.as_ref()?))
}

/// Connected components of two or more members, each sorted, ordered by
/// their first member.
fn components(n: usize, pairs: impl Iterator<Item = (usize, usize)>) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for (i, j) in pairs {
        let (a, b) = (root(&mut parent, i), root(&mut parent, j));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
    }
    let mut by_root: Vec<Vec<usize>> = vec![Vec::new(); n];
    for x in 0..n {
        let r = root(&mut parent, x);
        by_root[r].push(x);
    }
    by_root.into_iter().filter(|g| g.len() > 1).collect()
}

fn text_report(docs: &[Doc], groups: &[Vec<Member>]) -> String {
    let mut text = String::new();
    for (g, members) in groups.iter().enumerate() {
        if g > 0 {
            text.push('\n');
        }
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "{} near-duplicates (distance to the first{}):",
            members.len(),
            if members[0].jaccard.is_some() {
                ", Jaccard similarity to the first"
            } else {
                ""
            }
        );
        for m in members {
            let _ = match m.jaccard {
                Some(j) => writeln!(
                    text,
                    "  {:>2}  {:.2}  {}",
                    m.distance,
                    j,
                    escape_field(&docs[m.doc].name)
                ),
                None => writeln!(
                    text,
                    "  {:>2}  {}",
                    m.distance,
                    escape_field(&docs[m.doc].name)
                ),
            };
        }
    }
    text
}

fn json_report(docs: &[Doc], groups: &[Vec<Member>], skipped: &[String]) -> String {
    let groups: Vec<serde_json::Value> = groups
        .iter()
        .map(|members| {
            let members: Vec<serde_json::Value> = members
                .iter()
                .map(|m| {
                    let mut v = json!({
                        "name": docs[m.doc].name,
                        "fingerprint": docs[m.doc].fingerprint,
                        "distance": m.distance,
                    });
                    if let Some(j) = m.jaccard {
                        v["jaccard"] = json!(j);
                    }
                    v
                })
                .collect();
            json!({ "members": members })
        })
        .collect();
    let report = json!({
        "documents": docs.len(),
        "skipped": skipped,
        "groups": groups,
    });
    format!("{report}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_join_transitively() {
        let groups = components(6, [(0, 3), (3, 5), (1, 2)].into_iter());
        assert_eq!(groups, vec![vec![0, 3, 5], vec![1, 2]]);
        assert!(components(3, std::iter::empty()).is_empty());
    }
}
