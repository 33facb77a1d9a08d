//! The command line, run as a real process.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use simhashdb::batch::find_all;
use simhashdb::plan::Plan;

use common::cli::run;

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

#[test]
fn find_all_prints_pairs_of_values_and_line_numbers() {
    let input = b"1\n3\n7\n1\n18446744073709551615\n";
    let out = run(&["find-all", "-b", "2", "-d", "1"], input);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "[1,3]\n[1,1]\n[3,7]\n[3,1]\n");
    let out = run(&["find-all", "-d", "1", "--indices"], input);
    assert_eq!(stdout(&out), "[1,2]\n[1,4]\n[2,3]\n[2,4]\n");
}

#[test]
fn find_all_output_equals_the_library() {
    let mut state = 7u64;
    let mut fps: Vec<u64> = Vec::new();
    for i in 0..2000u64 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Every third value is a near copy of an earlier one.
        fps.push(if i % 3 == 2 {
            fps[i as usize / 2] ^ (1 << (state >> 58))
        } else {
            state
        });
    }
    let input: String = fps.iter().map(|f| format!("{f}\n")).collect();
    let out = run(
        &["find-all", "-b", "6", "-d", "3", "--indices"],
        input.as_bytes(),
    );
    assert!(out.status.success());
    let expected: String = find_all(&fps, &Plan::new(6, 3).unwrap())
        .into_iter()
        .map(|(i, j)| format!("[{},{}]\n", i + 1, j + 1))
        .collect();
    assert!(expected.lines().count() >= 600);
    assert_eq!(stdout(&out), expected);
}

#[test]
fn clusters_prints_one_array_per_cluster() {
    let out = run(
        &["clusters", "-d", "2"],
        b"0\n3\n15\n18446744073709551615\n18446744073709551615\n",
    );
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "[0,3,15]\n[18446744073709551615,18446744073709551615]\n"
    );
}

#[test]
fn bad_input_names_the_line_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.json");
    let target_arg = target.to_str().unwrap();
    for (input, line, why) in [
        (&b"1\n2\nabc\n"[..], 3, "not a decimal"),
        (b"1\n\n2\n", 2, "empty line"),
        (b"18446744073709551616\n", 1, "exceeds"),
        (b"5\n\x00\x01\xfe\n", 2, "not a decimal"),
        (b"-4\n", 1, "not a decimal"),
    ] {
        for command in ["find-all", "clusters"] {
            let out = run(&[command, "-o", target_arg], input);
            assert_eq!(out.status.code(), Some(2), "{command} {input:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(&format!("line {line}:")), "{err}");
            assert!(err.contains(why), "{err}");
            assert!(!target.exists(), "output written despite bad input");
            assert!(out.stdout.is_empty());
        }
    }
}

#[test]
fn impossible_plan_is_a_usage_error() {
    let out = run(&["find-all", "-b", "3", "-d", "3"], b"1\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 < blocks"));
}

#[test]
fn closed_stdout_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_simhashdb"))
        .args(["find-all", "-d", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // 3000 identical values: 4.5 million pairs, far more than a pipe holds.
    child
        .stdin
        .take()
        .unwrap()
        .write_all("5\n".repeat(3000).as_bytes())
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn fingerprint_prints_fp_tab_name_and_reports_missing_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.txt");
    std::fs::write(&a, "the quick brown fox\njumps over the lazy dog\n").unwrap();
    let a_arg = a.to_str().unwrap();
    let out = run(&["fingerprint", a_arg], b"");
    assert!(out.status.success());
    let expected = simhashdb::Simhasher::default()
        .fingerprint("the quick brown fox\njumps over the lazy dog\n");
    assert_eq!(stdout(&out), format!("{expected}\t{a_arg}\n"));

    let out = run(
        &["fingerprint", "--lines", "-"],
        b"one line\nanother line\n",
    );
    let hasher = simhashdb::Simhasher::default();
    assert_eq!(
        stdout(&out),
        format!(
            "{}\t-:1\n{}\t-:2\n",
            hasher.fingerprint("one line"),
            hasher.fingerprint("another line")
        )
    );

    let missing = dir.path().join("missing.txt");
    let out = run(&["fingerprint", missing.to_str().unwrap(), a_arg], b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.txt"));
    assert_eq!(
        stdout(&out).lines().count(),
        1,
        "the readable file is still fingerprinted"
    );

    let out = run(&["fingerprint", "--tokenizer", "nonsense"], b"");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn plan_marks_the_choice() {
    let out = run(&["plan", "--n", "50000000", "-d", "3"], b"");
    assert!(out.status.success());
    let text = stdout(&out);
    let chosen: Vec<&str> = text.lines().filter(|l| l.starts_with('*')).collect();
    assert_eq!(chosen.len(), 1, "{text}");
    assert!(chosen[0].contains("5 blocks"), "{text}");
    assert!(text.contains("candidates") && text.contains("probes") && text.contains("radius"));
}

/// The alternatives include probed plans, with their probes per query, and a
/// budget moves the choice: at k = 8 the default takes 3 tables probed at
/// radius 2, not the 45 an unprobed plan needs; a space budget of 2 tables
/// at k = 3 takes 2 tables probed at radius 1 (66 probes).
#[test]
fn plan_lists_probed_alternatives_and_follows_a_budget() {
    let chosen_line = |args: &[&str]| {
        let out = run(args, b"");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = stdout(&out);
        let chosen: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with('*'))
            .map(str::to_owned)
            .collect();
        assert_eq!(chosen.len(), 1, "{text}");
        chosen[0].split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let eight = chosen_line(&["plan", "--n", "10000000", "-d", "8"]);
    assert!(
        eight.starts_with("* 3 blocks, radius 2 3 2 21-22 718 "),
        "{eight}"
    );
    let unprobed = chosen_line(&["plan", "--n", "10000000", "-d", "8", "--unprobed"]);
    assert!(unprobed.starts_with("* 10 blocks 45 0 "), "{unprobed}");
    let two = chosen_line(&["plan", "--n", "10000000", "-d", "3", "--max-tables", "2"]);
    assert!(two.starts_with("* 2 blocks, radius 1 2 1 32 66 "), "{two}");
    let out = run(&["plan", "-d", "3", "--max-cost", "0"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-cost"));
}

/// `create -d 8` records the default plan: a few probed tables, which stats
/// reports, and queries at distance 8 answer exactly.
#[test]
fn create_at_distance_eight_gets_a_probed_plan_of_few_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    let out = run(&["create", "--db", db_arg, "-d", "8"], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout(&out).contains("radius"), "{}", stdout(&out));
    let out = run(&["stats", "--db", db_arg, "--json"], b"");
    assert!(out.status.success());
    let stats: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let tables = stats["tables"].as_u64().unwrap();
    assert!(tables <= 5, "{stats}");
    assert!(stats["radius"].as_u64().unwrap() >= 1, "{stats}");
    assert_eq!(stats["k"].as_u64(), Some(8));
}

#[test]
fn compact_merges_segments_and_respects_the_writer_lock() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_arg = db.to_str().unwrap();
    {
        let index = simhashdb::Index::open(&db, simhashdb::Options::default()).unwrap();
        for batch in 0..3u64 {
            index.insert(batch, batch * 0x0101_0101).unwrap();
            index.flush().unwrap();
        }
        index.delete(0).unwrap();
        index.flush().unwrap();
        assert_eq!(index.stats().segments, 4);
        // While this writer holds the index, the tool refuses clearly.
        let out = run(&["compact", "--db", db_arg], b"");
        assert_eq!(out.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&out.stderr).contains("is locked by another process"));
    }
    let out = run(&["compact", "--db", db_arg], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("before: 4 segment(s)"), "{text}");
    assert!(
        text.contains("after:  1 segment(s), 2 entries (0 in the write-ahead log), 0 tombstones"),
        "{text}"
    );
    let index = simhashdb::Index::open(&db, simhashdb::Options::default()).unwrap();
    assert_eq!(index.get(0).unwrap(), None);
    assert_eq!(index.get(2).unwrap(), Some(2 * 0x0101_0101));

    let out = run(
        &["compact", "--db", dir.path().join("none").to_str().unwrap()],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_documents_every_command_and_exit_code() {
    let out = run(&["--help"], b"");
    assert!(out.status.success());
    let text = stdout(&out);
    for command in [
        "dedup",
        "create",
        "add",
        "query",
        "check",
        "get",
        "delete",
        "fingerprint",
        "find-all",
        "clusters",
        "plan",
        "compact",
        "verify",
        "stats",
    ] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing from --help"
        );
        let out = run(&[command, "--help"], b"");
        assert!(out.status.success(), "{command}");
        let help = stdout(&out);
        for code in [
            "0  success",
            "1  failure",
            "2  usage error",
            "3  the index is damaged",
        ] {
            assert!(help.contains(code), "{command} --help lacks {code}");
        }
    }
}

#[test]
fn fingerprint_keeps_blank_lines_and_reads_html() {
    let hasher = simhashdb::Simhasher::default();
    let out = run(&["fingerprint", "--lines", "-"], b"a b\n\nc d\n");
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        format!(
            "{}\t-:1\n{}\t-:2\n{}\t-:3\n",
            hasher.fingerprint("a b"),
            hasher.fingerprint(""),
            hasher.fingerprint("c d")
        )
    );
    let out = run(
        &["fingerprint", "--html", "-"],
        b"<p>visible words</p><script>hidden code</script>",
    );
    assert_eq!(
        stdout(&out),
        format!("{}\t-\n", hasher.fingerprint("visible words"))
    );
}
