//! `simhashdb dedup`, run as a real process, checked against a brute-force
//! all-pairs scan of the same fingerprints.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use assert_cmd::Command;
use serde_json::Value;
use simhashdb::recheck::ShingleSet;
use simhashdb::{Simhasher, hamming};

use common::Rng;

fn simhashdb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simhashdb"))
}

/// Texts with planted near-duplicates (one to three words replaced),
/// exact copies, and unrelated texts, in shuffled order.
fn planted_texts(seed: u64, count: usize, words: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let vocabulary: Vec<String> = (0..400)
        .map(|i| format!("w{}x{}", i, rng.next() % 1000))
        .collect();
    let mut texts: Vec<Vec<String>> = Vec::new();
    while texts.len() < count {
        let kind = rng.index(4);
        if kind == 0 && !texts.is_empty() {
            let original = texts[rng.index(texts.len())].clone();
            texts.push(original);
        } else if kind == 1 && !texts.is_empty() {
            let mut edited = texts[rng.index(texts.len())].clone();
            for _ in 0..=rng.index(3) {
                let at = rng.index(edited.len());
                edited[at] = vocabulary[rng.index(vocabulary.len())].clone();
            }
            texts.push(edited);
        } else {
            texts.push(
                (0..words)
                    .map(|_| vocabulary[rng.index(vocabulary.len())].clone())
                    .collect(),
            );
        }
    }
    texts.into_iter().map(|t| t.join(" ")).collect()
}

/// Connected components (two or more members) of the pairs within `k` that
/// `keep` accepts, by brute force over all pairs.
fn brute_force_groups(
    fps: &[u64],
    k: u32,
    keep: impl Fn(usize, usize) -> bool,
) -> BTreeSet<BTreeSet<usize>> {
    let mut group: Vec<usize> = (0..fps.len()).collect();
    for i in 0..fps.len() {
        for j in i + 1..fps.len() {
            if hamming(fps[i], fps[j]) <= k && keep(i, j) {
                let (from, to) = (group[j], group[i]);
                if from != to {
                    for g in group.iter_mut() {
                        if *g == from {
                            *g = to;
                        }
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for g in 0..fps.len() {
        let members: BTreeSet<usize> = (0..fps.len()).filter(|&i| group[i] == g).collect();
        if members.len() > 1 {
            out.insert(members);
        }
    }
    out
}

/// Runs `dedup --json ARGS` and returns the report.
fn dedup_json(args: &[&str]) -> Value {
    let out = simhashdb()
        .arg("dedup")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The report's groups as sets of positions in `names`, after checking the
/// report's own invariants: distances to the first member, first members
/// first in input order, largest groups first.
fn report_groups(report: &Value, names: &[String], fps: &[u64]) -> BTreeSet<BTreeSet<usize>> {
    let mut groups = BTreeSet::new();
    let mut last_len = usize::MAX;
    for group in report["groups"].as_array().unwrap() {
        let members: Vec<usize> = group["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let name = m["name"].as_str().unwrap();
                let i = names.iter().position(|n| n == name).unwrap();
                assert_eq!(m["fingerprint"].as_u64(), Some(fps[i]), "{name}");
                i
            })
            .collect();
        assert!(members.len() >= 2 && members.len() <= last_len);
        last_len = members.len();
        assert!(members.windows(2).all(|w| w[0] < w[1]), "{members:?}");
        for (m, &i) in group["members"].as_array().unwrap().iter().zip(&members) {
            assert_eq!(
                m["distance"].as_u64(),
                Some(u64::from(hamming(fps[members[0]], fps[i])))
            );
        }
        assert!(groups.insert(members.into_iter().collect()));
    }
    groups
}

fn write_corpus(dir: &Path, texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            let path = dir.join(format!("{i:03}.txt"));
            fs::write(&path, text).unwrap();
            path.display().to_string()
        })
        .collect()
}

#[test]
fn groups_of_files_equal_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let texts = planted_texts(1, 150, 60);
    let names = write_corpus(dir.path(), &texts);
    let hasher = Simhasher::default();
    let fps: Vec<u64> = texts.iter().map(|t| hasher.fingerprint(t)).collect();
    for k in [0, 3, 6] {
        let expected = brute_force_groups(&fps, k, |_, _| true);
        let report = dedup_json(&[dir.path().to_str().unwrap(), "-d", &k.to_string()]);
        assert_eq!(report["documents"].as_u64(), Some(150));
        assert_eq!(report_groups(&report, &names, &fps), expected, "k = {k}");
        assert!(expected.len() >= 10, "the corpus plants duplicates");
    }
}

#[test]
fn groups_of_lines_equal_brute_force_and_blank_lines_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let texts = planted_texts(2, 300, 12);
    let path = dir.path().join("titles.txt");
    let mut data = String::new();
    for (i, t) in texts.iter().enumerate() {
        data.push_str(t);
        data.push('\n');
        if i % 50 == 0 {
            data.push_str("  \n");
        }
    }
    fs::write(&path, &data).unwrap();
    let path_arg = path.to_str().unwrap();
    // Names are PATH:LINE, counting the blank lines.
    let mut names = Vec::new();
    for (n, line) in data.lines().enumerate() {
        if !line.trim().is_empty() {
            names.push(format!("{path_arg}:{}", n + 1));
        }
    }
    let hasher = Simhasher::default();
    let fps: Vec<u64> = texts.iter().map(|t| hasher.fingerprint(t)).collect();
    let report = dedup_json(&["--lines", path_arg, "-d", "4"]);
    assert_eq!(report["documents"].as_u64(), Some(300));
    let expected = brute_force_groups(&fps, 4, |_, _| true);
    assert!(expected.len() >= 10);
    assert_eq!(report_groups(&report, &names, &fps), expected);
}

#[test]
fn verify_drops_pairs_below_the_jaccard_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let texts = planted_texts(3, 200, 10);
    let names = write_corpus(dir.path(), &texts);
    let hasher = Simhasher::default();
    let fps: Vec<u64> = texts.iter().map(|t| hasher.fingerprint(t)).collect();
    for (setting, width) in [("jaccard:0.5", 2), ("jaccard:0.7:1", 1)] {
        let threshold: f64 = setting.split(':').nth(1).unwrap().parse().unwrap();
        let shingles: Vec<ShingleSet> = texts
            .iter()
            .map(|t| ShingleSet::from_text(&hasher, t, width))
            .collect();
        let expected = brute_force_groups(&fps, 12, |i, j| {
            shingles[i].jaccard(&shingles[j]) >= threshold
        });
        let unverified = brute_force_groups(&fps, 12, |_, _| true);
        assert_ne!(expected, unverified, "{setting} must drop some pairs");
        let report = dedup_json(&[
            dir.path().to_str().unwrap(),
            "-d",
            "12",
            "--verify",
            setting,
        ]);
        assert_eq!(report_groups(&report, &names, &fps), expected, "{setting}");
        for group in report["groups"].as_array().unwrap() {
            let members = group["members"].as_array().unwrap();
            let first = names
                .iter()
                .position(|n| n == members[0]["name"].as_str().unwrap())
                .unwrap();
            for m in members {
                let i = names
                    .iter()
                    .position(|n| n == m["name"].as_str().unwrap())
                    .unwrap();
                let j = m["jaccard"].as_f64().unwrap();
                assert!((j - shingles[first].jaccard(&shingles[i])).abs() < 1e-9);
            }
        }
    }
}

#[test]
fn html_counts_only_visible_text() {
    let dir = tempfile::tempdir().unwrap();
    let body = planted_texts(4, 1, 80).remove(0);
    let page = |script: &str, style: &str| {
        format!(
            "<html><head><title>T</title><style>{style}</style><script>{script}</script></head>\
             <body><div class=\"x\"><p>{body}</p></div></body></html>"
        )
    };
    fs::write(dir.path().join("a.html"), page("var a = 1;", "p{}")).unwrap();
    let long_script = planted_texts(5, 1, 300).remove(0);
    fs::write(
        dir.path().join("b.htm"),
        page(&long_script, "div { color: red }"),
    )
    .unwrap();
    // The same page under a plain-text name only counts as HTML with --html.
    fs::write(dir.path().join("c.txt"), page(&long_script, "")).unwrap();
    fs::write(dir.path().join("d.txt"), format!("T\n{body}")).unwrap();
    let hasher = Simhasher::default();
    let dir_arg = dir.path().to_str().unwrap();

    let report = dedup_json(&[dir_arg, "-d", "0"]);
    let groups = report["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{report}");
    let names: Vec<&str> = groups[0]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let join = |f: &str| dir.path().join(f).display().to_string();
    assert_eq!(names, [join("a.html"), join("b.htm"), join("d.txt")]);
    let fp = groups[0]["members"][0]["fingerprint"].as_u64().unwrap();
    assert_eq!(fp, hasher.fingerprint(&format!("T\n{body}")));

    let report = dedup_json(&[dir_arg, "-d", "0", "--html"]);
    let members = report["groups"][0]["members"].as_array().unwrap();
    assert_eq!(members.len(), 4, "{report}");
}

#[test]
fn unreadable_inputs_are_named_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let texts = planted_texts(6, 40, 30);
    let names = write_corpus(dir.path(), &texts);
    let dangling = dir.path().join("zz-dangling.txt");
    std::os::unix::fs::symlink(dir.path().join("gone"), &dangling).unwrap();
    let missing = dir.path().join("missing-file.txt");
    // Links inside directories are followed only with --follow.
    let out = simhashdb()
        .args(["dedup", "--json", "--follow", dir.path().to_str().unwrap()])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&dangling.display().to_string()), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(stderr.contains("skipped 2 input(s)"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["documents"].as_u64(), Some(40));
    assert_eq!(report["skipped"].as_array().unwrap().len(), 2);
    let hasher = Simhasher::default();
    let fps: Vec<u64> = texts.iter().map(|t| hasher.fingerprint(t)).collect();
    assert_eq!(
        report_groups(&report, &names, &fps),
        brute_force_groups(&fps, 3, |_, _| true)
    );
}

#[test]
fn text_output_lists_groups_with_distances() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.txt"), "one two three four five six").unwrap();
    fs::write(dir.path().join("b.txt"), "one two three four five six").unwrap();
    fs::write(dir.path().join("c.txt"), "something else entirely here").unwrap();
    fs::write(dir.path().join("empty.txt"), " \n").unwrap();
    let out = simhashdb()
        .args(["dedup", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let join = |f: &str| dir.path().join(f).display().to_string();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "2 near-duplicates (distance to the first):\n   0  {}\n   0  {}\n",
            join("a.txt"),
            join("b.txt")
        )
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 documents, 1 groups"), "{stderr}");
}

#[test]
fn the_example_corpus_shows_its_planted_groups() {
    let corpus = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/corpus");
    let report = dedup_json(&[corpus]);
    let groups: BTreeSet<BTreeSet<String>> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let name = m["name"].as_str().unwrap();
                    name.strip_prefix(corpus).unwrap().to_string()
                })
                .collect()
        })
        .collect();
    let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    // Exact copies, an edited reprint, an HTML page of a text file, and a
    // reposted Chinese text with two phrases reworded.
    assert!(groups.contains(&set(&[
        "/en/archive/lighthouse.txt",
        "/en/lighthouse-reprint.txt",
        "/en/lighthouse.txt"
    ])));
    assert!(groups.contains(&set(&["/en/sourdough.txt", "/web/sourdough.html"])));
    assert!(groups.contains(&set(&["/zh/chunjie-copy.txt", "/zh/chunjie.txt"])));
    assert!(groups.contains(&set(&["/zh/tea-repost.txt", "/zh/tea.txt"])));
    // Unrelated documents are in no group.
    for alone in ["/en/tides.txt", "/en/compost.txt", "/zh/greatwall.txt"] {
        assert!(groups.iter().all(|g| !g.contains(alone)), "{alone}");
    }
}

#[test]
fn a_closed_stdout_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lines.txt");
    // 20,000 pairs of identical lines: far more output than a pipe buffers.
    let data: String = (0..20_000)
        .map(|i| format!("line number {i} of many\nline number {i} of many\n"))
        .collect();
    fs::write(&path, data).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["dedup", "--lines", "-d", "0", path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.to_lowercase().contains("pipe"), "{stderr}");
}

#[test]
fn bad_arguments_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["--verify", "cosine:0.5"],
        vec!["--verify", "jaccard:2"],
        vec!["-d", "65"],
        vec!["--tokenizer", "nonsense"],
        vec!["--heading-weight", "-1"],
        vec!["--heading-weight", "0"],
    ] {
        simhashdb()
            .arg("dedup")
            .arg(dir.path())
            .args(&args)
            .assert()
            .code(2);
    }
}
