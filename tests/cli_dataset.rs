//! `simhashdb dedup` on datasets (JSONL, CSV/TSV, Parquet; gzip, zstd), run
//! as a real process on files written here with the real crates, and
//! checked against a brute-force computation: every pair's Hamming distance
//! and word 5-shingle Jaccard similarity, the documented length rule, direct grouping
//! (union-find components for --no-verify). The Parquet cases run in a
//! build with the `parquet` feature (as CI's); a build without it checks
//! that Parquet files are refused instead.
#![cfg(feature = "cli")]

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
#[cfg(feature = "parquet")]
use std::sync::Arc;

#[cfg(feature = "parquet")]
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use assert_cmd::Command;
use serde_json::{Value, json};
use simhashdb::recheck::ShingleSet;
use simhashdb::{Index, Simhasher, hamming};

use common::Rng;

fn simhashdb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simhashdb"))
}

#[derive(Clone, Debug)]
struct Rec {
    id: String,
    text: String,
    ts: i64,
}

/// Records of four lengths (about 60, 200, 650 and 1,600 characters) with
/// planted near-duplicates (one or two words replaced), exact copies,
/// shuffled copies (the same words in another order: simhash distance 0,
/// low bigram Jaccard) and unrelated records, in shuffled order.
fn dataset(seed: u64, count: usize) -> Vec<Rec> {
    let mut rng = Rng(seed);
    let vocabulary: Vec<String> = (0..500)
        .map(|i| format!("w{}x{}", i, rng.next() % 1000))
        .collect();
    let lengths = [8usize, 25, 80, 200];
    let mut texts: Vec<Vec<String>> = Vec::new();
    while texts.len() < count {
        let kind = rng.index(6);
        if kind == 0 && !texts.is_empty() {
            let original = texts[rng.index(texts.len())].clone();
            texts.push(original);
        } else if (kind == 1 || kind == 2) && !texts.is_empty() {
            let mut edited = texts[rng.index(texts.len())].clone();
            for _ in 0..=rng.index(2) {
                let at = rng.index(edited.len());
                edited[at] = vocabulary[rng.index(vocabulary.len())].clone();
            }
            texts.push(edited);
        } else if kind == 3 && !texts.is_empty() {
            let mut shuffled = texts[rng.index(texts.len())].clone();
            for i in (1..shuffled.len()).rev() {
                let j = rng.index(i + 1);
                shuffled.swap(i, j);
            }
            texts.push(shuffled);
        } else {
            let len = lengths[rng.index(lengths.len())];
            texts.push(
                (0..len)
                    .map(|_| vocabulary[rng.index(vocabulary.len())].clone())
                    .collect(),
            );
        }
    }
    texts
        .into_iter()
        .enumerate()
        .map(|(i, words)| Rec {
            id: format!("r{i}"),
            text: words.join(" "),
            ts: (rng.next() % 1000) as i64,
        })
        .collect()
}

/// The documented default check: word 5-shingle Jaccard at least this, for
/// every pair (the default candidate search must find them all here), or
/// for the pairs within `-d` when it is given.
const THRESHOLD: f64 = 0.8;

#[derive(Clone, Copy)]
enum Keep {
    First,
    Longest,
    Newest,
}

/// What `dedup` must answer, computed by brute force.
struct Expected {
    /// Ids of the kept records, in input order.
    kept: Vec<String>,
    /// (id, duplicate_of, distance, similarity) per dropped record, in input order.
    drops: Vec<(String, String, u32, Option<f64>)>,
    /// Groups as sorted id lists.
    groups: Vec<Vec<String>>,
}

fn expected(recs: &[Rec], verify: bool, distance: Option<u32>, keep: Keep) -> Expected {
    let hasher = Simhasher::default();
    let fps: Vec<u64> = recs.iter().map(|r| hasher.fingerprint(&r.text)).collect();
    let width = if verify { 5 } else { 2 };
    let sets: Vec<ShingleSet> = recs
        .iter()
        .map(|r| ShingleSet::from_text(&hasher, &r.text, width))
        .collect();
    let n = recs.len();
    let linked = |i: usize, j: usize| -> bool {
        let close = match (verify, distance) {
            (true, None) => true,
            (_, d) => hamming(fps[i], fps[j]) <= d.unwrap_or(3),
        };
        close && (!verify || sets[i].jaccard(&sets[j]) >= THRESHOLD)
    };
    let mut kept_of = vec![usize::MAX; n];
    let mut groups = Vec::new();
    if verify {
        // Direct: visit in keep order; drop against the most similar earlier kept record.
        let mut order: Vec<usize> = (0..n).collect();
        match keep {
            Keep::First => {}
            Keep::Longest => {
                order.sort_by_key(|&i| std::cmp::Reverse(recs[i].text.chars().count()))
            }
            Keep::Newest => order.sort_by(|&a, &b| recs[b].ts.cmp(&recs[a].ts)),
        }
        let mut is_kept = vec![false; n];
        for (r, &i) in order.iter().enumerate() {
            let mut best: Option<(f64, usize)> = None;
            for &j in &order[..r] {
                if is_kept[j] && linked(i, j) {
                    let s = sets[i].jaccard(&sets[j]);
                    if best.is_none_or(|(bs, _)| s > bs) {
                        best = Some((s, j));
                    }
                }
            }
            match best {
                Some((_, j)) => kept_of[i] = j,
                None => is_kept[i] = true,
            }
        }
        let mut by_kept: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, &k) in kept_of.iter().enumerate() {
            if k != usize::MAX {
                by_kept.entry(k).or_insert_with(|| vec![k]).push(i);
            }
        }
        for (k, members) in by_kept {
            kept_of[k] = k;
            let mut ids: Vec<String> = members.iter().map(|&m| recs[m].id.clone()).collect();
            ids.sort();
            groups.push(ids);
        }
    } else {
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                x = p[x];
            }
            x
        }
        for i in 0..n {
            for j in i + 1..n {
                if linked(i, j) {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut by_root: HashMap<usize, Vec<usize>> = HashMap::new();
        for i in 0..n {
            let r = root(&mut parent, i);
            by_root.entry(r).or_default().push(i);
        }
        for members in by_root.values().filter(|g| g.len() > 1) {
            let mut best = members[0];
            for &m in members {
                let better = match keep {
                    Keep::First => false,
                    Keep::Longest => recs[m].text.chars().count() > recs[best].text.chars().count(),
                    Keep::Newest => recs[m].ts > recs[best].ts,
                };
                if better {
                    best = m;
                }
            }
            for &m in members {
                kept_of[m] = best;
            }
            let mut ids: Vec<String> = members.iter().map(|&m| recs[m].id.clone()).collect();
            ids.sort();
            groups.push(ids);
        }
    }
    groups.sort();
    let mut kept = Vec::new();
    let mut drops = Vec::new();
    for i in 0..n {
        let k = kept_of[i];
        if k == usize::MAX || k == i {
            kept.push(recs[i].id.clone());
        } else {
            drops.push((
                recs[i].id.clone(),
                recs[k].id.clone(),
                hamming(fps[i], fps[k]),
                verify.then(|| sets[i].jaccard(&sets[k])),
            ));
        }
    }
    Expected {
        kept,
        drops,
        groups,
    }
}

fn json_line(r: &Rec) -> String {
    json!({"id": r.id, "meta": {"source": "test", "tags": [1, 2]}, "text": r.text, "ts": r.ts})
        .to_string()
}

fn jsonl_bytes(recs: &[Rec]) -> Vec<u8> {
    recs.iter()
        .map(|r| json_line(r) + "\n")
        .collect::<String>()
        .into_bytes()
}

fn csv_bytes(recs: &[Rec], delimiter: u8) -> Vec<u8> {
    let mut w = csv::WriterBuilder::new()
        .delimiter(delimiter)
        .from_writer(Vec::new());
    w.write_record(["id", "text", "ts"]).unwrap();
    for r in recs {
        w.write_record([r.id.as_str(), r.text.as_str(), &r.ts.to_string()])
            .unwrap();
    }
    w.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zstd_bytes(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

#[cfg(feature = "parquet")]
fn write_parquet(path: &Path, recs: &[Rec], codec: parquet::basic::Compression) {
    let batch = |part: &[Rec]| {
        let id: ArrayRef = Arc::new(StringArray::from_iter_values(part.iter().map(|r| &r.id)));
        let text: ArrayRef = Arc::new(StringArray::from_iter_values(part.iter().map(|r| &r.text)));
        let ts: ArrayRef = Arc::new(Int64Array::from_iter_values(part.iter().map(|r| r.ts)));
        RecordBatch::try_from_iter([("id", id), ("text", text), ("ts", ts)]).unwrap()
    };
    let (a, b) = recs.split_at(recs.len() / 3);
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(codec)
        .set_max_row_group_row_count(Some(50))
        .build();
    common::write_parquet_batches(path, &[batch(a), batch(b)], Some(props));
}

#[cfg(feature = "parquet")]
fn read_parquet_ids(path: &Path) -> Vec<String> {
    let file = fs::File::open(path).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .unwrap()
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        assert_eq!(batch.num_columns(), 3, "every column is kept");
        let col = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        ids.extend(col.iter().map(|v| v.unwrap().to_string()));
    }
    ids
}

fn read_csv_ids(bytes: &[u8], delimiter: u8) -> Vec<String> {
    let mut r = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .from_reader(bytes);
    assert_eq!(
        r.headers().unwrap().iter().collect::<Vec<_>>(),
        ["id", "text", "ts"]
    );
    r.records().map(|rec| rec.unwrap()[0].to_string()).collect()
}

fn decompress(path: &Path) -> Vec<u8> {
    let bytes = fs::read(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("gz") => {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut out)
                .unwrap();
            out
        }
        Some("zst") => zstd::decode_all(&bytes[..]).unwrap(),
        _ => bytes,
    }
}

fn dedup(args: &[&str]) -> (String, String) {
    let out = simhashdb().arg("dedup").args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "dedup {args:?} failed: {stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

/// Checks `--emit drop` output against the brute-force answer.
fn check_drops(output: &str, want: &Expected) {
    let got: Vec<Value> = output
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), want.drops.len(), "dropped records: {output}");
    for (g, (id, of, d, sim)) in got.iter().zip(&want.drops) {
        assert_eq!(g["id"], json!(id));
        assert_eq!(g["duplicate_of"], json!(of), "{g}");
        assert_eq!(g["distance"], json!(d), "{g}");
        match sim {
            Some(s) => assert!(
                (g["similarity"].as_f64().unwrap() - s).abs() < 1e-9,
                "{g} against {s}"
            ),
            None => assert!(g["similarity"].is_null()),
        }
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn verified_dedup_of_jsonl_matches_brute_force_for_keep_drop_and_groups() {
    let recs = dataset(7, 400);
    let want = expected(&recs, true, None, Keep::First);
    assert!(want.drops.len() >= 50, "the data has duplicates to find");
    // The shuffled copies are candidates (distance 0) that the check rejects.
    let plain = expected(&recs, false, Some(0), Keep::First);
    assert!(
        plain
            .drops
            .iter()
            .any(|d| !want.drops.iter().any(|w| w.0 == d.0)),
        "the data has candidates the Jaccard check must reject"
    );

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.jsonl");
    fs::write(&input, jsonl_bytes(&recs)).unwrap();

    // keep: the surviving lines, byte for byte, in input order.
    let out = dir.path().join("kept.jsonl");
    let stats = dir.path().join("stats.json");
    let (_, stderr) = dedup(&[
        path_str(&input),
        "-o",
        path_str(&out),
        "--stats-json",
        path_str(&stats),
    ]);
    let by_id: HashMap<&str, &Rec> = recs.iter().map(|r| (r.id.as_str(), r)).collect();
    let expected_lines: String = want
        .kept
        .iter()
        .map(|id| json_line(by_id[id.as_str()]) + "\n")
        .collect();
    assert_eq!(fs::read_to_string(&out).unwrap(), expected_lines);
    let s: Value = serde_json::from_slice(&fs::read(&stats).unwrap()).unwrap();
    assert_eq!(s["records"], json!(recs.len()));
    assert_eq!(s["dropped"], json!(want.drops.len()));
    assert_eq!(s["kept"], json!(want.kept.len()));
    assert_eq!(s["groups"], json!(want.groups.len()));
    assert!(
        stderr.contains(&format!(
            "{} records, {} dropped",
            recs.len(),
            want.drops.len()
        )),
        "{stderr}"
    );

    // drop: one line per removed record (ids from --id-field).
    let (stdout, _) = dedup(&[path_str(&input), "--emit", "drop", "--id-field", "id"]);
    check_drops(&stdout, &want);

    // groups: every group, the kept record first.
    let (stdout, _) = dedup(&[path_str(&input), "--emit", "groups", "--id-field", "id"]);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let mut groups: Vec<Vec<String>> = report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let members = g["members"].as_array().unwrap();
            assert_eq!(members[0]["kept"], json!(true));
            let mut ids: Vec<String> = members
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect();
            ids.sort();
            ids
        })
        .collect();
    groups.sort();
    assert_eq!(groups, want.groups);
}

#[test]
fn default_ids_are_record_positions_and_keep_goes_to_standard_output() {
    let recs = dataset(3, 120);
    let want = expected(&recs, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.ndjson");
    fs::write(&input, jsonl_bytes(&recs)).unwrap();
    let (stdout, _) = dedup(&[path_str(&input), "--emit", "drop"]);
    let position = |id: &str| recs.iter().position(|r| r.id == id).unwrap();
    for (line, (id, of, _, _)) in stdout.lines().zip(&want.drops) {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["id"], json!(position(id)));
        assert_eq!(v["duplicate_of"], json!(position(of)));
    }
    assert_eq!(stdout.lines().count(), want.drops.len());
    let (stdout, _) = dedup(&[path_str(&input)]);
    let ids: Vec<String> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, want.kept);
}

#[test]
fn no_verify_is_plain_simhash_at_the_given_distance() {
    let recs = dataset(11, 300);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.jsonl");
    fs::write(&input, jsonl_bytes(&recs)).unwrap();
    for d in [None, Some(6)] {
        let want = expected(&recs, false, d, Keep::First);
        let mut args = vec![
            path_str(&input),
            "--no-verify",
            "--emit",
            "drop",
            "--id-field",
            "id",
        ];
        let ds;
        if let Some(d) = d {
            ds = d.to_string();
            args.extend(["-d", &ds]);
        }
        let (stdout, _) = dedup(&args);
        check_drops(&stdout, &want);
    }
    // An explicit distance with verification: candidates at that distance,
    // the length rule's threshold.
    let want = expected(&recs, true, Some(2), Keep::First);
    let (stdout, _) = dedup(&[
        path_str(&input),
        "-d",
        "2",
        "--emit",
        "drop",
        "--id-field",
        "id",
    ]);
    check_drops(&stdout, &want);
}

#[test]
fn every_format_and_compression_gives_the_brute_force_result() {
    let recs = dataset(5, 300);
    let want = expected(&recs, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let jsonl = jsonl_bytes(&recs);
    let csv = csv_bytes(&recs, b',');
    let tsv = csv_bytes(&recs, b'\t');
    let mut inputs: Vec<(PathBuf, &str)> = Vec::new();
    for (name, bytes) in [
        ("d.jsonl", jsonl.clone()),
        ("d.jsonl.gz", gzip(&jsonl)),
        ("d.jsonl.zst", zstd_bytes(&jsonl)),
        ("d.csv", csv.clone()),
        ("d.csv.gz", gzip(&csv)),
        ("d.csv.zst", zstd_bytes(&csv)),
        ("d.tsv", tsv.clone()),
        ("d.tsv.gz", gzip(&tsv)),
        ("d.tsv.zst", zstd_bytes(&tsv)),
    ] {
        let p = dir.path().join(name);
        fs::write(&p, bytes).unwrap();
        inputs.push((p, name));
    }
    #[cfg(feature = "parquet")]
    for (name, codec) in {
        use parquet::basic::{Compression, GzipLevel, ZstdLevel};
        [
            ("plain.parquet", Compression::UNCOMPRESSED),
            ("snappy.parquet", Compression::SNAPPY),
            ("zstd.parquet", Compression::ZSTD(ZstdLevel::default())),
            ("gzip.parquet", Compression::GZIP(GzipLevel::default())),
        ]
    } {
        let p = dir.path().join(name);
        write_parquet(&p, &recs, codec);
        inputs.push((p, name));
    }
    for (input, name) in &inputs {
        let (stdout, _) = dedup(&[path_str(input), "--emit", "drop", "--id-field", "id"]);
        check_drops(&stdout, &want);
        // keep, in the input's format and compression.
        let out = dir.path().join(format!("out-{name}"));
        dedup(&[path_str(input), "-o", path_str(&out)]);
        #[cfg(feature = "parquet")]
        if name.ends_with(".parquet") {
            assert_eq!(read_parquet_ids(&out), want.kept, "{name}");
            continue;
        }
        let ids = if name.contains(".jsonl") {
            String::from_utf8(decompress(&out))
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap()["id"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect()
        } else {
            let delimiter = if name.contains(".tsv") { b'\t' } else { b',' };
            read_csv_ids(&decompress(&out), delimiter)
        };
        assert_eq!(ids, want.kept, "{name}");
    }
}

#[test]
fn a_directory_of_shards_is_one_dataset_and_ids_name_the_kept_record_across_files() {
    let recs = dataset(13, 300);
    let want = expected(&recs, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    fs::create_dir(&shards).unwrap();
    let (a, rest) = recs.split_at(100);
    let (b, c) = rest.split_at(100);
    fs::write(shards.join("part-0.jsonl"), jsonl_bytes(a)).unwrap();
    fs::write(shards.join("part-1.jsonl.gz"), gzip(&jsonl_bytes(b))).unwrap();
    fs::write(shards.join("part-2.jsonl.zst"), zstd_bytes(&jsonl_bytes(c))).unwrap();
    // A job's marker file next to the shards is not a dataset file.
    fs::write(shards.join("_SUCCESS"), b"").unwrap();
    let (stdout, _) = dedup(&[path_str(&shards), "--emit", "drop", "--id-field", "id"]);
    check_drops(&stdout, &want);
}

#[test]
fn keep_longest_and_newest_keep_the_stated_record() {
    let recs = dataset(17, 300);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.jsonl");
    fs::write(&input, jsonl_bytes(&recs)).unwrap();
    #[cfg_attr(not(feature = "parquet"), allow(unused_mut))]
    let mut inputs = vec![input];
    #[cfg(feature = "parquet")]
    {
        let parquet_input = dir.path().join("data.parquet");
        write_parquet(&parquet_input, &recs, parquet::basic::Compression::SNAPPY);
        inputs.push(parquet_input);
    }
    for (keep, rule) in [(Keep::Longest, "longest"), (Keep::Newest, "newest:ts")] {
        let want = expected(&recs, true, None, keep);
        assert!(
            want.drops.iter().any(|d| {
                let pos = |id: &str| recs.iter().position(|r| r.id == id).unwrap();
                pos(&d.1) > pos(&d.0)
            }),
            "{rule}: some group keeps a later record"
        );
        for input in &inputs {
            let (stdout, _) = dedup(&[
                path_str(input),
                "--emit",
                "drop",
                "--id-field",
                "id",
                "--keep",
                rule,
            ]);
            check_drops(&stdout, &want);
        }
    }
}

#[test]
fn checking_in_a_small_memory_budget_takes_more_passes_and_gives_the_same_answer() {
    let recs = dataset(19, 400);
    let want = expected(&recs, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.jsonl.gz");
    fs::write(&input, gzip(&jsonl_bytes(&recs))).unwrap();
    let (stdout, s) = dedup_drops_with_stats(&input, &["--verify-memory", "2K"]);
    check_drops(&stdout, &want);
    assert!(s["verify_passes"].as_u64().unwrap() > 2, "{s}");
    let steps = s["seconds_by_step"].as_object().unwrap();
    for step in ["read", "candidates", "check", "groups", "report", "output"] {
        assert!(steps[step].as_f64().unwrap() >= 0.0, "{step}: {s}");
    }
    let total: f64 = steps.values().map(|v| v.as_f64().unwrap()).sum();
    assert!(total <= s["seconds"].as_f64().unwrap(), "{s}");
}

#[test]
fn candidates_whose_set_sizes_rule_them_out_are_not_checked_and_the_answer_holds() {
    let mut recs = dataset(23, 300);
    // Two-thirds prefixes of long records: their shingles are a subset of
    // the whole's, so most share a band with it, but the sets' sizes alone
    // keep the Jaccard near 0.66, below the threshold of 0.8.
    let prefixes: Vec<Rec> = recs
        .iter()
        .filter(|r| r.text.split(' ').count() >= 80)
        .take(30)
        .map(|r| {
            let words: Vec<&str> = r.text.split(' ').collect();
            Rec {
                id: format!("{}-prefix", r.id),
                text: words[..words.len() * 2 / 3].join(" "),
                ts: r.ts,
            }
        })
        .collect();
    assert_eq!(prefixes.len(), 30);
    // And copies with one word more: sets of different sizes that are
    // near-duplicates all the same.
    let longer: Vec<Rec> = recs
        .iter()
        .filter(|r| r.text.split(' ').count() >= 25)
        .take(30)
        .map(|r| Rec {
            id: format!("{}-longer", r.id),
            text: format!("{} appended", r.text),
            ts: r.ts,
        })
        .collect();
    recs.extend(prefixes);
    recs.extend(longer);
    let want = expected(&recs, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("data.jsonl");
    fs::write(&input, jsonl_bytes(&recs)).unwrap();
    let (stdout, s) = dedup_drops_with_stats(&input, &[]);
    check_drops(&stdout, &want);
    let bounded = s["pairs_bounded_by_size"].as_u64().unwrap();
    assert!(bounded >= 20, "{s}");
    assert!(bounded < s["candidate_pairs"].as_u64().unwrap(), "{s}");
}

/// `dedup INPUT --emit drop --id-field id EXTRA...` with `--stats-json`
/// (next to the input): the drops and the statistics.
fn dedup_drops_with_stats(input: &Path, extra: &[&str]) -> (String, Value) {
    let stats = input.with_file_name("stats.json");
    let mut args = vec![path_str(input), "--emit", "drop", "--id-field", "id"];
    args.extend_from_slice(extra);
    args.extend(["--stats-json", path_str(&stats)]);
    let (stdout, _) = dedup(&args);
    let s = serde_json::from_slice(&fs::read(&stats).unwrap()).unwrap();
    (stdout, s)
}

/// Runs a dedup that must fail with exit code 2 on bad input, and checks
/// that the message names `names` and that nothing was written.
fn refused(dir: &Path, args: &[&str], names: &[&str]) {
    let before: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    // The output in the input's format (what `--emit keep` writes).
    let ext = [".parquet", ".csv"]
        .into_iter()
        .find(|e| args[0].ends_with(e))
        .unwrap_or(".jsonl");
    let out = dir.join(format!("out{ext}"));
    let output = simhashdb()
        .arg("dedup")
        .args(args)
        .args(["-o", path_str(&out)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    for name in names {
        assert!(stderr.contains(name), "{args:?}: `{name}` not in: {stderr}");
    }
    let after: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after, "nothing is left behind");
}

#[test]
fn bad_records_are_refused_naming_file_and_record_and_nothing_is_written() {
    let recs = dataset(23, 30);
    let good: Vec<String> = recs.iter().map(json_line).collect();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let with_line = |n: usize, bad: &str| -> String {
        let mut lines = good.clone();
        lines[n - 1] = bad.to_string();
        lines.join("\n") + "\n"
    };
    let cases = [
        (
            "invalid.jsonl",
            with_line(7, "{\"id\": \"x\", \"text\": \"cut"),
            "line 7",
        ),
        (
            "missing.jsonl",
            with_line(4, "{\"id\": \"x\", \"body\": \"no text\"}"),
            "line 4",
        ),
        (
            "number.jsonl",
            with_line(12, "{\"id\": \"x\", \"text\": 42}"),
            "line 12",
        ),
        ("array.jsonl", with_line(2, "[1, 2]"), "line 2"),
    ];
    for (name, content, at) in &cases {
        let sub = d.join(name.replace('.', "_"));
        fs::create_dir(&sub).unwrap();
        let p = sub.join(name);
        fs::write(&p, content).unwrap();
        refused(&sub, &[path_str(&p)], &[name, at]);
    }

    // A cut-off gzip or zstd stream.
    let big = dataset(29, 3000);
    let bytes = jsonl_bytes(&big);
    for (name, compressed) in [
        ("cut.jsonl.gz", gzip(&bytes)),
        ("cut.jsonl.zst", zstd_bytes(&bytes)),
    ] {
        let sub = d.join(name.replace('.', "_"));
        fs::create_dir(&sub).unwrap();
        let p = sub.join(name);
        fs::write(&p, &compressed[..compressed.len() / 2]).unwrap();
        refused(&sub, &[path_str(&p)], &[name, "cut off", "line "]);
    }

    // A Parquet file whose text column is not a string, one without it, and
    // one that is not a Parquet file at all.
    #[cfg(feature = "parquet")]
    {
        let sub = d.join("parquet");
        fs::create_dir(&sub).unwrap();
        let p = sub.join("numbers.parquet");
        {
            let text: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10));
            let batch = RecordBatch::try_from_iter([("text", text)]).unwrap();
            common::write_parquet_batches(&p, &[batch], None);
        }
        refused(
            &sub,
            &[path_str(&p)],
            &["numbers.parquet", "record 1", "`text`", "Int64"],
        );
        let sub = d.join("parquet2");
        fs::create_dir(&sub).unwrap();
        let p = sub.join("other.parquet");
        write_parquet(&p, &recs, parquet::basic::Compression::SNAPPY);
        refused(
            &sub,
            &[path_str(&p), "--text-field", "body"],
            &["other.parquet", "`body`"],
        );
        let sub = d.join("parquet3");
        fs::create_dir(&sub).unwrap();
        let p = sub.join("fake.parquet");
        fs::write(&p, b"not parquet").unwrap();
        refused(&sub, &[path_str(&p)], &["fake.parquet"]);
    }

    // A CSV without the text column, and one with a ragged record.
    let sub = d.join("csv");
    fs::create_dir(&sub).unwrap();
    let p = sub.join("nocol.csv");
    fs::write(&p, "id,body\n1,hello world\n").unwrap();
    refused(&sub, &[path_str(&p)], &["nocol.csv", "`text`"]);
    let sub = d.join("csv2");
    fs::create_dir(&sub).unwrap();
    let p = sub.join("ragged.csv");
    fs::write(&p, "id,text\n1,hello world\n2,a,b\n3,c\n").unwrap();
    refused(&sub, &[path_str(&p)], &["ragged.csv", "record 2"]);

    // A bad record in a later file: the earlier file's output is not written.
    let sub = d.join("two");
    fs::create_dir(&sub).unwrap();
    let a = sub.join("a.jsonl");
    let b = sub.join("b.jsonl");
    fs::write(&a, jsonl_bytes(&recs)).unwrap();
    fs::write(&b, with_line(3, "{\"text\": null}")).unwrap();
    refused(&sub, &[path_str(&a), path_str(&b)], &["b.jsonl", "line 3"]);
}

/// A build without the `parquet` feature (the default build) refuses a
/// Parquet input, named by its extension or by `--format parquet`, and a
/// Parquet output, with exit code 2 and a message naming the file and how
/// to get a build with Parquet, before anything is written: no output, no
/// `--add-to` index. (The decision is `check_supported` in
/// src/bin/simhashdb/dataset/read.rs, unit-tested in both builds; CI builds
/// with the feature, where the Parquet cases above run instead.)
#[cfg(not(feature = "parquet"))]
#[test]
fn a_build_without_parquet_refuses_parquet_files_naming_them_before_writing_anything() {
    let recs = dataset(31, 30);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let how = [
        "--features parquet",
        "python/build-wheel.sh",
        "nothing was written",
    ];
    // A Parquet file (its magic bytes; this build cannot write a real one,
    // and the refusal comes before the file is opened).
    let sub = d.join("by_name");
    fs::create_dir(&sub).unwrap();
    let p = sub.join("data.parquet");
    fs::write(&p, b"PAR1\0\0\0\0PAR1").unwrap();
    let names = [&["data.parquet"][..], &how].concat();
    refused(&sub, &[path_str(&p)], &names);
    let db = sub.join("db");
    refused(
        &sub,
        &[
            path_str(&p),
            "--emit",
            "drop",
            "--id-field",
            "id",
            "--add-to",
            path_str(&db),
        ],
        &names,
    );
    assert!(!db.exists());
    // A JSONL file read as Parquet.
    let sub = d.join("by_format");
    fs::create_dir(&sub).unwrap();
    let p = sub.join("data.jsonl");
    fs::write(&p, jsonl_bytes(&recs)).unwrap();
    let names = [&["data.jsonl"][..], &how].concat();
    refused(
        &sub,
        &[path_str(&p), "--format", "parquet", "--emit", "groups"],
        &names,
    );
    // A Parquet shard among JSONL shards: the JSONL ones are not read.
    let sub = d.join("shards");
    fs::create_dir(&sub).unwrap();
    fs::write(sub.join("part-0.jsonl"), jsonl_bytes(&recs)).unwrap();
    fs::write(sub.join("part-1.parquet"), b"PAR1\0\0\0\0PAR1").unwrap();
    let names = [&["part-1.parquet"][..], &how].concat();
    refused(&sub, &[path_str(&sub), "--emit", "drop"], &names);
    // A Parquet output (`--emit keep` writes the input's format).
    let sub = d.join("output");
    fs::create_dir(&sub).unwrap();
    let p = sub.join("data.jsonl");
    fs::write(&p, jsonl_bytes(&recs)).unwrap();
    let out = sub.join("kept.parquet");
    let result = simhashdb()
        .args(["dedup", path_str(&p), "-o", path_str(&out)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("kept.parquet"), "{stderr}");
    assert!(!out.exists());
    // The help says what this build reads.
    let help = simhashdb().args(["dedup", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("the `parquet` feature"), "{help}");
}

#[test]
fn dataset_options_need_dataset_inputs_and_keep_writes_the_input_format() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("a.txt");
    fs::write(&txt, "hello world\n").unwrap();
    let out = simhashdb()
        .args(["dedup", path_str(&txt), "--emit", "drop"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let csv = dir.path().join("a.csv");
    fs::write(&csv, "text\nhello world\n").unwrap();
    let target = dir.path().join("out.jsonl");
    let out = simhashdb()
        .args(["dedup", path_str(&csv), "-o", path_str(&target)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("csv"));
    assert!(!target.exists());
    // --add-to needs ids.
    let jsonl = dir.path().join("a.jsonl");
    fs::write(&jsonl, "{\"text\": \"hello world\"}\n").unwrap();
    let db = dir.path().join("db");
    let out = simhashdb()
        .args(["dedup", path_str(&jsonl), "--add-to", path_str(&db)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!db.exists());
}

#[test]
fn add_to_then_against_finds_the_old_corpus_in_a_new_crawl() {
    let recs = dataset(31, 300);
    let (old, new) = recs.split_at(150);
    let want_old = expected(old, true, None, Keep::First);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let old_path = dir.path().join("old.jsonl");
    fs::write(&old_path, jsonl_bytes(old)).unwrap();
    let (stdout, _) = dedup(&[
        path_str(&old_path),
        "--id-field",
        "id",
        "--add-to",
        path_str(&db),
    ]);
    // The survivors are in the index under doc_id(id), named by their id.
    let index = Index::open_read_only(&db).unwrap();
    let mut stored: Vec<String> = Vec::new();
    index
        .for_each_doc(|d| {
            assert_eq!(d.id, simhashdb::doc_id(d.name.as_deref().unwrap()));
            stored.push(d.name.clone().unwrap());
        })
        .unwrap();
    stored.sort();
    let mut kept = want_old.kept.clone();
    kept.sort();
    assert_eq!(stored, kept);
    assert_eq!(stdout.lines().count(), want_old.kept.len());
    drop(index);

    // The new crawl: duplicates within it as usual; a survivor within
    // distance 3 of an indexed document is dropped as a duplicate of it.
    let new_path = dir.path().join("new.jsonl");
    fs::write(&new_path, jsonl_bytes(new)).unwrap();
    let (stdout, _) = dedup(&[
        path_str(&new_path),
        "--id-field",
        "id",
        "--emit",
        "drop",
        "--against",
        path_str(&db),
    ]);
    let hasher = Simhasher::default();
    let within = expected(new, true, None, Keep::First);
    let old_fps: Vec<(u64, &str)> = old
        .iter()
        .filter(|r| want_old.kept.contains(&r.id))
        .map(|r| (hasher.fingerprint(&r.text), r.id.as_str()))
        .collect();
    let mut want: Vec<(String, Vec<&str>)> = Vec::new();
    for r in new {
        let dropped_within = within.drops.iter().any(|d| d.0 == r.id);
        let fp = hasher.fingerprint(&r.text);
        let nearest = old_fps.iter().map(|&(f, _)| hamming(f, fp)).min().unwrap();
        if dropped_within {
            want.push((r.id.clone(), vec![]));
        } else if nearest <= 3 {
            let ids = old_fps
                .iter()
                .filter(|&&(f, _)| hamming(f, fp) == nearest)
                .map(|&(_, id)| id)
                .collect();
            want.push((r.id.clone(), ids));
        }
    }
    assert!(
        want.iter().any(|w| !w.1.is_empty()),
        "the new crawl repeats old records"
    );
    let got: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), want.len(), "{stdout}");
    for (g, (id, in_index)) in got.iter().zip(&want) {
        assert_eq!(g["id"], json!(id));
        if in_index.is_empty() {
            assert!(g.get("in_index").is_none(), "{g}");
        } else {
            assert_eq!(g["in_index"], json!(true));
            assert!(g["similarity"].is_null());
            assert!(
                in_index.contains(&g["duplicate_of"].as_str().unwrap()),
                "{g} against {in_index:?}"
            );
        }
    }
}

#[test]
fn a_record_similar_only_to_a_dropped_record_is_kept() {
    // A ~ B and B ~ C pass the check, A and C do not: connected components
    // would drop B and C; the direct rule drops B against A and keeps C.
    let words: Vec<String> = (0..60).map(|i| format!("word{i}")).collect();
    let a = words.join(" ");
    let mut b_words = words.clone();
    b_words[20] = "changed".into();
    let b = b_words.join(" ");
    let mut c_words = b_words.clone();
    c_words[45] = "altered".into();
    let c = c_words.join(" ");
    let hasher = Simhasher::default();
    let set = |t: &str| ShingleSet::from_text(&hasher, t, 5);
    assert!(set(&a).jaccard(&set(&b)) >= 0.8);
    assert!(set(&b).jaccard(&set(&c)) >= 0.8);
    assert!(set(&a).jaccard(&set(&c)) < 0.8);
    let fp = |t: &str| hasher.fingerprint(t);
    let d = hamming(fp(&a), fp(&b))
        .max(hamming(fp(&b), fp(&c)))
        .max(hamming(fp(&a), fp(&c)));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("chain.jsonl");
    let lines: Vec<String> = [("a", &a), ("b", &b), ("c", &c)]
        .iter()
        .map(|(id, t)| json!({"id": id, "text": t}).to_string() + "\n")
        .collect();
    fs::write(&input, lines.concat()).unwrap();
    let ds = d.to_string();
    let (stdout, _) = dedup(&[
        path_str(&input),
        "-d",
        &ds,
        "--emit",
        "drop",
        "--id-field",
        "id",
    ]);
    let drops: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(drops.len(), 1, "{stdout}");
    assert_eq!(drops[0]["id"], "b");
    assert_eq!(drops[0]["duplicate_of"], "a");
    let (kept, _) = dedup(&[
        path_str(&input),
        "-d",
        &ds,
        "--emit",
        "keep",
        "--id-field",
        "id",
    ]);
    let ids: Vec<String> = kept
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["a", "c"]);
}
