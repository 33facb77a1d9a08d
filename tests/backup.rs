//! Online backups: `Index::backup` beside a writer, `Index::backup_dir`
//! and `simhashdb backup` beside a serving process, `POST /v1/backup`, a
//! backup killed at random points, refused destinations, and another file
//! system. Every backup is opened on its own, verified, and compared with
//! a model of the writes acknowledged before it began.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use simhashdb::{Error, Index, Options};

use common::server::Server;
use common::{Model, Rng, brute_force, live_docs};

/// The write of step `i` of [`model_after`]'s workload: every fifth step
/// deletes the document inserted three steps before; the others insert
/// document `i`.
fn step(i: u64) -> (u64, Option<u64>) {
    if i % 5 == 4 {
        (i - 3, None)
    } else {
        (i, Some(common::mix(i)))
    }
}

fn apply(model: &mut Model, i: u64) {
    match step(i) {
        (id, Some(fp)) => {
            model.insert(id, (fp, None));
        }
        (id, None) => {
            model.remove(&id);
        }
    }
}

fn write_step(index: &Index, i: u64) -> simhashdb::Result<()> {
    match step(i) {
        (id, Some(fp)) => index.insert(id, fp),
        (id, None) => index.delete(id),
    }
}

/// An index that flushes and merges often.
fn small_segments() -> Options {
    Options::new().k(3).memtable_bytes(16 << 10)
}

/// Opens the backup at `dest`, verifies it, and checks that it answers
/// exactly as `model` does: its documents, and queries near some of them
/// against a brute-force scan.
fn check_backup(dest: &Path, model: &Model) {
    let backup = Index::open(dest, Options::new()).expect("the backup opens");
    backup.verify().expect("the backup verifies");
    assert_eq!(&live_docs(&backup), model, "the backup's documents");
    let mut rng = Rng(7);
    let fps: Vec<u64> = model.values().map(|(fp, _)| *fp).collect();
    for _ in 0..50.min(fps.len()) {
        let fp = fps[rng.index(fps.len())] ^ (1 << rng.below(64));
        assert_eq!(
            backup.query(fp, 3).expect("query"),
            brute_force(model, fp, 3),
            "query {fp:#x} of the backup"
        );
    }
    backup.close().expect("close the backup");
}

/// The number of steps of the workload whose model equals `live`, between
/// `from` and `to` steps.
fn steps_matching(live: &Model, from: u64, to: u64) -> Option<u64> {
    let mut model = Model::new();
    for i in 0..from {
        apply(&mut model, i);
    }
    for n in from..=to {
        if model.len() == live.len() && &model == live {
            return Some(n);
        }
        apply(&mut model, n);
    }
    None
}

#[test]
fn backup_while_a_writer_inserts_holds_every_write_acknowledged_before_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let index = Arc::new(Index::open(&db, small_segments()).expect("open"));
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (index, acked, stop) = (index.clone(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                write_step(&index, i).expect("write");
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
        })
    };
    let mut dests = Vec::new();
    for round in 0..4 {
        // Let segments be flushed and merged between backups.
        while acked.load(Ordering::SeqCst) < 3000 * (round + 1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let dest = tmp.path().join(format!("backup-{round}"));
        let before = acked.load(Ordering::SeqCst);
        let report = index.backup(&dest).expect("backup");
        let after = acked.load(Ordering::SeqCst);
        assert_eq!(report.dest, dest);
        assert!(report.copied >= 2, "a WAL and the manifest: {report:?}");
        dests.push((dest, before, after));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    let stats = index.stats();
    assert!(stats.flushes > 0, "the workload flushed: {stats:?}");
    for (dest, before, after) in &dests {
        let backup = Index::open_read_only(dest).expect("open the backup");
        let live = live_docs(&backup);
        drop(backup);
        let n = steps_matching(&live, *before, *after).unwrap_or_else(|| {
            panic!(
                "{}: its {} documents are no prefix of the writes between the {before} \
                 acknowledged before the backup and the {after} after it",
                dest.display(),
                live.len()
            )
        });
        let mut model = Model::new();
        for i in 0..n {
            apply(&mut model, i);
        }
        check_backup(dest, &model);
    }
    // The index itself is unharmed, and left no temporary directory.
    let index = Arc::try_unwrap(index).expect("one owner");
    index.verify().expect("the index verifies");
    index.close().expect("close");
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.contains("backup-tmp")),
        "temporary directories left: {names:?}"
    );
}

#[test]
fn backup_keeps_segments_a_merge_replaces_during_it() {
    // Compactions run between the backup's list of files and its links
    // only by chance here; many rounds make it likely, and every round's
    // backup must be whole.
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let index = Arc::new(Index::open(&db, small_segments()).expect("open"));
    let mut model = Model::new();
    for i in 0..2000 {
        write_step(&index, i).expect("write");
        apply(&mut model, i);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let live: Vec<u64> = model.keys().copied().collect();
    let compactor = {
        let (index, stop) = (index.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                // A rewrite of a live document as it is: the model is unchanged.
                let id = live[i % live.len()];
                index.insert(id, common::mix(id)).expect("rewrite");
                index.compact().expect("compact");
                i += 1;
            }
        })
    };
    for round in 0..20 {
        let dest = tmp.path().join(format!("backup-{round}"));
        index.backup(&dest).expect("backup");
        check_backup(&dest, &model);
    }
    stop.store(true, Ordering::Relaxed);
    compactor.join().expect("compactor");
}

#[test]
fn backup_refuses_an_existing_destination_that_is_not_an_empty_directory() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let index = Index::open(&db, Options::new().k(3)).expect("open");
    let mut model = Model::new();
    for i in 0..100 {
        write_step(&index, i).expect("write");
        apply(&mut model, i);
    }
    let full = tmp.path().join("full");
    std::fs::create_dir(&full).expect("mkdir");
    std::fs::write(full.join("keep.txt"), b"mine").expect("write");
    let file = tmp.path().join("file");
    std::fs::write(&file, b"mine too").expect("write");
    for dest in [&full, &file] {
        match index.backup(dest) {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains(&dest.display().to_string()), "{message}");
                assert!(message.contains("nothing was written"), "{message}");
            }
            other => panic!("backup to {} gave {other:?}", dest.display()),
        }
    }
    assert_eq!(std::fs::read(full.join("keep.txt")).expect("read"), b"mine");
    assert_eq!(std::fs::read_dir(&full).expect("list").count(), 1);
    assert_eq!(std::fs::read(&file).expect("read"), b"mine too");
    // Inside the index's own directory: refused.
    assert!(matches!(
        index.backup(db.join("copy")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        index.backup(db.join("a/b/copy")),
        Err(Error::InvalidArgument(_))
    ));
    assert!(
        !db.join("a").exists(),
        "a parent was created inside the index"
    );
    // An empty directory is taken, and a new path with missing parents.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    index
        .backup(&empty)
        .expect("backup into an empty directory");
    let nested = tmp.path().join("a/b/c");
    index.backup(&nested).expect("backup to a new nested path");
    index.close().expect("close");
    check_backup(&empty, &model);
    check_backup(&nested, &model);
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .filter(|n| n.to_string_lossy().contains("backup-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn backup_to_another_file_system_copies_the_segments() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let shm = Path::new("/dev/shm");
    let other_device = std::fs::metadata(shm)
        .ok()
        .zip(std::fs::metadata(tmp.path()).ok())
        .is_some_and(|(a, b)| {
            use std::os::unix::fs::MetadataExt;
            a.dev() != b.dev()
        });
    if !other_device {
        eprintln!("skipped: /dev/shm is not another file system here");
        return;
    }
    let index = Index::open(&db, small_segments()).expect("open");
    let mut model = Model::new();
    for i in 0..3000 {
        write_step(&index, i).expect("write");
        apply(&mut model, i);
    }
    assert!(index.stats().segments > 0);
    let elsewhere = tempfile::tempdir_in(shm).expect("tempdir in /dev/shm");
    let dest = elsewhere.path().join("backup");
    let report = index.backup(&dest).expect("backup across devices");
    assert_eq!(report.linked, 0, "{report:?}");
    assert_eq!(
        report.copied,
        2 * index.stats().segments + 2,
        "every segment's two files, the WAL and the manifest: {report:?}"
    );
    index.close().expect("close");
    check_backup(&dest, &model);
}

/// An index of a few segments and a WAL, closed, and its model: steps
/// `0..steps` of the workload, written in batches of 500 steps (the
/// inserts of a batch, then its deletes, which leaves what the steps in
/// order leave: each id is inserted once, and deleted at most once after).
fn closed_index(db: &Path, steps: u64) -> Model {
    let options = Options::new().k(3).memtable_bytes(256 << 10);
    let index = Index::open(db, options).expect("open");
    let mut model = Model::new();
    for start in (0..steps).step_by(500) {
        let batch = start..steps.min(start + 500);
        let inserts: Vec<(u64, u64, Option<String>)> = batch
            .clone()
            .filter_map(|j| step(j).1.map(|fp| (j, fp, None)))
            .collect();
        index.insert_batch(inserts).expect("insert");
        for j in batch {
            if let (id, None) = step(j) {
                index.delete(id).expect("delete");
            }
            apply(&mut model, j);
        }
    }
    index.close().expect("close");
    model
}

#[test]
fn backup_killed_at_random_points_leaves_no_destination_or_a_complete_backup() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let model = closed_index(&db, 60_000);
    let bin = env!("CARGO_BIN_EXE_simhashdb");
    let timed = Instant::now();
    let first = tmp.path().join("timed");
    common::cli::ok(
        &[
            "backup",
            "--db",
            db.to_str().expect("utf-8"),
            first.to_str().expect("utf-8"),
        ],
        b"",
    );
    let full = timed.elapsed();
    check_backup(&first, &model);
    let mut rng = Rng(40);
    let (mut absent, mut complete) = (0, 0);
    for run in 0..20 {
        let dest = tmp.path().join(format!("killed-{run}"));
        let mut child = Command::new(bin)
            .args(["backup", "--db"])
            .arg(&db)
            .arg(&dest)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        // From the start of the process to past its usual end.
        let delay = full.mul_f64(rng.below(1200) as f64 / 1000.0);
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        if dest.exists() {
            complete += 1;
            check_backup(&dest, &model);
        } else {
            absent += 1;
            // The next backup to the same destination completes, and
            // removes what the killed one left.
            common::cli::ok(
                &[
                    "backup",
                    "--db",
                    db.to_str().expect("utf-8"),
                    dest.to_str().expect("utf-8"),
                ],
                b"",
            );
            check_backup(&dest, &model);
        }
        let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!(".killed-{run}.")))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
    eprintln!("killed backups: {absent} left nothing, {complete} completed");
    // The index itself is unchanged by all of it.
    let index = Index::open_read_only(&db).expect("open");
    index.verify().expect("verify");
    assert_eq!(live_docs(&index), model);
}

/// `POST /v1/backup` with `body`.
#[cfg(feature = "serve")]
fn post_backup(server: &Server, body: &serde_json::Value) -> common::http::Reply {
    server
        .client()
        .request(
            "POST",
            "/v1/backup",
            Some("application/json"),
            body.to_string().as_bytes(),
        )
        .expect("POST /v1/backup")
}

#[cfg(feature = "serve")]
#[test]
fn backup_of_a_served_index_through_the_cli_and_the_api() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let server = Server::start(&db, &["--sync"]);
    let mut model = Model::new();
    let mut client = server.client();
    let mut rng = Rng(3);
    for round in 0..6 {
        let docs: Vec<serde_json::Value> = (0..400)
            .map(|j| {
                let id = round * 400 + j;
                let fp = rng.fingerprint();
                model.insert(id, (fp, None));
                json!({ "id": id, "fingerprint": fp })
            })
            .collect();
        let reply = client
            .post(
                "/v1/documents",
                json!({ "documents": docs }).to_string().as_bytes(),
            )
            .expect("insert");
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    // The CLI, while the server holds the writer lock.
    let by_cli = tmp.path().join("by-cli");
    let out = common::cli::ok(
        &[
            "backup",
            "--db",
            db.to_str().expect("utf-8"),
            by_cli.to_str().expect("utf-8"),
            "--json",
        ],
        b"",
    );
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON report");
    assert_eq!(report["dest"], by_cli.to_str().expect("utf-8"));
    // The API.
    let by_api = tmp.path().join("by-api");
    let reply = post_backup(&server, &json!({ "path": by_api }));
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["path"], by_api.to_str().expect("utf-8"));
    assert!(body["copied"].as_u64().expect("copied") >= 2, "{body}");
    assert!(
        body["next_seq"].as_u64().expect("next_seq") >= 2400,
        "{body}"
    );
    // Refused: a relative path, an existing non-empty directory, a wrong
    // body; nothing written.
    let reply = post_backup(&server, &json!({ "path": "relative/backup" }));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(!Path::new("relative").exists());
    let reply = post_backup(&server, &json!({ "path": by_api }));
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(reply.text().contains("not empty"), "{}", reply.text());
    let reply = post_backup(&server, &json!({ "dest": "/tmp/x" }));
    assert_eq!(reply.status, 400, "{}", reply.text());
    let reply = server
        .client()
        .request("POST", "/v1/backup", Some("text/plain"), b"{}")
        .expect("POST");
    assert_eq!(reply.status, 415, "{}", reply.text());
    drop(server);
    for dest in [&by_cli, &by_api] {
        check_backup(dest, &model);
    }
}

#[cfg(feature = "serve")]
#[test]
fn cli_backup_of_a_served_index_under_load_holds_every_acknowledged_write() {
    /// The first id the load writes (the index's own documents lie below).
    const FIRST: u64 = 1 << 40;
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let base = closed_index(&db, 20_000);
    let server = Server::start(&db, &["--sync"]);
    // Compactions replace the segments (and remove their files) while the
    // backups run.
    let compactor = {
        let stop = stop.clone();
        let mut client = server.client();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let reply = client.post("/v1/compact", b"").expect("compact");
                assert_eq!(reply.status, 200, "{}", reply.text());
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let mut client = server.client();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let docs: Vec<serde_json::Value> = (i..i + 50)
                    .map(|id| json!({ "id": FIRST + id, "fingerprint": common::mix(FIRST + id) }))
                    .collect();
                let reply = client
                    .post(
                        "/v1/documents",
                        json!({ "documents": docs }).to_string().as_bytes(),
                    )
                    .expect("insert");
                assert_eq!(reply.status, 200, "{}", reply.text());
                i += 50;
                acked.store(i, Ordering::SeqCst);
            }
        })
    };
    let mut dests: Vec<(PathBuf, u64, u64)> = Vec::new();
    for round in 0..5u64 {
        while acked.load(Ordering::SeqCst) < 2000 * (round + 1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let dest = tmp.path().join(format!("backup-{round}"));
        let before = acked.load(Ordering::SeqCst);
        common::cli::ok(
            &[
                "backup",
                "--db",
                db.to_str().expect("utf-8"),
                dest.to_str().expect("utf-8"),
            ],
            b"",
        );
        dests.push((dest, before, acked.load(Ordering::SeqCst)));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    compactor.join().expect("compactor");
    drop(server);
    for (dest, before, after) in dests {
        let backup = Index::open(&dest, Options::new()).expect("open the backup");
        backup.verify().expect("the backup verifies");
        let ids: BTreeSet<u64> = live_docs(&backup)
            .into_keys()
            .filter(|&id| id >= FIRST)
            .collect();
        let n = ids.len() as u64;
        assert_eq!(ids, (FIRST..FIRST + n).collect(), "{}", dest.display());
        // The one request in flight when the backup returned may be in it
        // (written, its answer not yet read): at most 50 documents past
        // `after`.
        assert!(
            n >= before && n <= after + 50,
            "{}: {n} documents; {before} were acknowledged before it, {after} after",
            dest.display()
        );
        let mut model = base.clone();
        model.extend((FIRST..FIRST + n).map(|id| (id, (common::mix(id), None))));
        drop(backup);
        check_backup(&dest, &model);
    }
}
