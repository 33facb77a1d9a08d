//! Indexes of an earlier format version are refused with an error that
//! names the version and says how to move the documents over, and nothing
//! in them is changed (docs/FORMAT.md, "Versions").
//!
//! `tests/data/v2_index/` was written by the last build of format version 2
//! (`simhashdb add`, `compact`, `add`: one segment and a WAL).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use simhashdb::{Index, Options};

/// Every file of `dir` but the lock file, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

/// A copy of the version 2 fixture in a fresh temporary directory.
fn v2_copy() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("v2");
    fs::create_dir(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/v2_index");
    for (name, bytes) in files(&fixture) {
        fs::write(dir.join(name), bytes).unwrap();
    }
    (temp, dir)
}

#[test]
fn a_version_2_index_is_refused_naming_the_version_and_left_unchanged() {
    let (_temp, dir) = v2_copy();
    let before = files(&dir);
    assert!(before.keys().any(|n| n.ends_with(".ids")), "{before:?}");
    for result in [
        Index::open(&dir, Options::default()).map(drop),
        Index::open_read_only(&dir).map(drop),
    ] {
        let message = result.unwrap_err().to_string();
        assert!(message.contains("version 2"), "{message}");
        assert!(
            message.contains("MANIFEST") || message.contains("manifest"),
            "{message}"
        );
        assert!(
            message.contains("for_each_doc") && message.contains("new index"),
            "{message}"
        );
    }
    assert_eq!(files(&dir), before);
}

#[test]
fn the_cli_refuses_a_version_2_index_and_leaves_it_unchanged() {
    let (_temp, dir) = v2_copy();
    let before = files(&dir);
    for args in [&["verify", "--db"][..], &["get", "--id", "1", "--db"][..]] {
        let out = Command::new(env!("CARGO_BIN_EXE_simhashdb"))
            .args(args)
            .arg(&dir)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("version 2"), "{args:?}: {stderr}");
    }
    assert_eq!(files(&dir), before);
}
