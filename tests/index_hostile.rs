//! Operator mistakes and a full disk at the library level: a directory
//! without a manifest, a directory that is not an index, `Index::repair`
//! after a merge's inputs were left behind, `ENOSPC` while a writer opens,
//! and the directory removed under a writer (docs/RELIABILITY.md, "Hostile
//! input and operator mistakes").

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{CENTRES, Model, brute_force, snapshot};
use simhashdb::engine::fault::{Fault, FaultFs, FaultKind};
use simhashdb::engine::fs::FileSystem;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

fn options() -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .merge_policy(None)
        .merge_thread(false)
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn assert_holds(index: &Index, model: &Model) {
    assert_eq!(&snapshot(index, 0..200), model);
    for fp in CENTRES {
        assert_eq!(index.query(fp, 3).unwrap(), brute_force(model, fp, 3));
    }
}

#[test]
fn a_directory_with_index_files_but_no_manifest_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let index = Index::open(dir.path(), options()).unwrap();
    index.insert(1, 10).unwrap();
    index.flush().unwrap();
    index.insert(2, 20).unwrap();
    drop(index);
    fs::remove_file(dir.path().join("MANIFEST")).unwrap();
    let before = names(dir.path());
    for read_only in [false, true] {
        let result = if read_only {
            Index::open_read_only(dir.path())
        } else {
            Index::open(dir.path(), options())
        };
        match result {
            Err(Error::ManifestMissing { found, .. }) => {
                assert!(found.iter().any(|n| n.ends_with(".seg")), "{found:?}");
                assert!(found.iter().any(|n| n.ends_with(".wal")), "{found:?}");
            }
            other => panic!("expected ManifestMissing, got {:?}", other.map(|_| ())),
        }
        assert_eq!(names(dir.path()), before);
    }
}

#[test]
fn a_new_index_is_created_only_in_an_empty_directory_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("photo.jpg"), b"not ours").unwrap();
    match Index::open(dir.path(), options()) {
        Err(Error::NotEmpty { found, .. }) => assert_eq!(found, ["photo.jpg"]),
        other => panic!("expected NotEmpty, got {:?}", other.map(|_| ())),
    }
    assert_eq!(names(dir.path()), BTreeSet::from(["photo.jpg".to_string()]));
    let index = Index::open(dir.path(), options().create_in_non_empty_dir(true)).unwrap();
    index.insert(1, 2).unwrap();
    drop(index);
    // Once it holds an index, it opens like any other.
    assert_eq!(
        Index::open(dir.path(), options()).unwrap().get(1).unwrap(),
        Some(2)
    );
    assert_eq!(fs::read(dir.path().join("photo.jpg")).unwrap(), b"not ours");
}

/// Copies of the files of segments, to put back after a merge removed them.
fn save(dir: &Path, exts: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| exts.iter().any(|x| e == *x)))
        .map(|p| (p.clone(), fs::read(&p).unwrap()))
        .collect()
}

#[test]
fn repair_keeps_a_merge_and_sets_its_leftover_inputs_aside() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let index = Index::open(dir.path(), options()).unwrap();
    for id in 0..60u64 {
        let fp = CENTRES[id as usize % CENTRES.len()] ^ (1 << (id % 64));
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
    }
    index.flush().unwrap();
    // Deletes and upserts in the second segment: replaying the first over
    // the merge would bring old versions back.
    for id in 0..20u64 {
        index.delete(id).unwrap();
        model.remove(&id);
    }
    for id in 20..30u64 {
        let fp = CENTRES[0] ^ (3 << id);
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
    }
    index.flush().unwrap();
    let inputs = save(dir.path(), &["seg", "ids"]);
    assert_eq!(inputs.len(), 4);
    index.compact().unwrap();
    // Writes after the merge stay in the WAL.
    index.insert(100, 7).unwrap();
    model.insert(100, (7, None));
    index.delete(21).unwrap();
    model.remove(&21);
    drop(index);
    // A bad restore: the merge's inputs back, the manifest gone.
    for (path, bytes) in &inputs {
        fs::write(path, bytes).unwrap();
    }
    fs::remove_file(dir.path().join("MANIFEST")).unwrap();

    let report = Index::repair(dir.path(), options()).unwrap();
    assert_eq!(report.settings_from, "options");
    assert_eq!(report.kept_segments.len(), 1, "{report:?}");
    let aside: Vec<&str> = report.set_aside.iter().map(|(n, _)| n.as_str()).collect();
    for (path, _) in &inputs {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(aside.contains(&name), "{name} not set aside: {report:?}");
        assert!(dir.path().join("lost+found").join(name).exists());
    }
    assert_eq!(report.wal_records, 2);
    let index = Index::open_read_only(dir.path()).unwrap();
    index.verify().unwrap();
    assert_holds(&index, &model);
    drop(index);
    let index = Index::open(dir.path(), options()).unwrap();
    assert_holds(&index, &model);
}

#[test]
fn repair_takes_the_settings_of_a_readable_manifest_and_damaged_wal_frames_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let custom = options()
        .plan(Plan::new(6, 4).unwrap())
        .durability(Durability::Sync);
    let index = Index::open(dir.path(), custom.clone()).unwrap();
    for id in 0..10u64 {
        index.insert(id, id * 1000).unwrap();
    }
    drop(index);
    let wal = save(dir.path(), &["wal"]).pop().unwrap().0;
    // Damage the middle of the WAL: the frames before it survive.
    let mut bytes = fs::read(&wal).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    fs::write(&wal, &bytes).unwrap();
    assert!(Index::open(dir.path(), custom.clone()).is_err());

    let report = Index::repair(dir.path(), options()).unwrap();
    assert_eq!(report.settings_from, "MANIFEST");
    assert!(
        report.wal_records >= 1 && report.wal_records < 10,
        "{report:?}"
    );
    assert!(dir.path().join("lost+found/MANIFEST").exists());
    let index = Index::open(dir.path(), custom).unwrap();
    assert_eq!(index.plan().k(), 4);
    index.verify().unwrap();
    for id in 0..report.wal_records {
        assert_eq!(index.get(id).unwrap(), Some(id * 1000));
    }
    assert_eq!(index.get(report.wal_records).unwrap(), None);
}

#[test]
fn repair_without_a_manifest_refuses_settings_the_segments_contradict() {
    let dir = tempfile::tempdir().unwrap();
    let created = options().plan(Plan::new(6, 5).unwrap());
    let index = Index::open(dir.path(), created.clone()).unwrap();
    index.insert(1, 2).unwrap();
    index.flush().unwrap();
    drop(index);
    fs::remove_file(dir.path().join("MANIFEST")).unwrap();
    let before = names(dir.path());
    match Index::repair(dir.path(), options()) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("k = 5"), "{why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(names(dir.path()), before);
    let report = Index::repair(dir.path(), created.clone()).unwrap();
    assert_eq!(report.kept_segments.len(), 1);
    assert_eq!(
        Index::open(dir.path(), created).unwrap().get(1).unwrap(),
        Some(2)
    );
}

#[test]
fn no_space_while_a_writer_opens_leaves_no_file_behind_and_loses_nothing() {
    let dir = Path::new("/index");
    let fs_options =
        |fs: &FaultFs| options().file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>);
    let mut model = Model::new();
    for id in 0..40u64 {
        model.insert(id, (CENTRES[1] ^ id, None));
    }
    // A fresh directory whose WAL holds 40 writes, which an open copies to a
    // new WAL; ENOSPC at each step of that open in turn.
    let mut failed = 0;
    for n in 0.. {
        let fs = FaultFs::new();
        let index = Index::open(dir, fs_options(&fs)).unwrap();
        for (&id, &(fp, _)) in &model {
            index.insert(id, fp).unwrap();
        }
        drop(index);
        let before = fs.list(dir).unwrap();
        fs.inject(Fault::new(FaultKind::NoSpace).after(n).sticky());
        let result = Index::open(dir, fs_options(&fs));
        fs.clear_faults();
        if result.is_ok() {
            break;
        }
        failed += 1;
        assert_eq!(
            fs.list(dir).unwrap(),
            before,
            "ENOSPC after {n} operations left a file"
        );
        let index = Index::open(dir, fs_options(&fs)).unwrap();
        assert_holds(&index, &model);
    }
    assert!(failed > 0, "no step of the open failed");
}

/// The index's directory removed under an open writer: a synced write, a
/// sync and `writable()` each fail naming the WAL that was being written
/// (its path, built only for the error), and the write is not acknowledged.
#[test]
fn writes_into_a_removed_directory_fail_naming_the_wal() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let index = Index::open(&dir, options().durability(Durability::Sync)).unwrap();
    index.insert(1, CENTRES[0]).unwrap();
    let wal = names(&dir)
        .into_iter()
        .find(|n| n.ends_with(".wal"))
        .expect("a WAL");
    fs::remove_dir_all(&dir).unwrap();
    let names_the_wal = |e: &Error, op: &str| match e {
        Error::Io { path, op: o, .. } => {
            assert_eq!(path, &dir.join(&wal), "{e}");
            assert_eq!(*o, op, "{e}");
            assert!(e.to_string().contains("has been deleted"), "{e}");
        }
        other => panic!("expected Error::Io naming {wal}, got {other:?}"),
    };
    names_the_wal(&index.writable().unwrap_err(), "stat");
    names_the_wal(&index.insert(2, CENTRES[1]).unwrap_err(), "sync");
}
