//! Readers beside a writer in another process: a writer process under
//! load (flushes, merges, WAL rotations) and readers here that open and
//! refresh over and over, each answer compared with the writer's
//! acknowledged history (everything acknowledged before the open or
//! refresh is there, nothing else is, queries against a brute-force scan);
//! the writer killed with SIGKILL while they read; the errors a reader
//! meets.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use simhashdb::{Durability, Error, Index, Options};

use common::{Model, Rng, brute_force, live_docs};

/// Set in the writer process: the index directory it writes.
const WRITER_DIR: &str = "SIMHASHDB_READERS_WRITER_DIR";
/// Set in the writer process: how many steps it writes.
const WRITER_STEPS: &str = "SIMHASHDB_READERS_WRITER_STEPS";

/// Documents an insert step writes.
const BATCH: u64 = 8;

/// The write of step `i`: every fifth step deletes the first document of
/// the step three before; the others insert `BATCH` new documents in one
/// batch (the second, `marker(i)`, is never deleted or replaced) and
/// replace the third document of the step before.
enum Step {
    Insert(Vec<(u64, u64)>),
    Delete(u64),
}

fn step(i: u64) -> Step {
    if i % 5 == 4 {
        Step::Delete((i - 3) * BATCH)
    } else {
        let mut docs: Vec<(u64, u64)> = (0..BATCH)
            .map(|j| (i * BATCH + j, common::mix(i * BATCH + j)))
            .collect();
        if i > 0 {
            let id = (i - 1) * BATCH + 2;
            docs.push((id, common::mix(id ^ 0x5eed)));
        }
        Step::Insert(docs)
    }
}

/// The document only step `i` (an insert step) writes, and never changes.
fn marker(i: u64) -> u64 {
    i * BATCH + 1
}

fn apply(model: &mut Model, i: u64) {
    match step(i) {
        Step::Insert(docs) => {
            for (id, fp) in docs {
                model.insert(id, (fp, None));
            }
        }
        Step::Delete(id) => {
            model.remove(&id);
        }
    }
}

fn model_after(steps: u64) -> Model {
    let mut model = Model::new();
    for i in 0..steps {
        apply(&mut model, i);
    }
    model
}

/// An index that flushes (rotating its WAL) and merges often.
fn writer_options() -> Options {
    Options::new()
        .k(3)
        .memtable_bytes(16 << 10)
        .durability(Durability::Buffered)
        .flush_thread(true)
}

/// The writer process: this test binary again, running `writer_process`.
/// It prints the number of steps acknowledged after each.
fn spawn_writer(dir: &Path, steps: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "writer_process", "--ignored", "--nocapture"])
        .env(WRITER_DIR, dir)
        .env(WRITER_STEPS, steps.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the writer")
}

/// Not a test: the writer process of the tests here. Writes the steps,
/// printing `acked N` once N steps are acknowledged, then its flush and
/// merge counts.
#[test]
#[ignore = "the writer process of the reader tests"]
fn writer_process() {
    let Some(dir) = std::env::var_os(WRITER_DIR) else {
        return;
    };
    let steps: u64 = std::env::var(WRITER_STEPS)
        .expect("steps")
        .parse()
        .expect("a number of steps");
    let index = Index::open(Path::new(&dir), writer_options()).expect("the writer opens");
    let mut out = std::io::stdout().lock();
    for i in 0..steps {
        match step(i) {
            Step::Insert(docs) => index
                .insert_batch(docs.into_iter().map(|(id, fp)| (id, fp, None::<String>)))
                .expect("insert"),
            Step::Delete(id) => index.delete(id).expect("delete"),
        }
        writeln!(out, "acked {}", i + 1).expect("stdout");
        out.flush().expect("stdout");
    }
    let stats = index.stats();
    writeln!(out, "flushes {} merges {}", stats.flushes, stats.merges).expect("stdout");
    index.close().expect("close");
    writeln!(out, "closed").expect("stdout");
}

/// What the writer process said: steps acknowledged, and its last lines.
struct Progress {
    acked: AtomicU64,
    done: AtomicBool,
    lines: std::sync::Mutex<Vec<String>>,
}

/// Reads the writer's lines on a thread, noting each acknowledgement.
fn follow(child: &mut Child) -> (Arc<Progress>, std::thread::JoinHandle<()>) {
    let progress = Arc::new(Progress {
        acked: AtomicU64::new(0),
        done: AtomicBool::new(false),
        lines: std::sync::Mutex::default(),
    });
    let stdout = child.stdout.take().expect("the writer's stdout");
    let p = progress.clone();
    let thread = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("acked ") {
                p.acked.store(n.parse().expect("a count"), Ordering::SeqCst);
            } else {
                p.lines.lock().expect("lines").push(line);
            }
        }
        p.done.store(true, Ordering::SeqCst);
    });
    (progress, thread)
}

/// The number of steps `reader` holds, found from the markers (present for
/// exactly the insert steps it holds) and the document a following delete
/// step removes.
fn steps_held(reader: &Index, limit: u64) -> u64 {
    let present = |i: u64| reader.get(marker(i)).expect("get").is_some();
    let insert_steps: Vec<u64> = (0..limit).filter(|i| i % 5 != 4).collect();
    // The first insert step not held (markers are present for a prefix).
    let missing = insert_steps.partition_point(|&i| present(i));
    let mut n = match missing {
        0 => 0,
        m => insert_steps[m - 1] + 1,
    };
    if n < limit
        && let Step::Delete(id) = step(n)
        && reader.get(id).expect("get").is_none()
    {
        n += 1;
    }
    n
}

/// Checks that `reader` holds exactly the first `n` steps of the history
/// (nothing else: no write the writer did not make, none half-applied),
/// `n >= before` (acknowledged before it opened or refreshed, as this
/// process heard it), and that it answers queries as a brute-force scan.
fn check_view(reader: &Index, before: u64, n: u64, rng: &mut Rng) {
    assert!(
        n >= before,
        "the reader holds {n} steps; {before} were acknowledged before it opened or refreshed"
    );
    let model = model_after(n);
    assert_eq!(
        live_docs(reader),
        model,
        "the reader's documents are not those of the first {n} steps"
    );
    assert_eq!(reader.len().expect("len"), model.len() as u64);
    let fps: Vec<u64> = model.values().map(|(fp, _)| *fp).collect();
    for _ in 0..20.min(fps.len()) {
        let fp = fps[rng.index(fps.len())] ^ (1 << rng.below(64));
        assert_eq!(
            reader.query(fp, 3).expect("query"),
            brute_force(&model, fp, 3),
            "query {fp:#x} after {n} steps"
        );
    }
}

/// A reader thread: opens and refreshes in turn until `stop`, checking
/// every view. Returns how many views it checked.
fn read_until(dir: &Path, progress: &Progress, stop: &AtomicBool, limit: u64, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut reader: Option<Index> = None;
    let mut views = 0;
    while !stop.load(Ordering::SeqCst) {
        let before = progress.acked.load(Ordering::SeqCst);
        match &reader {
            Some(open) if views % 3 != 0 => open.refresh().expect("refresh"),
            _ => reader = Some(Index::open_read_only(dir).expect("open beside the writer")),
        }
        let open = reader.as_ref().expect("open");
        let n = steps_held(open, limit);
        check_view(open, before, n, &mut rng);
        if views % 7 == 0 {
            open.verify().expect("verify beside the writer");
        }
        views += 1;
    }
    views
}

#[test]
fn readers_beside_a_writer_process_see_every_acknowledged_write_and_nothing_else() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    // The index exists before the readers start.
    Index::open(&dir, writer_options())
        .expect("create")
        .close()
        .expect("close");
    let steps = 3_000;
    let mut writer = spawn_writer(&dir, steps);
    let (progress, follower) = follow(&mut writer);
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (dir, progress, stop) = (dir.clone(), progress.clone(), stop.clone());
            std::thread::spawn(move || read_until(&dir, &progress, &stop, steps, r + 1))
        })
        .collect();
    while !progress.done.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop.store(true, Ordering::SeqCst);
    let views: Vec<u64> = readers
        .into_iter()
        .map(|r| r.join().expect("reader"))
        .collect();
    follower.join().expect("follower");
    let status = writer.wait().expect("wait");
    assert!(status.success(), "the writer failed: {status}");
    let lines = progress.lines.lock().expect("lines").clone();
    assert!(views.iter().all(|&v| v > 0), "views checked: {views:?}");
    // The load flushed and merged while the readers read.
    let counts = lines
        .iter()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next(), words.next(), words.next()) {
                (Some("flushes"), Some(f), Some("merges"), Some(m)) => {
                    Some((f.parse::<u64>().ok()?, m.parse::<u64>().ok()?))
                }
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("the writer's counts: {lines:?}"));
    assert!(
        counts.0 > 10 && counts.1 > 0,
        "flushes and merges: {counts:?}"
    );
    // Once the writer is done, a reader holds every step.
    let reader = Index::open_read_only(&dir).expect("open");
    assert_eq!(steps_held(&reader, steps), steps);
    check_view(&reader, steps, steps, &mut Rng(9));
}

#[test]
fn readers_keep_answering_when_the_writer_is_killed_and_see_every_acknowledged_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    Index::open(&dir, writer_options())
        .expect("create")
        .close()
        .expect("close");
    let steps = 100_000;
    let mut writer = spawn_writer(&dir, steps);
    let (progress, follower) = follow(&mut writer);
    let stop = Arc::new(AtomicBool::new(false));
    let reader_thread = {
        let (dir, progress, stop) = (dir.clone(), progress.clone(), stop.clone());
        std::thread::spawn(move || read_until(&dir, &progress, &stop, steps, 3))
    };
    // A reader opened while the writer runs, held across the kill.
    while progress.acked.load(Ordering::SeqCst) < 500 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let held = Index::open_read_only(&dir).expect("open beside the writer");
    let held_steps = steps_held(&held, steps);
    while progress.acked.load(Ordering::SeqCst) < 1_500 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    writer.kill().expect("SIGKILL the writer");
    writer.wait().expect("wait");
    follower.join().expect("follower");
    let acked = progress.acked.load(Ordering::SeqCst);
    // Readers go on reading the killed writer's files.
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    assert!(reader_thread.join().expect("reader") > 0);
    let mut rng = Rng(4);
    check_view(&held, held_steps, steps_held(&held, steps), &mut rng);

    // A new reader, with no writer: every acknowledged step, whatever the
    // killed writer left at the end of its WAL (a torn tail is left as it
    // is).
    let files_before = file_names(&dir);
    let reader = Index::open_read_only(&dir).expect("open after the kill");
    let n = steps_held(&reader, steps);
    check_view(&reader, acked, n, &mut rng);
    reader.verify().expect("verify after the kill");
    assert_eq!(
        file_names(&dir),
        files_before,
        "a reader changed the directory"
    );

    // The held reader catches up, with the next writer's recovery too.
    held.refresh().expect("refresh after the kill");
    assert_eq!(steps_held(&held, steps), n);
    let recovered = Index::open(&dir, writer_options()).expect("the next writer");
    assert_eq!(
        recovered.get(marker(0)).expect("get"),
        Some(common::mix(marker(0)))
    );
    held.refresh().expect("refresh after recovery");
    check_view(&held, n, steps_held(&held, steps), &mut rng);
    check_view(&reader, n, steps_held(&reader, steps), &mut rng);
    recovered.close().expect("close");
}

fn file_names(dir: &Path) -> Vec<(String, u64)> {
    let mut names: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().expect("stat").len(),
            )
        })
        .collect();
    names.sort();
    names
}

#[test]
fn a_reader_keeps_its_view_until_refresh_and_segments_merged_away_stay_readable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    let writer = Index::open(&dir, writer_options()).expect("open");
    for i in 0..400 {
        apply_to(&writer, i);
    }
    writer.flush().expect("flush");
    let reader = Index::open_read_only(&dir).expect("open beside the writer");
    let mut rng = Rng(5);
    check_view(&reader, 400, steps_held(&reader, 1_000), &mut rng);
    for i in 400..800 {
        apply_to(&writer, i);
    }
    // Every segment the reader maps is merged away and its files removed.
    writer.compact().expect("compact");
    let segments = writer.stats().segments;
    assert_eq!(segments, 1);
    check_view(&reader, 400, steps_held(&reader, 1_000), &mut rng);
    reader
        .verify()
        .expect("the reader's files, whatever the writer removed");
    reader.refresh().expect("refresh");
    check_view(&reader, 800, steps_held(&reader, 1_000), &mut rng);
    assert_eq!(reader.stats().segments, 1);
    // Nothing changed: a refresh keeps the view.
    reader.refresh().expect("refresh");
    check_view(&reader, 800, steps_held(&reader, 1_000), &mut rng);
    // A merge alone (the memtable empty, the WALs unchanged): the refresh
    // takes the merged segment and keeps the WAL's writes.
    for i in 800..900 {
        apply_to(&writer, i);
    }
    writer.flush().expect("flush");
    reader.refresh().expect("refresh");
    assert!(reader.stats().segments > 1);
    writer.compact().expect("compact");
    assert_eq!(writer.stats().segments, 1);
    reader.refresh().expect("refresh after the merge");
    assert_eq!(reader.stats().segments, 1);
    check_view(&reader, 900, steps_held(&reader, 1_000), &mut rng);
    // Writes in the WAL only (inserts, replacements, deletes), caught up
    // with a few at a time.
    for round in 0..6 {
        let end = 903 + 3 * round;
        for i in end - 3..end {
            apply_to(&writer, i);
        }
        reader.refresh().expect("refresh");
        check_view(&reader, end, steps_held(&reader, 1_000), &mut rng);
    }
    // On a writer, refresh does nothing.
    writer.refresh().expect("a writer's refresh");
    writer.close().expect("close");
}

fn apply_to(index: &Index, i: u64) {
    match step(i) {
        Step::Insert(docs) => index
            .insert_batch(docs.into_iter().map(|(id, fp)| (id, fp, None::<String>)))
            .expect("insert"),
        Step::Delete(id) => index.delete(id).expect("delete"),
    }
}

#[test]
fn a_reader_of_a_directory_without_an_index_says_so_and_creates_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("notes");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("readme.txt"), "not an index").expect("write");
    let err = Index::open_read_only(&dir).expect_err("no index here");
    assert!(
        err.to_string().contains("MANIFEST") && err.to_string().contains("no index here"),
        "{err}"
    );
    assert_eq!(
        file_names(&dir),
        vec![("readme.txt".to_string(), 12)],
        "the reader created something"
    );
}

#[test]
fn a_refresh_that_cannot_read_the_index_fails_and_the_reader_keeps_its_view() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    let writer = Index::open(&dir, writer_options()).expect("open");
    for i in 0..50 {
        apply_to(&writer, i);
    }
    writer.close().expect("close");
    let reader = Index::open_read_only(&dir).expect("open");
    let mut rng = Rng(6);
    // The directory replaced by another index.
    std::fs::rename(&dir, tmp.path().join("moved")).expect("move");
    let other = Index::open(&dir, writer_options()).expect("another index");
    other.insert(1, 1).expect("insert");
    match reader.refresh() {
        Err(e @ Error::Corrupted { .. }) => {
            assert!(e.to_string().contains("now holds another index"), "{e}");
        }
        other => panic!("expected Error::Corrupted, got {other:?}"),
    }
    check_view(&reader, 50, steps_held(&reader, 100), &mut rng);
    drop(other);
    // The directory removed.
    std::fs::remove_dir_all(&dir).expect("remove");
    match reader.refresh() {
        Err(e @ Error::Io { .. }) => assert!(e.to_string().contains("MANIFEST"), "{e}"),
        other => panic!("expected Error::Io, got {other:?}"),
    }
    check_view(&reader, 50, steps_held(&reader, 100), &mut rng);
}

/// The fingerprint of document `id` of the served load: near one of the
/// centres, so that queries near the centres find loaded documents too.
#[cfg(feature = "serve")]
fn served_fp(id: u64) -> u64 {
    common::CENTRES[(id % 4) as usize] ^ (1 << (id % 64)) ^ (1 << ((id / 64) % 64))
}

#[cfg(feature = "serve")]
#[test]
fn cli_readers_answer_beside_a_served_index_under_load() {
    use common::cli::{ok, run};
    use common::server::Server;
    use serde_json::json;

    /// The first id the load writes (the index's own documents lie below).
    const FIRST: u64 = 1 << 40;
    let tmp = tempfile::tempdir().expect("tempdir");
    let db = tmp.path().join("index");
    let db_arg = db.to_str().expect("utf-8").to_string();
    let mut base = Model::new();
    {
        let index = Index::open(&db, Options::new().k(3).memtable_bytes(16 << 10)).expect("open");
        let mut rng = Rng(11);
        for batch in 0..10u64 {
            let docs: Vec<(u64, u64, Option<String>)> = (0..300)
                .map(|j| (batch * 300 + j, rng.fingerprint(), None))
                .collect();
            for (id, fp, _) in &docs {
                base.insert(*id, (*fp, None));
            }
            index.insert_batch(docs).expect("insert");
        }
        index.close().expect("close");
    }
    let server = Server::start(&db, &["--sync"]);
    let acked = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (acked, stop) = (acked.clone(), stop.clone());
        let (mut writes, mut compactions) = (server.client(), server.client());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let docs: Vec<serde_json::Value> = (i..i + 50)
                    .map(|id| json!({ "id": FIRST + id, "fingerprint": served_fp(FIRST + id) }))
                    .collect();
                let reply = writes
                    .post(
                        "/v1/documents",
                        json!({ "documents": docs }).to_string().as_bytes(),
                    )
                    .expect("insert");
                assert_eq!(reply.status, 200, "{}", reply.text());
                i += 50;
                acked.store(i, Ordering::SeqCst);
                if i.is_multiple_of(500) {
                    // Every segment replaced, its files removed.
                    let reply = compactions.post("/v1/compact", b"").expect("compact");
                    assert_eq!(reply.status, 200, "{}", reply.text());
                }
            }
        })
    };
    let loaded = |n: u64| -> Model {
        let mut model = base.clone();
        for id in FIRST..FIRST + n {
            model.insert(id, (served_fp(id), None));
        }
        model
    };
    let mut rng = Rng(12);
    for round in 0..12 {
        let before = acked.load(Ordering::SeqCst);
        match round % 4 {
            0 => {
                let out = ok(&["stats", "--db", &db_arg, "--json"], b"");
                let stats: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
                let documents = stats["documents"].as_u64().expect("documents");
                let after = acked.load(Ordering::SeqCst);
                assert!(
                    documents >= base.len() as u64 + before
                        && documents <= base.len() as u64 + after + 50,
                    "stats: {documents} documents; {before}..{after} loaded"
                );
            }
            1 => {
                let fp = common::CENTRES[rng.index(4)] ^ (1 << rng.below(64));
                let out = ok(
                    &["query", "--db", &db_arg, "--fp", &fp.to_string(), "--json"],
                    b"",
                );
                let after = acked.load(Ordering::SeqCst);
                let answer: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
                let found: Vec<(u64, u64)> = answer["matches"]
                    .as_array()
                    .expect("matches")
                    .iter()
                    .map(|m| {
                        (
                            m["id"].as_u64().expect("id"),
                            m["distance"].as_u64().expect("distance"),
                        )
                    })
                    .collect();
                // Everything acknowledged before, nothing not written.
                let must: Vec<(u64, u64)> = brute_force(&loaded(before), fp, 3)
                    .iter()
                    .map(|m| (m.id, u64::from(m.distance)))
                    .collect();
                let may = brute_force(&loaded(after + 50), fp, 3);
                for hit in &must {
                    assert!(found.contains(hit), "query {fp:#x} misses {hit:?}");
                }
                for hit in &found {
                    assert!(
                        may.iter().any(|m| (m.id, u64::from(m.distance)) == *hit),
                        "query {fp:#x} invents {hit:?}"
                    );
                }
            }
            2 => {
                let ids: Vec<u64> = vec![rng.below(3000), FIRST + before.saturating_sub(1)];
                let mut args = vec!["get", "--db", &db_arg, "--json"];
                let texts: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
                for id in &texts {
                    args.extend(["--id", id.as_str()]);
                }
                let out = ok(&args, b"");
                let model = loaded(before.max(1));
                for (line, id) in out.lines().zip(&ids) {
                    let doc: serde_json::Value = serde_json::from_str(line).expect("JSON");
                    assert_eq!(doc["id"].as_u64(), Some(*id), "{out}");
                    assert_eq!(doc["fingerprint"].as_u64(), Some(model[id].0), "{out}");
                }
                assert_eq!(out.lines().count(), 2, "{out}");
            }
            _ => {
                let out = run(&["verify", "--db", &db_arg], b"");
                assert!(
                    out.status.success(),
                    "verify beside the server: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok: "));
            }
        }
        // Let the load get ahead between rounds.
        while acked.load(Ordering::SeqCst) < before + 200 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    stop.store(true, Ordering::SeqCst);
    load.join().expect("load");
    // The server was never held up: it answers, and every write it
    // acknowledged is there.
    let reply = server.client().get("/readyz").expect("readyz");
    assert_eq!(reply.status, 200, "{}", reply.text());
    drop(server);
    let n = acked.load(Ordering::SeqCst);
    let reader = Index::open_read_only(&db).expect("open");
    assert_eq!(live_docs(&reader), loaded(n));
}
