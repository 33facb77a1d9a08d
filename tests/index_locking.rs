//! One writer per index directory, and readers beside it: `Index::open`
//! and `Index::open_read_only` against each other, in one process and
//! across processes.

use std::path::Path;
use std::process::{Command, Output};

use simhashdb::{Error, Index, Options};

/// Set in a child process: the index directory it opens.
const CHILD_DIR: &str = "SIMHASHDB_INDEX_LOCK_CHILD";
/// Set in a child process: "write" or "read".
const CHILD_MODE: &str = "SIMHASHDB_INDEX_LOCK_CHILD_MODE";

/// Child exit codes.
const OPENED: i32 = 0;
const LOCKED: i32 = 3;
const FAILED: i32 = 4;

fn options() -> Options {
    Options::new().expected_n(10_000)
}

fn locked_message(dir: &Path) -> String {
    format!("index at {} is locked by another process", dir.display())
}

/// The message of a conflict with another `Index` of the same process.
fn locked_here_message(dir: &Path) -> String {
    format!(
        "index at {} is already open in this process (another open index holds its lock): \
         close that one first, or use it",
        dir.display()
    )
}

/// Every conflict these tests cause in one process is with an index of
/// this process, and the message says so (not "another process").
#[track_caller]
fn assert_locked(result: simhashdb::Result<Index>, dir: &Path) {
    match result {
        Err(e @ Error::Locked { .. }) => {
            assert!(matches!(
                &e,
                Error::Locked { dir: locked, in_this_process: true } if locked == dir
            ));
            assert_eq!(e.to_string(), locked_here_message(dir));
        }
        Err(e) => panic!("expected Error::Locked, got {e:?}"),
        Ok(_) => panic!("expected Error::Locked, but the index opened"),
    }
}

#[test]
fn a_second_writer_in_the_same_process_is_locked_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let writer = Index::open(&dir, options()).unwrap();
    writer.insert(1, 42).unwrap();
    assert_locked(Index::open(&dir, options()), &dir);
    // The refused open changed nothing.
    assert_eq!(writer.get(1).unwrap(), Some(42));
    writer.insert(2, 43).unwrap();
    drop(writer);
    let reopened = Index::open(&dir, options()).unwrap();
    assert_eq!(reopened.get(2).unwrap(), Some(43));
}

#[test]
fn readers_open_beside_the_writer_and_never_keep_it_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let writer = Index::open(&dir, options()).unwrap();
    writer.insert(7, 0xfeed).unwrap();
    // A reader opens beside the writer and sees its acknowledged write.
    let beside = Index::open_read_only(&dir).unwrap();
    assert_eq!(beside.get(7).unwrap(), Some(0xfeed));
    drop(writer);

    let first = Index::open_read_only(&dir).unwrap();
    let second = Index::open_read_only(&dir).unwrap();
    for reader in [&beside, &first, &second] {
        assert_eq!(reader.get(7).unwrap(), Some(0xfeed));
        assert_eq!(reader.query(0xfeed, 0).unwrap()[0].id, 7);
        assert!(matches!(reader.insert(8, 1), Err(Error::ReadOnly)));
        assert!(matches!(reader.delete(7), Err(Error::ReadOnly)));
        assert!(matches!(reader.flush(), Err(Error::ReadOnly)));
        assert!(matches!(reader.compact(), Err(Error::ReadOnly)));
        assert!(matches!(reader.sync(), Err(Error::ReadOnly)));
        assert!(matches!(
            reader.insert_if_new(8, 1, 0),
            Err(Error::ReadOnly)
        ));
    }
    // Readers hold no lock: a writer opens while they are open, and a
    // second writer is still refused.
    let writer = Index::open(&dir, options()).unwrap();
    assert_locked(Index::open(&dir, options()), &dir);
    writer.insert(8, 0xbeef).unwrap();
    assert_eq!(first.get(8).unwrap(), None);
    first.refresh().unwrap();
    assert_eq!(first.get(8).unwrap(), Some(0xbeef));
}

#[test]
fn dropping_the_index_releases_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    for round in 0..3u64 {
        let writer = Index::open(&dir, options()).unwrap();
        writer.insert(round, round).unwrap();
        assert_locked(Index::open(&dir, options()), &dir);
        drop(writer);
        let reader = Index::open_read_only(&dir).unwrap();
        assert_eq!(reader.get(round).unwrap(), Some(round));
        drop(reader);
    }
}

#[test]
fn a_refused_open_does_not_keep_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    drop(Index::open(&dir, options()).unwrap());
    let other_plan = options().plan(simhashdb::plan::Plan::new(7, 2).unwrap());
    assert!(matches!(
        Index::open(&dir, other_plan),
        Err(Error::Mismatch { what: "plan", .. })
    ));
    Index::open(&dir, options()).unwrap();
}

#[test]
fn a_read_only_open_of_a_missing_index_fails_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("missing");
    assert!(Index::open_read_only(&dir).is_err());
    assert!(!dir.exists());
    // An empty directory holds no index either.
    std::fs::create_dir(&dir).unwrap();
    assert!(Index::open_read_only(&dir).is_err());
    assert!(!dir.join("MANIFEST").exists());
}

/// Runs this test binary again as a child that opens `dir`.
fn child(dir: &Path, mode: &str) -> Output {
    let exe = std::env::current_exe().unwrap();
    Command::new(exe)
        .args(["--exact", "index_lock_child", "--ignored", "--nocapture"])
        .env(CHILD_DIR, dir)
        .env(CHILD_MODE, mode)
        .output()
        .unwrap()
}

/// The child's exit code (OPENED or LOCKED) and what it printed.
fn child_outcome(dir: &Path, mode: &str) -> (i32, String) {
    let out = child(dir, mode);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let code = out.status.code().expect("child killed by a signal");
    assert!(
        code == OPENED || code == LOCKED,
        "child failed ({code}): {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, stdout)
}

#[test]
fn another_process_sees_the_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");

    let writer = Index::open(&dir, options()).unwrap();
    writer.insert(1, 1).unwrap();
    let (code, stdout) = child_outcome(&dir, "write");
    assert_eq!(code, LOCKED);
    assert!(stdout.contains(&locked_message(&dir)), "{stdout}");
    // A reader in another process opens beside the writer.
    let (code, stdout) = child_outcome(&dir, "read");
    assert_eq!(code, OPENED, "{stdout}");
    assert!(stdout.contains("get(1) = Ok(Some(1))"), "{stdout}");
    drop(writer);

    // The child writer sees the parent's write, and adds its own.
    let (code, stdout) = child_outcome(&dir, "write");
    assert_eq!(code, OPENED, "{stdout}");
    assert!(stdout.contains("get(1) = Ok(Some(1))"), "{stdout}");
    let reopened = Index::open(&dir, options()).unwrap();
    assert_eq!(reopened.get(1000).unwrap(), Some(1000));
    drop(reopened);

    // A reader here keeps no writer out.
    let reader = Index::open_read_only(&dir).unwrap();
    assert_eq!(child_outcome(&dir, "read").0, OPENED);
    assert_eq!(child_outcome(&dir, "write").0, OPENED);
    drop(reader);
}

/// Not a test: the child process of `another_process_sees_the_lock`. Opens
/// the index named by the environment and exits with a code saying what
/// happened.
#[test]
#[ignore = "child process of another_process_sees_the_lock"]
fn index_lock_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let result = match std::env::var(CHILD_MODE).as_deref() {
        Ok("write") => Index::open(dir, options()),
        Ok("read") => Index::open_read_only(dir),
        other => {
            println!("unknown mode {other:?}");
            std::process::exit(FAILED);
        }
    };
    let code = match result {
        Ok(index) => {
            println!("get(1) = {:?}", index.get(1));
            if std::env::var(CHILD_MODE).as_deref() == Ok("write")
                && let Err(e) = index.insert(1000, 1000)
            {
                println!("{e}");
                std::process::exit(FAILED);
            }
            OPENED
        }
        Err(e @ Error::Locked { .. }) => {
            println!("{e}");
            LOCKED
        }
        Err(e) => {
            println!("{e}");
            FAILED
        }
    };
    std::process::exit(code);
}
