//! Bad input and hostile surroundings at the library's edges: names at and
//! over the limit, extreme ids and fingerprints, a directory that is a file,
//! a missing or read-only directory, other files in the directory, a full
//! disk. Each gives a clear error (or works) and leaves the index intact.

use std::io::ErrorKind;
use std::path::Path;
use std::sync::Arc;

use simhashdb::engine::fault::{Fault, FaultFs, FaultKind, Op};
use simhashdb::engine::fs::FileSystem;
use simhashdb::format::MAX_NAME_LEN;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

fn plan() -> Plan {
    Plan::new(5, 3).unwrap()
}

fn real_options() -> Options {
    Options::new().plan(plan())
}

fn fault_options(fs: &FaultFs) -> Options {
    Options::new()
        .plan(plan())
        .durability(Durability::Sync)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn names_of(index: &Index, fp: u64) -> Vec<(u64, Option<String>)> {
    index
        .query(fp, 0)
        .unwrap()
        .into_iter()
        .map(|m| (m.id, m.name))
        .collect()
}

#[test]
fn names_at_the_limit_empty_and_unusual_survive_flush_compaction_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    // At the limit exactly, counted in bytes: a multi-byte character ends it.
    let at_limit = "x".repeat(MAX_NAME_LEN - 3) + "€";
    assert_eq!(at_limit.len(), MAX_NAME_LEN);
    let over = "x".repeat(MAX_NAME_LEN - 2) + "€";
    let names = [
        (1u64, at_limit.clone()),
        (2, String::new()),
        (3, "line\nbreak\ttab\0nul".to_owned()),
        (4, "中文 名字 🦀".to_owned()),
    ];
    let expected: Vec<(u64, Option<String>)> = names
        .iter()
        .map(|(id, n)| (*id, Some(n.clone())))
        .chain([(5, None)])
        .collect();
    let index = Index::open(tmp.path(), real_options()).unwrap();
    for (id, name) in &names {
        index.insert_named(*id, 0xabc, name.clone()).unwrap();
    }
    index.insert(5, 0xabc).unwrap();
    match index.insert_named(6, 0xabc, over) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains(&(MAX_NAME_LEN + 1).to_string()), "{m}")
        }
        other => panic!("a name one byte over the limit: {other:?}"),
    }
    assert_eq!(names_of(&index, 0xabc), expected, "in the memtable");
    index.flush().unwrap();
    assert_eq!(names_of(&index, 0xabc), expected, "in a segment");
    index.insert(7, 1).unwrap();
    index.flush().unwrap();
    index.compact().unwrap();
    assert_eq!(names_of(&index, 0xabc), expected, "after compaction");
    drop(index);
    let index = Index::open(tmp.path(), real_options()).unwrap();
    assert_eq!(names_of(&index, 0xabc), expected, "after reopening");
    // In the WAL only, then replayed.
    index.insert_named(8, 0xdef, String::new()).unwrap();
    drop(index);
    let index = Index::open(tmp.path(), real_options()).unwrap();
    assert_eq!(names_of(&index, 0xdef), vec![(8, Some(String::new()))]);
}

#[test]
fn extreme_ids_and_fingerprints_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = [
        (0u64, 0u64),
        (u64::MAX, u64::MAX),
        (1, u64::MAX),
        (u64::MAX - 1, 0),
    ];
    let index = Index::open(tmp.path(), real_options()).unwrap();
    for stage in 0..4 {
        match stage {
            0 => {
                for (id, fp) in docs {
                    index.insert(id, fp).unwrap();
                }
            }
            1 => index.flush().unwrap(),
            2 => index.compact().unwrap(),
            _ => {}
        }
        for (id, fp) in docs {
            assert_eq!(index.get(id).unwrap(), Some(fp), "stage {stage}");
        }
        let ids: Vec<u64> = index.query(0, 3).unwrap().iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![0, u64::MAX - 1], "stage {stage}");
        let ids: Vec<u64> = index
            .query(u64::MAX, 0)
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, vec![1, u64::MAX], "stage {stage}");
    }
    index.delete(u64::MAX).unwrap();
    drop(index);
    let index = Index::open(tmp.path(), real_options()).unwrap();
    assert_eq!(index.get(u64::MAX).unwrap(), None);
    assert_eq!(index.get(u64::MAX - 1).unwrap(), Some(0));
}

#[test]
fn a_directory_that_is_a_file_is_a_clear_io_error() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"user data").unwrap();
    for read_only in [false, true] {
        let result = if read_only {
            Index::open_read_only(&file)
        } else {
            Index::open(&file, real_options())
        };
        match result {
            Err(e @ Error::Io { .. }) => {
                let message = e.to_string();
                assert!(message.contains("not-a-dir"), "{message}");
            }
            other => panic!("read-only {read_only}: {other:?}"),
        }
    }
    // Nor is a file inside it attempted: the file is untouched.
    assert_eq!(std::fs::read(&file).unwrap(), b"user data");
    match Index::open(file.join("sub"), real_options()) {
        Err(Error::Io { .. }) => {}
        other => panic!("a directory below a file: {other:?}"),
    }
}

#[test]
fn a_missing_directory_is_not_created_by_a_read_only_open() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    match Index::open_read_only(&missing) {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    assert!(!missing.exists());
    // An empty directory is not an index either, and the error says so.
    std::fs::create_dir(&missing).unwrap();
    match Index::open_read_only(&missing) {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("no MANIFEST"), "{e}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_dir(&missing).unwrap().count(),
        usize::from(missing.join("LOCK").exists())
    );
    // A writer creates it, with missing parents.
    let nested = tmp.path().join("a/b/c");
    let index = Index::open(&nested, real_options()).unwrap();
    index.insert(1, 1).unwrap();
    drop(index);
    assert_eq!(
        Index::open_read_only(&nested).unwrap().get(1).unwrap(),
        Some(1)
    );
}

#[test]
fn a_read_only_open_refuses_writes_and_works_in_a_read_only_directory() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let index = Index::open(&dir, real_options()).unwrap();
    index.insert_named(1, 0xf0f0, "one").unwrap();
    index.flush().unwrap();
    index.insert(2, 0xf0f1).unwrap();
    drop(index);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let can_write = std::fs::write(dir.join("probe"), b"").is_ok();

    let reader = Index::open_read_only(&dir).unwrap();
    assert_eq!(reader.get(1).unwrap(), Some(0xf0f0));
    assert_eq!(reader.get(2).unwrap(), Some(0xf0f1));
    assert_eq!(reader.query(0xf0f0, 1).unwrap().len(), 2);
    assert!(matches!(reader.insert(3, 3), Err(Error::ReadOnly)));
    assert!(matches!(reader.delete(1), Err(Error::ReadOnly)));
    assert!(matches!(reader.flush(), Err(Error::ReadOnly)));
    assert!(matches!(reader.compact(), Err(Error::ReadOnly)));
    drop(reader);

    if can_write {
        eprintln!("skipped the writer part: this user writes to read-only directories (root)");
    } else {
        // A writer replays the WAL into a new one: it cannot, and says so.
        match Index::open(&dir, real_options()) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), ErrorKind::PermissionDenied)
            }
            other => panic!("a writer in a read-only directory: {other:?}"),
        }
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let index = Index::open(&dir, real_options()).unwrap();
    assert_eq!(index.get(2).unwrap(), Some(0xf0f1));
}

#[test]
fn other_files_in_the_directory_are_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let keep = ["notes.txt", "backup.seg.orig", "README", "1.segment"];
    std::fs::create_dir_all(dir.join("subdir")).unwrap();
    for name in keep {
        std::fs::write(dir.join(name), name.as_bytes()).unwrap();
    }
    // A new index needs an empty directory unless asked otherwise.
    assert!(matches!(
        Index::open(dir, real_options()),
        Err(simhashdb::Error::NotEmpty { .. })
    ));
    let options = real_options().create_in_non_empty_dir(true);
    let index = Index::open(dir, options).unwrap();
    for id in 0..200 {
        index.insert(id, id * 7919).unwrap();
    }
    index.flush().unwrap();
    index.insert(500, 5).unwrap();
    index.flush().unwrap();
    index.compact().unwrap();
    drop(index);
    let index = Index::open(dir, real_options()).unwrap();
    assert_eq!(index.get(199).unwrap(), Some(199 * 7919));
    for name in keep {
        assert_eq!(
            std::fs::read(dir.join(name)).unwrap(),
            name.as_bytes(),
            "{name}"
        );
    }
    assert!(dir.join("subdir").is_dir());
}

#[test]
fn a_full_disk_fails_the_write_clearly_and_loses_nothing() {
    let dir = Path::new("/db");
    for on in [
        &[Op::Write][..],
        &[Op::Create][..],
        &[Op::Sync][..],
        &Op::ALL[..],
    ] {
        for flush in [false, true] {
            let fs = FaultFs::new();
            let index = Index::open(dir, fault_options(&fs)).unwrap();
            for id in 0..50 {
                index
                    .insert_named(id, id << 8, format!("doc {id}"))
                    .unwrap();
            }
            // The disk fills up and stays full.
            fs.inject(Fault::new(FaultKind::NoSpace).on(on).sticky());
            let result = if flush {
                index.flush()
            } else {
                index.insert(50, 50 << 8)
            };
            let ctx = format!("ENOSPC on {on:?}, flush {flush}");
            match result {
                Err(e @ Error::Io { .. }) => {
                    let Error::Io { ref source, .. } = e else {
                        unreachable!()
                    };
                    assert_eq!(source.kind(), ErrorKind::StorageFull, "{ctx}");
                    let message = e.to_string();
                    assert!(message.starts_with("cannot "), "{ctx}: {message}");
                    assert!(message.contains("/db"), "{ctx}: {message}");
                }
                Ok(()) if !flush && on == [Op::Create] => {
                    // An append creates no file.
                    index.insert(51, 1).unwrap();
                    continue;
                }
                other => panic!("{ctx}: {other:?}"),
            }
            assert!(
                matches!(index.insert(60, 1), Err(Error::Poisoned { .. })),
                "{ctx}"
            );
            for id in 0..50 {
                assert_eq!(index.get(id).unwrap(), Some(id << 8), "{ctx}");
            }
            drop(index);
            // Still full: reopening may fail, but only with a clear error.
            match Index::open(dir, fault_options(&fs)) {
                Ok(index) => {
                    for id in 0..50 {
                        assert_eq!(index.get(id).unwrap(), Some(id << 8), "{ctx}");
                    }
                }
                Err(Error::Io { source, .. }) => {
                    assert_eq!(source.kind(), ErrorKind::StorageFull, "{ctx}")
                }
                Err(other) => panic!("{ctx}: reopen on a full disk: {other:?}"),
            }
            // Space freed: everything acknowledged is there, and writes work.
            fs.clear_faults();
            let index = Index::open(dir, fault_options(&fs)).unwrap();
            for id in 0..50 {
                assert_eq!(index.get(id).unwrap(), Some(id << 8), "{ctx}");
                assert_eq!(
                    names_of(&index, id << 8),
                    vec![(id, Some(format!("doc {id}")))]
                );
            }
            // The failed write was not acknowledged: it may be there or not
            // (a failed sync can leave its bytes in the log), but whole.
            let failed = index.get(50).unwrap();
            assert!(
                failed.is_none() || failed == Some(50 << 8),
                "{ctx}: {failed:?}"
            );
            index.insert(50, 50 << 8).unwrap();
            index.flush().unwrap();
        }
    }
}
