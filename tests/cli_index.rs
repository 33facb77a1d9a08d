//! The index commands (`create`, `add`, `query`, `check`, `get`, `delete`,
//! `compact`, `verify`, `stats`) as real processes, checked against
//! brute-force scans and a model of check-and-insert.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;

use serde_json::Value;
use simhashdb::fingerprint::fnv1a64;
use simhashdb::sketch::Sketch;
use simhashdb::{Simhasher, Tokenizer, hamming};

use common::Rng;
use common::cli::{ok, run};

fn json(args: &[&str]) -> Value {
    serde_json::from_str(&ok(args, b"")).unwrap()
}

/// Texts of `words` words, about half of them copies or edits (one or two
/// words replaced) of earlier ones.
fn planted_texts(seed: u64, count: usize, words: usize) -> Vec<String> {
    let mut rng = Rng(seed);
    let vocabulary: Vec<String> = (0..300)
        .map(|i| format!("v{i}q{}", rng.next() % 97))
        .collect();
    let mut texts: Vec<Vec<String>> = Vec::new();
    while texts.len() < count {
        if !texts.is_empty() && rng.index(2) == 0 {
            let mut copy = texts[rng.index(texts.len())].clone();
            for _ in 0..rng.index(3) {
                let at = rng.index(copy.len());
                copy[at] = vocabulary[rng.index(vocabulary.len())].clone();
            }
            texts.push(copy);
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

/// `(id, distance)` of every document within `k` of `fp`, by brute force.
fn brute_force(docs: &[(u64, u64)], fp: u64, k: u32) -> BTreeSet<(u64, u32)> {
    docs.iter()
        .filter(|(_, f)| hamming(*f, fp) <= k)
        .map(|&(id, f)| (id, hamming(f, fp)))
        .collect()
}

fn matches(report: &Value) -> BTreeSet<(u64, u32)> {
    report["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap(),
                m["distance"].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

fn write_files(dir: &Path, texts: &[String]) -> Vec<String> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let path = dir.join(format!("doc{i:03}.txt"));
            fs::write(&path, t).unwrap();
            path.display().to_string()
        })
        .collect()
}

#[test]
fn add_files_then_query_equals_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let docs_dir = dir.path().join("docs");
    fs::create_dir(&docs_dir).unwrap();
    let texts = planted_texts(11, 120, 40);
    let names = write_files(&docs_dir, &texts);
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let out = ok(&["add", "--db", db, docs_dir.to_str().unwrap()], b"");
    assert_eq!(out, format!("added 120 documents to {db}\n"));

    let hasher = Simhasher::default();
    let docs: Vec<(u64, u64)> = names
        .iter()
        .zip(&texts)
        .map(|(n, t)| (fnv1a64(n.as_bytes()), hasher.fingerprint(t)))
        .collect();
    let mut rng = Rng(5);
    for round in 0..20 {
        let text = &texts[rng.index(texts.len())];
        let fp = hasher.fingerprint(text);
        let report = json(&["query", "--db", db, "--text", text, "--json"]);
        assert_eq!(report["fingerprint"].as_u64(), Some(fp));
        // A query by text answers by the verified rule: every document of
        // the new index (k = 6) within 6 whose texts' estimated similarity
        // reaches the threshold.
        let sketch = Sketch::from_text(&hasher, text);
        let expected: BTreeSet<(u64, u32)> = docs
            .iter()
            .zip(&texts)
            .filter(|((_, f), t)| {
                hamming(*f, fp) <= 6
                    && Sketch::from_text(&hasher, t).similarity(&sketch)
                        >= Sketch::threshold_for(text)
            })
            .map(|((id, f), _)| (*id, hamming(*f, fp)))
            .collect();
        assert!(!expected.is_empty());
        assert_eq!(matches(&report), expected, "round {round}");
        assert!(
            report["matches"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["rule"] == "sketch" && m["similarity"].as_f64().is_some())
        );
        // Names come back with matches.
        for m in report["matches"].as_array().unwrap() {
            let i = docs.iter().position(|d| d.0 == m["id"].as_u64().unwrap());
            assert_eq!(m["name"].as_str(), Some(names[i.unwrap()].as_str()));
        }
        // A smaller distance, by fingerprint.
        let near = fp ^ (1 << rng.index(64));
        let report = json(&[
            "query",
            "--db",
            db,
            "--fp",
            &near.to_string(),
            "-d",
            "2",
            "--json",
        ]);
        assert_eq!(matches(&report), brute_force(&docs, near, 2));
    }
    // By file, in the text format:
    // DISTANCE<TAB>ID<TAB>NAME<TAB>SIMILARITY<TAB>RULE, most similar first.
    let text = ok(&["query", "--db", db, &names[7]], b"");
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!("0\t{}\t{}\t1.000\tsketch", docs[7].0, names[7])
    );
    let report = json(&["query", "--db", db, "--text", &texts[7], "--json"]);
    assert_eq!(
        text.lines().count(),
        report["matches"].as_array().unwrap().len()
    );
}

#[test]
fn named_texts_from_stdin_get_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let texts = planted_texts(12, 3, 30);
    let input = format!(
        "https://example.com/a\t{}\nhttps://example.com/b\t{}\nhttps://example.com/c\t{}\n",
        texts[0], texts[1], texts[2]
    );
    ok(&["add", "--db", db, "-"], input.as_bytes());
    let hasher = Simhasher::default();
    let id_a = fnv1a64(b"https://example.com/a");
    let line = ok(&["get", "--db", db, "https://example.com/a"], b"");
    let fields: Vec<&str> = line.trim_end().split('\t').collect();
    assert_eq!(fields[0], id_a.to_string());
    assert_eq!(fields[1], hasher.fingerprint(&texts[0]).to_string());
    assert!(fields[2].parse::<u64>().unwrap() > 1_600_000_000_000);
    assert_eq!(fields[3], "https://example.com/a");
    let by_id = json(&["get", "--db", db, "--id", &id_a.to_string(), "--json"]);
    assert_eq!(by_id["name"].as_str(), Some("https://example.com/a"));

    let out = ok(
        &[
            "delete",
            "--db",
            db,
            "https://example.com/a",
            "--id",
            &fnv1a64(b"https://example.com/b").to_string(),
        ],
        b"",
    );
    assert_eq!(
        out,
        format!(
            "deleted https://example.com/a\ndeleted id {}\n",
            fnv1a64(b"https://example.com/b")
        )
    );
    let out = run(&["get", "--db", db, "https://example.com/a"], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not found: https://example.com/a"));
    let report = json(&["query", "--db", db, "--text", &texts[0], "--json"]);
    assert!(matches(&report).iter().all(|&(id, _)| id != id_a));
    let out = run(
        &[
            "delete",
            "--db",
            db,
            "https://example.com/a",
            "https://example.com/c",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deleted https://example.com/c\n"
    );
    assert_eq!(
        json(&["stats", "--db", db, "--json"])["documents"].as_u64(),
        Some(0)
    );
}

#[test]
fn fingerprint_lines_are_added_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let mut rng = Rng(13);
    let mut docs: Vec<(u64, u64)> = Vec::new();
    let mut input = String::new();
    for id in 0..500u64 {
        let fp = if id % 4 == 3 {
            docs[rng.index(docs.len())].1 ^ (1 << rng.index(64)) ^ (1 << rng.index(64))
        } else {
            rng.next()
        };
        docs.push((id, fp));
        if id % 2 == 0 {
            input.push_str(&format!("{id}\t{fp}\tdoc {id}\n"));
        } else {
            input.push_str(&format!("{id}\t{fp}\n"));
        }
    }
    let file = dir.path().join("fps.tsv");
    fs::write(&file, &input).unwrap();
    ok(
        &["add", "--db", db, "--fingerprints", file.to_str().unwrap()],
        b"",
    );
    for &(id, fp) in docs.iter().step_by(7) {
        let report = json(&["query", "--db", db, "--fp", &fp.to_string(), "--json"]);
        assert_eq!(matches(&report), brute_force(&docs, fp, 3));
        let named = report["matches"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"].as_u64() == Some(id))
            .unwrap();
        let expected_name = (id % 2 == 0).then(|| format!("doc {id}"));
        assert_eq!(named["name"].as_str(), expected_name.as_deref());
    }
    // Re-adding an id replaces its fingerprint.
    ok(&["add", "--db", db, "--fingerprints", "-"], b"0\t12345\n");
    assert_eq!(
        json(&["get", "--db", db, "--id", "0", "--json"])["fingerprint"].as_u64(),
        Some(12345)
    );
}

#[test]
fn check_answers_like_a_sequential_model() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let texts = planted_texts(14, 300, 25);
    let hasher = Simhasher::default();
    let mut input = String::new();
    let mut expected = String::new();
    // The verified rule, from the texts: a kept document within the new
    // index's k (6) whose sketch's estimated similarity reaches the text's
    // threshold; the most similar is named (then the smallest id).
    let mut kept: Vec<(u64, u64, Sketch, String)> = Vec::new();
    let mut rejected = 0;
    for (i, text) in texts.iter().enumerate() {
        let name = format!("https://site.example/page/{i}");
        input.push_str(&format!("{name}\t{text}\n"));
        let fp = hasher.fingerprint(text);
        let sketch = Sketch::from_text(&hasher, text);
        let threshold = Sketch::threshold_for(text);
        let id = fnv1a64(name.as_bytes());
        let near = kept.iter().filter(|(_, f, _, _)| hamming(*f, fp) <= 6);
        rejected += near
            .clone()
            .filter(|(_, _, s, _)| s.similarity(&sketch) < threshold)
            .count();
        let best = near
            .filter(|(_, _, s, _)| s.similarity(&sketch) >= threshold)
            .min_by(|a, b| {
                b.2.similarity(&sketch)
                    .total_cmp(&a.2.similarity(&sketch))
                    .then(a.0.cmp(&b.0))
            });
        match best {
            Some((_, f, s, n)) => expected.push_str(&format!(
                "dup\t{n}\t{}\t{:.3}\tsketch\n",
                hamming(*f, fp),
                s.similarity(&sketch)
            )),
            None => {
                expected.push_str("new\n");
                kept.push((id, fp, sketch, name));
            }
        }
    }
    assert!(rejected > 0, "some candidate turned away by its sketch");
    assert!(kept.len() < 250 && kept.len() > 50, "{}", kept.len());
    assert_eq!(ok(&["check", "--db", db], input.as_bytes()), expected);
    assert_eq!(
        json(&["stats", "--db", db, "--json"])["documents"].as_u64(),
        Some(kept.len() as u64)
    );
    // Run again: every document is now a duplicate (of itself, or of the
    // one that kept it out), and nothing is inserted.
    let again = ok(&["check", "--db", db], input.as_bytes());
    assert_eq!(again.lines().count(), texts.len());
    assert!(again.lines().all(|l| l.starts_with("dup\t")), "{again}");
    assert_eq!(
        json(&["stats", "--db", db, "--json"])["documents"].as_u64(),
        Some(kept.len() as u64)
    );
}

#[test]
fn check_answers_each_line_as_it_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["check", "--db", db.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let texts = [
        planted_texts(15, 1, 40).remove(0),
        planted_texts(16, 1, 40).remove(0),
    ];
    let mut answer = String::new();
    // Each answer is read before the next line is written: the command must
    // not wait for the end of its input.
    for (name, text, expected) in [
        ("a", &texts[0], "new\n".to_string()),
        ("b", &texts[1], "new\n".to_string()),
        ("c", &texts[0], "dup\ta\t0\t1.000\tsketch\n".to_string()),
    ] {
        writeln!(stdin, "{name}\t{text}").unwrap();
        stdin.flush().unwrap();
        answer.clear();
        stdout.read_line(&mut answer).unwrap();
        assert_eq!(answer, expected);
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn create_records_settings_that_later_commands_reuse() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let out = ok(
        &[
            "create",
            "--db",
            db,
            "-d",
            "5",
            "--expected-n",
            "1000",
            "--tokenizer",
            "chars:3",
            "--retention",
            "48h",
        ],
        b"",
    );
    assert!(out.contains("k = 5"), "{out}");
    let stats = json(&["stats", "--db", db, "--json"]);
    assert_eq!(stats["k"].as_u64(), Some(5));
    let config = stats["fingerprint_config"].as_str().unwrap().to_string();
    assert!(config.contains("tokenizer=chars:3"), "{config}");

    let hasher = Simhasher::builder()
        .tokenizer(Tokenizer::CharNgrams(3))
        .build()
        .unwrap();
    assert_eq!(hasher.config().to_string(), config);
    let title = "Cheap flights to Lisbon this weekend";
    ok(
        &["add", "--db", db, "-"],
        format!("t1\t{title}\n").as_bytes(),
    );
    let report = json(&["query", "--db", db, "--text", title, "--json"]);
    assert_eq!(
        report["fingerprint"].as_u64(),
        Some(hasher.fingerprint(title))
    );
    assert_eq!(report["distance"].as_u64(), Some(5));
    assert_eq!(matches(&report), BTreeSet::from([(fnv1a64(b"t1"), 0)]));
    assert_eq!(
        ok(&["check", "--db", db], format!("t2\t{title}\n").as_bytes()),
        "dup\tt1\t0\t1.000\tsketch\n"
    );

    // Settings are fixed: a second create, or a distance above k, is refused.
    assert_eq!(run(&["create", "--db", db], b"").status.code(), Some(2));
    let out = run(&["query", "--db", db, "--text", title, "-d", "6"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the index's k = 5"));
    assert_eq!(
        run(&["check", "--db", db, "-d", "6"], b"").status.code(),
        Some(2)
    );
}

#[test]
fn compact_keeps_answers_and_stats_histogram_equals_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let texts = planted_texts(16, 200, 30);
    let input: String = texts
        .iter()
        .enumerate()
        .map(|(i, t)| format!("n{i}\t{t}\n"))
        .collect();
    ok(&["add", "--db", db, "-"], input.as_bytes());
    let deleted: Vec<String> = (0..200).step_by(10).map(|i| format!("n{i}")).collect();
    let mut args = vec!["delete", "--db", db];
    args.extend(deleted.iter().map(String::as_str));
    ok(&args, b"");

    let hasher = Simhasher::default();
    let live: Vec<u64> = (0..200)
        .filter(|i| i % 10 != 0)
        .map(|i| hasher.fingerprint(&texts[i]))
        .collect();
    let mut histogram = vec![0u64; 65];
    for i in 0..live.len() {
        for j in i + 1..live.len() {
            histogram[hamming(live[i], live[j]) as usize] += 1;
        }
    }
    let query_all = || -> Vec<Value> {
        texts
            .iter()
            .step_by(9)
            .map(|t| json(&["query", "--db", db, "--text", t, "--json"]))
            .collect()
    };
    let before = query_all();
    let stats = json(&["stats", "--db", db, "--json"]);
    assert_eq!(stats["documents"].as_u64(), Some(180));
    let counts: Vec<u64> = stats["distance_histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(counts, histogram);
    let out = ok(&["compact", "--db", db], b"");
    assert!(
        out.starts_with("before: 0 segment(s), 200 entries (200 in the write-ahead log)"),
        "{out}"
    );
    assert!(
        out.contains("after:  1 segment(s), 180 entries (0 in the write-ahead log), 0 tombstones"),
        "{out}"
    );
    assert_eq!(query_all(), before);
    let stats = json(&["stats", "--db", db, "--json"]);
    assert_eq!(stats["documents"].as_u64(), Some(180));
    assert_eq!(stats["segments"].as_u64(), Some(1));
    assert_eq!(stats["tombstones"].as_u64(), Some(0));
    let text = ok(&["stats", "--db", db], b"");
    assert!(
        text.contains("Hamming distances between 16110 pairs of 180 sampled documents"),
        "{text}"
    );
}

#[test]
fn verify_names_the_damaged_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    let input: String = planted_texts(17, 100, 20)
        .iter()
        .enumerate()
        .map(|(i, t)| format!("n{i}\t{t}\n"))
        .collect();
    ok(&["add", "--db", db_arg, "-"], input.as_bytes());
    ok(&["compact", "--db", db_arg], b"");
    let out = ok(&["verify", "--db", db_arg], b"");
    assert!(out.starts_with("ok: "), "{out}");

    let segment = fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = fs::read(&segment).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    fs::write(&segment, bytes).unwrap();
    let out = run(&["verify", "--db", db_arg], b"");
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&segment.display().to_string()), "{stderr}");
    assert!(stderr.contains("at byte"), "{stderr}");
}

#[test]
fn a_held_writer_lock_and_a_missing_index_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    let none = dir.path().join("none");
    for args in [
        vec!["query", "--db", none.to_str().unwrap(), "--fp", "1"],
        vec!["stats", "--db", none.to_str().unwrap()],
        vec!["verify", "--db", none.to_str().unwrap()],
        vec!["delete", "--db", none.to_str().unwrap(), "x"],
        vec!["get", "--db", none.to_str().unwrap(), "x"],
    ] {
        let out = run(&args, b"");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("holds no index"));
    }
    assert!(!none.exists());

    let index = simhashdb::Index::open(&db, simhashdb::Options::default()).unwrap();
    index.insert_named(1, 42, "x").unwrap();
    for (args, stdin) in [
        (vec!["add", "--db", db_arg, "-"], &b"y\ttext\n"[..]),
        (vec!["check", "--db", db_arg], &b"y\ttext\n"[..]),
        (vec!["delete", "--db", db_arg, "x"], &b""[..]),
    ] {
        let out = run(&args, stdin);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("locked by another process"),
            "{args:?}"
        );
    }
    // A query reads beside the writer.
    let out = ok(&["query", "--db", db_arg, "--fp", "42"], b"");
    assert_eq!(out, "0\t1\tx\n");
    drop(index);
    let out = ok(&["query", "--db", db_arg, "--fp", "42"], b"");
    assert_eq!(out, "0\t1\tx\n");
}

/// `query --json` and `get --json` print one line per object with the keys
/// sorted and no spaces, exactly as before their objects came from the
/// library's `Serialize` (the `serde` feature): scripts that compare the
/// lines as text keep working.
#[test]
fn json_lines_of_query_and_get_keep_their_exact_form() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    let far = u64::MAX;
    ok(
        &["add", "--db", db, "--fingerprints", "-"],
        format!("7\t240\tdoc \"seven\"\n9\t241\n11\t{far}\n").as_bytes(),
    );
    assert_eq!(
        ok(
            &[
                "query",
                "--db",
                db,
                "--fp",
                "240",
                "--distance",
                "2",
                "--json"
            ],
            b""
        ),
        "{\"distance\":2,\"fingerprint\":240,\"matches\":[\
         {\"distance\":0,\"fingerprint\":240,\"id\":7,\"name\":\"doc \\\"seven\\\"\"},\
         {\"distance\":1,\"fingerprint\":241,\"id\":9,\"name\":null}]}\n"
    );
    // Timestamps are insertion times: take them from the text form.
    let timestamp = |id: &str| -> u64 {
        let text = ok(&["get", "--db", db, "--id", id], b"");
        text.split('\t').nth(2).unwrap().parse().unwrap()
    };
    let (t7, t11) = (timestamp("7"), timestamp("11"));
    assert!(t7 > 0 && t11 > 0);
    assert_eq!(
        ok(
            &["get", "--db", db, "--id", "7", "--id", "11", "--json"],
            b""
        ),
        format!(
            "{{\"fingerprint\":240,\"id\":7,\"name\":\"doc \\\"seven\\\"\",\"timestamp_ms\":{t7}}}\n\
             {{\"fingerprint\":{far},\"id\":11,\"name\":null,\"timestamp_ms\":{t11}}}\n"
        )
    );
}
