//! One writer per index directory: `DirLock` within a process and across
//! processes.

use std::path::Path;
use std::process::{Command, Output};

use simhashdb::engine::lock::{DirLock, LOCK_FILE, LockError};

/// Set in a child process: the directory it tries to lock.
const CHILD_DIR: &str = "SIMHASHDB_LOCK_CHILD";
/// Set in a child process: "exclusive" or "shared".
const CHILD_MODE: &str = "SIMHASHDB_LOCK_CHILD_MODE";

/// Child exit codes.
const ACQUIRED: i32 = 0;
const LOCKED: i32 = 3;
const FAILED: i32 = 4;

fn is_locked(result: Result<DirLock, LockError>) -> bool {
    matches!(result, Err(LockError::Locked { .. }))
}

#[test]
fn two_writers_in_one_process_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = DirLock::exclusive(dir.path()).expect("first writer");
    assert!(writer.is_exclusive());
    assert_eq!(writer.dir(), dir.path());
    assert!(dir.path().join(LOCK_FILE).is_file());
    assert!(is_locked(DirLock::exclusive(dir.path())));
    assert!(is_locked(DirLock::shared(dir.path())));
}

#[cfg(unix)]
#[test]
fn a_deleted_or_replaced_lock_file_admits_no_second_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = DirLock::exclusive(dir.path()).expect("first writer");
    std::fs::remove_file(dir.path().join(LOCK_FILE)).expect("delete LOCK");
    assert!(is_locked(DirLock::exclusive(dir.path())));
    assert!(is_locked(DirLock::shared(dir.path())));
    std::fs::write(dir.path().join(LOCK_FILE), b"").expect("a new LOCK");
    assert!(is_locked(DirLock::exclusive(dir.path())));
    drop(writer);
    DirLock::exclusive(dir.path()).expect("writer after the first left");
}

#[test]
fn readers_share_and_keep_writers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = DirLock::shared(dir.path()).expect("first reader");
    let second = DirLock::shared(dir.path()).expect("second reader");
    assert!(!first.is_exclusive());
    assert!(is_locked(DirLock::exclusive(dir.path())));
    drop(first);
    assert!(is_locked(DirLock::exclusive(dir.path())));
    drop(second);
    DirLock::exclusive(dir.path()).expect("writer after the readers left");
}

#[test]
fn dropping_the_lock_releases_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    for _ in 0..3 {
        let writer = DirLock::exclusive(dir.path()).expect("writer");
        assert!(is_locked(DirLock::exclusive(dir.path())));
        drop(writer);
    }
    let reader = DirLock::shared(dir.path()).expect("reader after the writers");
    drop(reader);
}

#[test]
fn conflict_message_names_the_directory_as_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let given = dir.path().join(".");
    let _writer = DirLock::exclusive(dir.path()).expect("writer");
    let err = DirLock::exclusive(&given).expect_err("second writer");
    assert_eq!(
        err.to_string(),
        format!(
            "index at {} is already open in this process (another open index holds its \
             lock): close that one first, or use it",
            given.display()
        )
    );
}

#[test]
fn missing_directory_is_an_io_error_not_a_conflict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    for result in [DirLock::exclusive(&missing), DirLock::shared(&missing)] {
        match result {
            Err(LockError::Io { path, source }) => {
                assert_eq!(path, missing.join(LOCK_FILE));
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }
}

#[cfg(unix)]
#[test]
fn readers_need_no_write_permission_once_the_lock_file_exists() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    drop(DirLock::exclusive(dir.path()).expect("writer creates LOCK"));
    let lock_file = dir.path().join(LOCK_FILE);
    std::fs::set_permissions(&lock_file, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    if std::fs::OpenOptions::new()
        .write(true)
        .open(&lock_file)
        .is_ok()
    {
        eprintln!("skipped: this user can write a read-only file (root)");
        return;
    }
    let reader = DirLock::shared(dir.path()).expect("reader on a read-only LOCK");
    assert!(!reader.is_exclusive());
}

#[cfg(unix)]
#[test]
fn a_reader_creates_no_lock_file_and_still_keeps_writers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let reader = DirLock::shared(dir.path()).expect("reader without LOCK");
    assert!(!dir.path().join(LOCK_FILE).exists());
    assert_eq!(child_code(dir.path(), "shared"), ACQUIRED);
    assert!(!dir.path().join(LOCK_FILE).exists());
    // Writers, in this process and another, are kept out (a writer creates
    // LOCK before it finds the directory locked).
    assert!(is_locked(DirLock::exclusive(dir.path())));
    assert_eq!(child_code(dir.path(), "exclusive"), LOCKED);
    drop(reader);
    let writer = DirLock::exclusive(dir.path()).expect("writer after the reader");
    assert!(dir.path().join(LOCK_FILE).is_file());
    assert!(is_locked(DirLock::shared(dir.path())));
    drop(writer);
}

/// Runs this test binary again as a child that tries to lock `dir`.
fn child(dir: &Path, mode: &str) -> Output {
    let exe = std::env::current_exe().expect("current test binary");
    Command::new(exe)
        .args(["--exact", "lock_child", "--ignored", "--nocapture"])
        .env(CHILD_DIR, dir)
        .env(CHILD_MODE, mode)
        .output()
        .expect("spawn child")
}

fn child_code(dir: &Path, mode: &str) -> i32 {
    let out = child(dir, mode);
    let code = out.status.code().expect("child exited by signal");
    assert!(
        code == ACQUIRED || code == LOCKED,
        "child failed ({code}): {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    code
}

#[test]
fn another_process_sees_the_lock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path();

    let writer = DirLock::exclusive(path).expect("writer");
    assert_eq!(child_code(path, "exclusive"), LOCKED);
    assert_eq!(child_code(path, "shared"), LOCKED);
    let out = child(path, "exclusive");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let expected = format!("index at {} is locked by another process", path.display());
    assert!(stdout.contains(&expected), "{stdout}");
    drop(writer);

    assert_eq!(child_code(path, "exclusive"), ACQUIRED);

    let reader = DirLock::shared(path).expect("reader");
    assert_eq!(child_code(path, "shared"), ACQUIRED);
    assert_eq!(child_code(path, "exclusive"), LOCKED);
    drop(reader);
    assert_eq!(child_code(path, "exclusive"), ACQUIRED);
}

/// Not a test: the child process of `another_process_sees_the_lock`. Tries
/// the lock named by the environment and exits with a code saying what
/// happened (the lock dies with the process).
#[test]
#[ignore = "child process of another_process_sees_the_lock"]
fn lock_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let result = match std::env::var(CHILD_MODE).as_deref() {
        Ok("exclusive") => DirLock::exclusive(dir),
        Ok("shared") => DirLock::shared(dir),
        other => {
            println!("unknown mode {other:?}");
            std::process::exit(FAILED);
        }
    };
    let code = match result {
        Ok(_lock) => ACQUIRED,
        Err(err @ LockError::Locked { .. }) => {
            println!("{err}");
            LOCKED
        }
        Err(err) => {
            println!("{err}");
            FAILED
        }
    };
    std::process::exit(code);
}
