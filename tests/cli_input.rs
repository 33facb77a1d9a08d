//! Bad input to the commands that write an index: garbage, truncated,
//! oversized and binary lines get a line-numbered error, exit code 2, and
//! leave the index as it was (compared through `stats`, queries and `get`).

mod common;

use std::path::Path;

use common::cli::{ok, run};

const TEXTS: [&str; 4] = [
    "the keeper climbed the spiral stairs of the lighthouse twice every night",
    "a sourdough starter is flour and water where wild yeast has made a home",
    "tides rise and fall with the pull of the moon and to a lesser degree the sun",
    "good compost needs a balance of green and brown material and some air",
];

/// Everything a user can observe about the index.
fn snapshot(db: &str) -> String {
    let mut all = ok(&["stats", "--db", db, "--json"], b"");
    for text in TEXTS {
        all.push_str(&ok(&["query", "--db", db, "--text", text, "--json"], b""));
    }
    for name in ["good", "good2", "c1", "c2", "fresh"] {
        let out = run(&["get", "--db", db, name], b"");
        all.push_str(&format!("{name}: {:?}\n", out.status.code()));
    }
    all
}

fn indexed_db(dir: &Path) -> String {
    let db = dir.join("db").display().to_string();
    let input: String = TEXTS
        .iter()
        .enumerate()
        .map(|(i, t)| format!("doc{i}\t{t}\n"))
        .collect();
    ok(&["add", "--db", &db, "-"], input.as_bytes());
    db
}

/// Runs `args` with `stdin`, expects exit code 2 and an error naming `line`,
/// and returns standard output.
fn refused(args: &[&str], stdin: &[u8], line: usize, why: &str) -> String {
    let out = run(args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?} {why}: {stderr}");
    assert!(
        stderr.contains(&format!("standard input, line {line}: ")),
        "{args:?} {why}: {stderr}"
    );
    assert!(stderr.contains(why), "{args:?}: {stderr} lacks {why}");
    String::from_utf8(out.stdout).unwrap()
}

fn oversized_line() -> Vec<u8> {
    let mut line = b"big\t".to_vec();
    line.resize(line.len() + (16 << 20) + 1, b'a');
    line.push(b'\n');
    line
}

fn named_text_cases() -> Vec<(Vec<u8>, usize, &'static str)> {
    let good = b"good\tsome text\n".to_vec();
    let with = |rest: &[u8]| [&good[..], rest].concat();
    vec![
        (
            with(b"a line without any tab\n"),
            2,
            "expected NAME<TAB>TEXT",
        ),
        (with(b"name\t\xff\xfe\x00\x01garbage\n"), 2, "binary data"),
        (with(b"name\ttext with a \x00 inside\n"), 2, "NUL byte"),
        (with(b"good2\ttext cut off in the midd"), 2, "truncated"),
        (with(&oversized_line()), 2, "longer than the limit"),
        (
            with(&[&vec![b'n'; 70_000][..], b"\ttext\n"].concat()),
            2,
            "document name of 70000 bytes",
        ),
        (with(b"\tno name\n"), 2, "empty document name"),
        (with(b"\nlater\ttext\n"), 2, "expected NAME<TAB>TEXT"),
    ]
}

#[test]
fn add_refuses_bad_named_texts_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = indexed_db(dir.path());
    let before = snapshot(&db);
    assert!(before.contains("good: Some(1)"), "{before}");
    for (input, line, why) in named_text_cases() {
        refused(&["add", "--db", &db, "-"], &input, line, why);
        assert_eq!(snapshot(&db), before, "{why}");
    }
    // The same good line alone is accepted, so the refusals were the bad lines'.
    ok(&["add", "--db", &db, "-"], b"good\tsome text\n");
    assert!(snapshot(&db).contains("good: Some(0)"));
}

#[test]
fn add_refuses_bad_fingerprint_lines_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = indexed_db(dir.path());
    let before = snapshot(&db);
    for (input, line, why) in [
        (&b"1\t2\tgood\nx\t3\n"[..], 2, "document id: not a decimal"),
        (b"1\t2\tgood\n3\t18446744073709551616\n", 2, "exceeds"),
        (b"1\t2\tgood\n3\n", 2, "fingerprint: empty"),
        (b"1\t2\tgood\n3\t-4\n", 2, "fingerprint: not a decimal"),
        (b"1\t2\tgood\n3\t4\tfresh", 2, "truncated"),
        (b"1\t2\tgood\n\x01\x02\x03\xff\n", 2, "binary data"),
        (b"1\t2\tgood\n0x10\t5\n", 2, "not a decimal"),
    ] {
        refused(
            &["add", "--db", &db, "--fingerprints", "-"],
            input,
            line,
            why,
        );
        assert_eq!(snapshot(&db), before, "{why}");
    }
}

#[test]
fn bad_input_to_a_new_index_does_not_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new");
    let db_arg = db.to_str().unwrap();
    for (input, line, why) in named_text_cases() {
        refused(&["add", "--db", db_arg, "-"], &input, line, why);
        assert!(!db.exists(), "{why}");
    }
    let missing = dir.path().join("missing.txt");
    let out = run(&["add", "--db", db_arg, missing.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains(missing.to_str().unwrap()));
    assert!(!db.exists());
}

#[test]
fn check_stops_at_a_bad_line_having_applied_only_the_lines_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = indexed_db(dir.path());
    // A bad first line: nothing is answered or written.
    for (input, _, why) in named_text_cases() {
        let bad_first: Vec<u8> = match input.strip_prefix(&b"good\tsome text\n"[..]) {
            Some(rest) => rest.to_vec(),
            None => input,
        };
        let before = snapshot(&db);
        let out = refused(&["check", "--db", &db], &bad_first, 1, why);
        assert_eq!(out, "");
        assert_eq!(snapshot(&db), before, "{why}");
    }
    // After good lines: those were answered and inserted; the bad line and
    // everything after it were not.
    let before = snapshot(&db);
    let out = refused(
        &["check", "--db", &db],
        b"c1\tan entirely new text about bicycle chains and their wear\n\
          c2\t\xffbinary\nfresh\tanother new text about the great wall\n",
        2,
        "binary data",
    );
    assert_eq!(out, "new\n");
    let after = snapshot(&db);
    assert_ne!(after, before);
    assert!(after.contains("c1: Some(0)") && after.contains("c2: Some(1)"));
    assert!(after.contains("fresh: Some(1)"), "{after}");

    let out = refused(
        &["check", "--db", &db],
        b"c1\tan entirely new text about bicycle chains and their wear\nc2\tcut off",
        2,
        "truncated",
    );
    assert_eq!(out, "dup\tc1\t0\t1.000\tsketch\n");
    assert!(snapshot(&db).contains("c2: Some(1)"));
}
