//! An index without its `LOCK` file on a file system that refuses to create
//! one (a read-only mount, a restored snapshot) can be read: `verify`,
//! `stats`, `query` and `Index::open_read_only` create nothing
//! (docs/RELIABILITY.md, "Python and operators, hostile II").
//!
//! The read-only file system is a read-only bind mount, which needs root;
//! without root the directory is made unwritable instead (mode 0555), which
//! refuses the `LOCK` file the same way.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cli::run;
use common::{Rng, brute_force, live_docs};
use simhashdb::{Error, Index, Options};

/// A directory where no file can be created, showing `index`'s files:
/// a read-only bind mount of it, or (without the right to mount) `index`
/// itself made unwritable. Undone on drop.
struct Unwritable {
    path: PathBuf,
    mounted: bool,
    original: PathBuf,
}

impl Unwritable {
    fn new(index: &Path, mount_point: &Path) -> Unwritable {
        std::fs::create_dir_all(mount_point).unwrap();
        let mounted = Command::new("mount")
            .args(["--bind", "-o", "ro"])
            .arg(index)
            .arg(mount_point)
            .output()
            .is_ok_and(|out| out.status.success());
        if mounted {
            return Unwritable {
                path: mount_point.to_path_buf(),
                mounted,
                original: index.to_path_buf(),
            };
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(index, std::fs::Permissions::from_mode(0o555)).unwrap();
        Unwritable {
            path: index.to_path_buf(),
            mounted,
            original: index.to_path_buf(),
        }
    }

    /// Whether creating a file in it fails, as it must for the test to mean
    /// anything (root ignores the mode of a directory).
    fn refuses_new_files(&self) -> bool {
        std::fs::write(self.path.join("probe"), b"").is_err()
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.path).status();
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ =
                std::fs::set_permissions(&self.original, std::fs::Permissions::from_mode(0o755));
        }
    }
}

#[test]
fn an_index_without_its_lock_file_on_a_read_only_file_system_can_be_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut rng = Rng(24);
    {
        let index = Index::open(&dir, Options::new().expected_n(10_000)).unwrap();
        let docs: Vec<(u64, u64, Option<String>)> = (0..2_000u64)
            .map(|id| (id, rng.fingerprint(), Some(format!("doc/{id}"))))
            .collect();
        index.insert_batch(docs[..1_000].to_vec()).unwrap();
        index.flush().unwrap();
        // The rest only in the write-ahead log.
        index.insert_batch(docs[1_000..].to_vec()).unwrap();
    }
    // A snapshot restored without LOCK.
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    let files_before = file_names(&dir);

    let ro = Unwritable::new(&dir, &tmp.path().join("ro"));
    if !ro.refuses_new_files() {
        eprintln!("skipped: neither a read-only mount nor an unwritable directory could be made");
        return;
    }

    let index = Index::open_read_only(&ro.path).expect("a read-only open creates nothing");
    let model = live_docs(&index);
    assert_eq!(model.len(), 2_000);
    for _ in 0..50 {
        let q = rng.fingerprint();
        assert_eq!(index.query(q, 3).unwrap(), brute_force(&model, q, 3));
    }
    let (id, (fp, _)) = model.iter().nth(1_500).unwrap();
    assert_eq!(index.query(*fp, 0).unwrap()[0].id, *id);
    index.verify().unwrap();
    // A second reader at once, and no writer.
    let second = Index::open_read_only(&ro.path).unwrap();
    assert_eq!(second.get(*id).unwrap(), Some(*fp));
    assert!(matches!(
        Index::open(&ro.path, Options::new()),
        Err(Error::Locked { .. } | Error::Io { .. })
    ));
    drop((index, second));

    // The command line's readers.
    let db = ro.path.to_str().unwrap();
    let out = run(&["verify", "--db", db], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["stats", "--db", db], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("2000"), "{shown}");
    let out = run(&["query", "--db", db, "--fp", &fp.to_string()], b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("doc/{id}")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    drop(ro);
    assert_eq!(
        file_names(&dir),
        files_before,
        "reading created or removed a file"
    );
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
