//! Hostile input and operator mistakes, each against the real binary on
//! the real file system: nothing may wipe, hang or crash the index
//! (docs/RELIABILITY.md, "Hostile input and operator mistakes").

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::cli::{ok, run};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simhashdb"))
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited by a signal")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

/// Every file under `dir` (recursively) with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.insert(path.clone(), fs::read(&path).unwrap());
        }
    }
    out
}

/// Named documents as `NAME<TAB>TEXT` lines.
fn named(docs: &[(&str, &str)]) -> Vec<u8> {
    docs.iter()
        .map(|(n, t)| format!("{n}\t{t}\n"))
        .collect::<String>()
        .into_bytes()
}

/// An index with two segments' worth of documents (flushed by `compact`)
/// and more in its WAL; returns the names added.
fn index_with_segments_and_wal(db: &Path) -> Vec<String> {
    // Created with the defaults `repair` assumes (`add` would give an
    // index of texts k = 6).
    ok(&["create", "--db", s(db)], b"");
    let mut names = Vec::new();
    let mut add = |from: usize, to: usize| {
        let docs: Vec<(String, String)> = (from..to)
            .map(|i| {
                (
                    format!("doc{i}"),
                    format!("text number {i} word{} w{}", i * 7, i % 5),
                )
            })
            .collect();
        let lines: String = docs.iter().map(|(n, t)| format!("{n}\t{t}\n")).collect();
        ok(&["add", "--db", s(db), "-"], lines.as_bytes());
        names.extend(docs.into_iter().map(|(n, _)| n));
    };
    add(0, 50);
    ok(&["compact", "--db", s(db)], b"");
    add(50, 80);
    names
}

fn get_all(db: &Path, names: &[String]) -> Output {
    let mut args = vec!["get", "--db", s(db)];
    args.extend(names.iter().map(String::as_str));
    run(&args, b"")
}

// ------------------------------------------------------------ 1. manifest

#[test]
fn writing_commands_refuse_a_directory_whose_manifest_is_missing_and_keep_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    index_with_segments_and_wal(&db);
    fs::remove_file(db.join("MANIFEST")).unwrap();
    // A valid uncommitted manifest too: it must not be deleted either.
    fs::write(db.join("MANIFEST.tmp"), b"not yet committed").unwrap();
    let before = tree(&db);
    assert!(
        before
            .keys()
            .any(|p| p.extension().is_some_and(|e| e == "seg"))
    );
    for args in [
        vec!["add", "--db", s(&db), "-"],
        vec!["check", "--db", s(&db)],
        vec!["create", "--db", s(&db)],
        vec!["create", "--db", s(&db), "--force"],
        vec!["compact", "--db", s(&db)],
        vec!["get", "--db", s(&db), "doc1"],
        vec!["verify", "--db", s(&db)],
    ] {
        let out = run(&args, &named(&[("new", "some new text")]));
        assert_eq!(code(&out), 3, "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("no MANIFEST") && err.contains(".seg") && err.contains("repair"),
            "{args:?}: {err}"
        );
        assert_eq!(tree(&db), before, "{args:?} changed the directory");
    }
}

#[test]
fn a_new_index_needs_a_missing_or_empty_directory_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    fs::create_dir(&home).unwrap();
    fs::write(home.join("notes.txt"), b"my notes").unwrap();
    let before = tree(&home);
    for args in [
        vec!["add", "--db", s(&home), "-"],
        vec!["check", "--db", s(&home)],
        vec!["create", "--db", s(&home)],
    ] {
        let out = run(&args, &named(&[("a", "some text")]));
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("notes.txt"), "{}", stderr(&out));
        assert_eq!(tree(&home), before, "{args:?} wrote into the directory");
        assert!(!home.join("LOCK").exists());
    }
    ok(&["create", "--db", s(&home), "--force"], b"");
    ok(
        &["add", "--db", s(&home), "-"],
        &named(&[("a", "some text")]),
    );
    assert_eq!(fs::read(home.join("notes.txt")).unwrap(), b"my notes");
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).unwrap();
    ok(
        &["add", "--db", s(&empty), "-"],
        &named(&[("a", "some text")]),
    );
}

#[test]
fn repair_rebuilds_a_lost_manifest_keeps_every_document_and_sets_damaged_files_aside() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let names = index_with_segments_and_wal(&db);
    let expected = String::from_utf8(get_all(&db, &names).stdout).unwrap();
    assert_eq!(expected.lines().count(), names.len());
    fs::remove_file(db.join("MANIFEST")).unwrap();
    // A damaged segment and a stray doc map beside the good ones.
    fs::write(db.join("0000000000000099.seg"), b"SHDBSEG\0 garbage").unwrap();
    fs::write(db.join("0000000000000099.ids"), b"garbage").unwrap();
    fs::write(db.join("0000000000000098.ids"), b"lone doc map").unwrap();
    fs::write(db.join("README"), b"an operator's note").unwrap();

    let out = run(&["repair", "--db", s(&db)], b"");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(code(&out), 0, "{report}{}", stderr(&out));
    assert!(report.contains("verify: ok"), "{report}");
    for name in [
        "0000000000000099.seg",
        "0000000000000099.ids",
        "0000000000000098.ids",
    ] {
        assert!(report.contains(name), "{report}");
        assert!(
            db.join("lost+found").join(name).exists(),
            "{name} not set aside"
        );
        assert!(!db.join(name).exists());
    }
    assert_eq!(fs::read(db.join("README")).unwrap(), b"an operator's note");
    let got = get_all(&db, &names);
    assert_eq!(code(&got), 0, "{}", stderr(&got));
    assert_eq!(String::from_utf8(got.stdout).unwrap(), expected);
    ok(&["verify", "--db", s(&db)], b"");
    // The repaired index takes writes, and a second repair loses nothing.
    ok(
        &["add", "--db", s(&db), "-"],
        &named(&[("later", "a later text")]),
    );
    ok(&["repair", "--db", s(&db)], b"");
    let mut all = names.clone();
    all.push("later".to_string());
    assert_eq!(
        get_all(&db, &all).stdout.split(|&b| b == b'\n').count() - 1,
        all.len()
    );
}

#[test]
fn repair_of_a_directory_without_index_files_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("notes.txt"), b"x").unwrap();
    let before = tree(dir.path());
    let out = run(&["repair", "--db", s(dir.path())], b"");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("nothing to repair"));
    assert_eq!(tree(dir.path()), before);
}

// ------------------------------------------------------------ 2. HTML

#[test]
fn deeply_nested_html_is_read_by_every_command_without_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let depth = 100_000;
    let page = format!(
        "<html><body>{}deep words inside{}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    );
    let file = dir.path().join("deep.html");
    fs::write(&file, &page).unwrap();
    let shallow = dir.path().join("shallow.html");
    fs::write(&shallow, "<p>deep words inside</p>").unwrap();
    let out = ok(&["fingerprint", s(&file), s(&shallow)], b"");
    let fps: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(fps.len(), 2);
    assert_eq!(fps[0], fps[1], "the nesting changed the visible text");
    let out = run(&["dedup", s(dir.path())], b"");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("deep.html"));
    let db = dir.path().join("db");
    ok(&["add", "--db", s(&db), s(&file)], b"");
    let line = format!("page\t{}\n", page.replace('\n', " "));
    let answer = ok(&["check", "--db", s(&db), "--html"], line.as_bytes());
    assert!(answer.starts_with("dup\t"), "{answer}");
}

// ------------------------------------------------------------ 3. lock

#[test]
fn deleting_lock_under_a_running_writer_does_not_admit_a_second_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(
        &["add", "--db", s(&db), "-"],
        &named(&[("a", "first text")]),
    );
    let mut writer = bin()
        .args(["check", "--db", s(&db)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = writer.stdin.take().unwrap();
    // Once it has answered a line, it holds the lock.
    input.write_all(b"b\tsecond text here\n").unwrap();
    input.flush().unwrap();
    let mut stdout = writer.stdout.take().unwrap();
    let mut answer = [0u8; 4];
    std::io::Read::read_exact(&mut stdout, &mut answer).unwrap();
    assert_eq!(&answer, b"new\n");

    fs::remove_file(db.join("LOCK")).unwrap();
    for args in [
        vec!["add", "--db", s(&db), "-"],
        vec!["compact", "--db", s(&db)],
    ] {
        let out = run(&args, &named(&[("c", "third text")]));
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("locked by another process"),
            "{}",
            stderr(&out)
        );
    }
    // A reader needs no lock: `get` reads beside the writer, and sees the
    // document it acknowledged.
    let got = ok(&["get", "--db", s(&db), "a", "b"], b"");
    assert_eq!(got.lines().count(), 2, "{got}");
    input.write_all(b"d\tfourth text entirely\n").unwrap();
    drop(input);
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let got = ok(&["get", "--db", s(&db), "a", "b", "d"], b"");
    assert_eq!(got.lines().count(), 3, "{got}");
    ok(&["verify", "--db", s(&db)], b"");
}

// ------------------------------------------------------------ 4. batches

#[test]
fn add_accepts_input_larger_than_one_wal_frame_of_long_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // 4,100 names of 64 KiB: 269 MB, more than one 256 MiB WAL frame.
    let count = 4_100;
    let mut input = Vec::with_capacity(count * (65_536 + 16));
    for i in 0..count {
        let name = format!("{i:06}{}", "n".repeat(65_536 - 6));
        input.extend_from_slice(name.as_bytes());
        input.extend_from_slice(format!("\ttext {i}\n").as_bytes());
    }
    let out = run(&["add", "--db", s(&db), "-"], &input);
    drop(input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("added {count} documents")));
    let last = format!("{:06}{}", count - 1, "n".repeat(65_536 - 6));
    let got = ok(&["get", "--db", s(&db), &last], b"");
    assert!(got.trim_end().ends_with(&last));
}

// ------------------------------------------------------------ 5. full disk

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: usize) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output();
        match out {
            Ok(out) if out.status.success() => Some(SmallDisk { dir }),
            Ok(out) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs here: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_disk_leaves_nothing_partial_and_the_index_still_reads() {
    let Some(disk) = SmallDisk::mount(2 << 20) else {
        return;
    };
    let db = disk.dir.path().join("db");
    let docs: Vec<(String, String)> = (0..300)
        .map(|i| {
            (
                format!("doc{i}"),
                format!("some words of text {i} w{}", i * 13),
            )
        })
        .collect();
    let lines: String = docs.iter().map(|(n, t)| format!("{n}\t{t}\n")).collect();
    ok(&["add", "--db", s(&db), "-"], lines.as_bytes());
    // Fill the disk.
    let filler = disk.dir.path().join("filler");
    let mut file = fs::File::create(&filler).unwrap();
    let chunk = vec![7u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    drop(file);
    let before = tree(&db);

    let big: String = (0..2_000)
        .map(|i| format!("more{i}\t{}\n", "padding words ".repeat(20)))
        .collect();
    for args in [
        vec!["add", "--db", s(&db), "-"],
        vec!["compact", "--db", s(&db)],
    ] {
        let out = run(&args, big.as_bytes());
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("No space left") || stderr(&out).contains("space"),
            "{}",
            stderr(&out)
        );
        assert_eq!(tree(&db), before, "{args:?} left something behind");
    }
    // Reading needs no space.
    ok(&["verify", "--db", s(&db)], b"");
    let got = ok(&["get", "--db", s(&db), "doc0", "doc299"], b"");
    assert_eq!(got.lines().count(), 2);
    let found = ok(&["query", "--db", s(&db), "--text", &docs[5].1], b"");
    assert!(found.contains("doc5"), "{found}");
    // Space again: writes go on.
    fs::remove_file(&filler).unwrap();
    ok(
        &["add", "--db", s(&db), "-"],
        &named(&[("after", "written after the disk was freed")]),
    );
    assert_eq!(
        ok(&["get", "--db", s(&db), "after", "doc7"], b"")
            .lines()
            .count(),
        2
    );
}

// ------------------------------------------------------------ 6. walk

#[cfg(unix)]
#[test]
fn the_walk_skips_cycles_fifos_hidden_ignored_and_binary_files_and_reads_any_name() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("in");
    fs::create_dir_all(root.join("sub")).unwrap();
    fs::write(root.join("a.txt"), b"alpha text").unwrap();
    fs::write(root.join("sub/b.txt"), b"beta text").unwrap();
    std::os::unix::fs::symlink(".", root.join("x")).unwrap();
    std::os::unix::fs::symlink("..", root.join("sub/y")).unwrap();
    std::os::unix::fs::symlink("a.txt", root.join("link.txt")).unwrap();
    let fifo = root.join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    fs::create_dir(root.join(".git")).unwrap();
    fs::write(root.join(".git/config"), b"git internals").unwrap();
    fs::write(root.join(".hidden"), b"hidden text").unwrap();
    fs::write(root.join(".gitignore"), b"ignored.txt\n").unwrap();
    fs::write(root.join("ignored.txt"), b"ignored text").unwrap();
    fs::write(root.join("image.bin"), b"\x89PNG\0\0\0binary").unwrap();
    let odd = root.join(OsStr::from_bytes(b"caf\xe9 \t\n.txt"));
    fs::write(&odd, b"latin-1 name").unwrap();

    let names = |extra: &[&str]| -> Vec<String> {
        let out = bin()
            .arg("fingerprint")
            .args(extra)
            .arg(&root)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let text = String::from_utf8(out.stdout).unwrap();
        let prefix = format!("{}/", root.display());
        text.lines()
            .map(|l| l.split_once('\t').unwrap().1.replacen(&prefix, "", 1))
            .collect()
    };
    assert_eq!(names(&[]), ["a.txt", "caf\u{fffd} \\t\\n.txt", "sub/b.txt"]);
    let all = names(&["--hidden", "--no-ignore", "--binary"]);
    for name in [
        ".git/config",
        ".hidden",
        ".gitignore",
        "ignored.txt",
        "image.bin",
    ] {
        assert!(all.iter().any(|n| n == name), "{name} missing from {all:?}");
    }
    // Following links reads each file once per path, and stops at cycles.
    let followed = names(&["--follow"]);
    assert!(followed.iter().any(|n| n == "link.txt"), "{followed:?}");
    assert!(followed.len() < 20, "{followed:?}");

    // add reads the same files, and the odd name's document exists.
    let db = dir.path().join("db");
    let out = bin()
        .args(["add", "--db", s(&db)])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("added 3 documents"));
}

#[cfg(unix)]
#[test]
fn a_device_named_as_input_is_refused_and_a_pipe_is_read() {
    let out = run(&["fingerprint", "/dev/zero"], b"");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run(&["add", "--db", s(&db), "/dev/zero"], b"");
    assert_eq!(code(&out), 1);
    assert!(!db.exists());
    // An explicit pipe (as `<(...)` gives) is the user's intent: read.
    let out = bin()
        .args(["fingerprint", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"words from a pipe")?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
}

// ------------------------------------------------------------ 7. exit codes

#[test]
fn refused_commands_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("new");
    let cases: [(&[&str], i32); 5] = [
        (&["check", "--db", s(&db), "-d", "9"], 2),
        (&["create", "--db", s(&db), "-d", "64"], 2),
        (&["create", "--db", s(&db), "--retention", "0h"], 2),
        (&["add", "--db", s(&db), "/nonexistent/input"], 1),
        (&["add", "--db", s(&db), "--fingerprints", "-"], 2),
    ];
    for (args, expected) in cases {
        let out = run(args, b"1\tnot a number\n");
        assert_eq!(code(&out), expected, "{args:?}: {}", stderr(&out));
        assert!(!db.exists(), "{args:?} created {}", db.display());
    }
    // Unreadable input inside a directory: nothing added, nothing created.
    let input = dir.path().join("input");
    fs::create_dir(&input).unwrap();
    fs::write(input.join("ok.txt"), b"readable").unwrap();
    let locked = input.join("secret.txt");
    fs::write(&locked, b"unreadable").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o000)).unwrap();
        if fs::read(&locked).is_err() {
            let out = run(&["add", "--db", s(&db), s(&input)], b"");
            assert_eq!(code(&out), 1, "{}", stderr(&out));
            assert!(!db.exists());
        } else {
            eprintln!("skipped the unreadable-file case: this user reads any file (root)");
        }
    }
}

// ------------------------------------------------------------ 9. smaller

#[test]
fn add_counts_distinct_documents_and_keeps_the_last_of_a_repeated_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = ok(
        &["add", "--db", s(&db), "-"],
        &named(&[
            ("a", "first version"),
            ("a", "second version"),
            ("b", "other"),
        ]),
    );
    assert!(out.contains("added 2 documents"), "{out}");
    let fp = ok(
        &[
            "query",
            "--db",
            s(&db),
            "--text",
            "second version",
            "-d",
            "0",
        ],
        b"",
    );
    assert!(fp.contains("\ta\t1.000\tsketch\n"), "{fp}");
}

#[test]
fn deleting_a_name_given_twice_deletes_it_once_and_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(
        &["add", "--db", s(&db), "-"],
        &named(&[("a", "some text"), ("b", "more")]),
    );
    let out = run(&["delete", "--db", s(&db), "a", "a"], b"");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "deleted a\n");
    let out = run(&["get", "--db", s(&db), "a"], b"");
    assert_eq!(code(&out), 1);
}

#[test]
fn an_empty_line_is_refused_alike_by_add_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&["create", "--db", s(&db)], b"");
    let before = tree(&db);
    for args in [
        vec!["add", "--db", s(&db), "-"],
        vec!["check", "--db", s(&db)],
    ] {
        let out = run(&args, b"\n");
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("line 1"), "{}", stderr(&out));
    }
    let out = run(&["add", "--db", s(&db), "--fingerprints", "-"], b"\n");
    assert_eq!(code(&out), 2);
    assert_eq!(
        tree(&db).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
}

#[cfg(unix)]
#[test]
fn names_with_tabs_and_newlines_are_escaped_in_tab_separated_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    fs::create_dir(&input).unwrap();
    let odd = "tab\there\nnewline\\.txt";
    fs::write(input.join(odd), b"shared words in both files").unwrap();
    let db = dir.path().join("db");
    ok(&["add", "--db", s(&db), s(&input)], b"");
    let escaped = format!("{}/tab\\there\\nnewline\\\\.txt", input.display());
    let out = ok(
        &[
            "query",
            "--db",
            s(&db),
            "--text",
            "shared words in both files",
        ],
        b"",
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(
        out.lines().next().unwrap().split('\t').nth(2),
        Some(escaped.as_str())
    );
    let raw = format!("{}/{odd}", input.display());
    let out = ok(&["get", "--db", s(&db), &raw], b"");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.trim_end().ends_with(&escaped));
    let out = ok(&["fingerprint", s(&input)], b"");
    assert_eq!(out.lines().count(), 1);
    let out = ok(
        &["check", "--db", s(&db)],
        b"copy\tshared words in both files\n",
    );
    assert_eq!(out, format!("dup\t{escaped}\t0\t1.000\tsketch\n"));
}

#[test]
fn blank_documents_are_left_out_by_add_dedup_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = run(
        &["add", "--db", s(&db), "-"],
        &named(&[
            ("e1", ""),
            ("e2", "   "),
            ("p", "..."),
            ("real", "real words"),
        ]),
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("added 1 documents"));
    assert!(
        stderr(&out).contains("left out 3 blank"),
        "{}",
        stderr(&out)
    );
    assert_eq!(code(&run(&["get", "--db", s(&db), "e1"], b"")), 1);
    let out = ok(
        &["check", "--db", s(&db)],
        &named(&[("b1", " "), ("b2", "\u{a0}"), ("w", "real words")]),
    );
    assert_eq!(out, "blank\nblank\ndup\treal\t0\t1.000\tsketch\n");
    assert_eq!(code(&run(&["get", "--db", s(&db), "b1"], b"")), 1);
    let out = run(&["query", "--db", s(&db), "--text", " ... "], b"");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("blank"), "{}", stderr(&out));
    let input = dir.path().join("in");
    fs::create_dir(&input).unwrap();
    fs::write(input.join("empty1.txt"), b"").unwrap();
    fs::write(input.join("empty2.txt"), b"\n\n").unwrap();
    let out = run(&["dedup", s(&input)], b"");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("empty"));
}
