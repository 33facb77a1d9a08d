//! Races between the library's calls and the threads an index starts, each
//! reproduced through the public API: a batched check-and-insert called
//! from tasks of a rayon pool, `close` racing the prefault and decoding
//! threads, two threads decoding one segment, the merge thread after a
//! failure elsewhere. Schedule points (`tests/common/schedule.rs`) hold a
//! thread where the race needs it, so that each case happens every run;
//! waits are bounded hang detectors, not timing thresholds.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::schedule::{Gates, HANG, without_hanging};
use common::{Model, Rng, brute_force, dir, live_docs, mix};
use simhashdb::engine::fault::{Fault, FaultFs, FaultKind, Op};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::engine::schedule::Point;
use simhashdb::format::FileKind;
use simhashdb::plan::Plan;
use simhashdb::{Error, Index, Match, Options, hamming};

type Answer = Result<(), Vec<Match>>;

/// Runs `f` on its own thread; fails the test if it has not returned
/// within `limit` (a deadlock: the work takes seconds).
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => {
            handle.join().expect("thread");
            value
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sends before it returns"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: {what} did not finish in {limit:?} (a deadlock)")
        }
    }
}

/// What `insert_if_new_many(docs, k)` answers over `model`, computed one
/// document at a time by brute force; `model` then holds the inserted ones.
fn one_at_a_time(model: &mut Model, docs: &[(u64, u64, Option<String>)], k: u32) -> Vec<Answer> {
    docs.iter()
        .map(|(id, fp, name)| {
            let matches = brute_force(model, *fp, k);
            if matches.is_empty() {
                model.insert(*id, (*fp, name.clone()));
                Ok(())
            } else {
                Err(matches)
            }
        })
        .collect()
}

/// `insert_if_new_many` used to hold the writer lock while it searched its
/// batch on rayon's pool: a worker waiting for its share stole another
/// task, which waited for the lock its own thread held. Tasks of a 16-thread
/// pool (what a 16-core machine gets) hung in 20–30 s. Here 16 threads run
/// batched check-and-inserts (large enough to be searched on the pool),
/// batch searches and single inserts of near-duplicate fingerprints; the
/// whole must finish (a watchdog fails it otherwise), and the answers must
/// be those of some order of the calls one at a time.
#[test]
fn insert_if_new_many_from_tasks_of_a_16_thread_pool_never_deadlocks() {
    const K: u32 = 3;
    const TASKS: u64 = 600;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("index");
    let options = || {
        Options::new()
            .plan(Plan::new(5, K).unwrap())
            .memtable_bytes(256 << 10)
            .merge_policy(Some(Arc::new(TieredMergePolicy { fan_in: 4 })))
    };
    let index = Arc::new(Index::open(&path, options()).unwrap());
    // Near-duplicates across tasks: fingerprints a few bits from 3,000
    // centres.
    let centres: Vec<u64> = (0..3_000).map(|c| mix(c ^ 0xc0ffee)).collect();
    let shared = index.clone();
    let (answers, inserted) = within(Duration::from_secs(120), "the pool's tasks", move || {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(16)
            .build()
            .unwrap();
        let answers: Mutex<Vec<((u64, u64), Answer)>> = Mutex::new(Vec::new());
        pool.scope(|scope| {
            for task in 0..TASKS {
                let (index, centres, answers) = (&shared, &centres, &answers);
                scope.spawn(move |_| {
                    let mut rng = Rng(task ^ 0x5eed);
                    let mut fp = || {
                        let mut fp = centres[rng.index(centres.len())];
                        for _ in 0..rng.below(4) {
                            fp ^= 1 << rng.below(64);
                        }
                        fp
                    };
                    match task % 3 {
                        // A batch searched alone, without a lock: a thread
                        // of the pool that finishes one steals.
                        0 => {
                            let fps: Vec<u64> = (0..1_000).map(|_| fp()).collect();
                            index.query_batch(&fps, K).expect("query_batch");
                        }
                        // Ids of their own, so that the checks below know
                        // every write: single check-and-inserts.
                        1 => {
                            for j in 0..8 {
                                let (id, fp) = (task * 10_000 + j, fp());
                                let answer = index.insert_if_new(id, fp, K).expect("insert_if_new");
                                answers.lock().unwrap().push(((id, fp), answer));
                            }
                        }
                        _ => {
                            let n = 65 + (mix(task) % 1_000);
                            let docs: Vec<(u64, u64, Option<String>)> =
                                (0..n).map(|j| (task * 10_000 + j, fp(), None)).collect();
                            let got = index
                                .insert_if_new_many(docs.clone(), K)
                                .expect("insert_if_new_many");
                            assert_eq!(got.len(), docs.len());
                            let mut answers = answers.lock().unwrap();
                            for ((id, fp, _), answer) in docs.into_iter().zip(got) {
                                answers.push(((id, fp), answer));
                            }
                        }
                    }
                });
            }
        });
        let answers = answers.into_inner().unwrap();
        let inserted: Vec<(u64, u64)> = answers
            .iter()
            .filter(|(_, a)| a.is_ok())
            .map(|&(doc, _)| doc)
            .collect();
        (answers, inserted)
    });

    // The index holds exactly the documents answered "inserted".
    let model: Model = inserted.iter().map(|&(id, fp)| (id, (fp, None))).collect();
    assert_eq!(live_docs(&index), model);
    assert!(model.len() > 1_000, "too few inserted to mean anything");
    // Each was inserted only if nothing within K was live: no two are
    // within K of each other.
    let fps: Vec<(u64, u64)> = model.iter().map(|(&id, &(fp, _))| (id, fp)).collect();
    for (i, &(a, fa)) in fps.iter().enumerate() {
        for &(b, fb) in &fps[i + 1..] {
            assert!(
                hamming(fa, fb) > K,
                "{a} and {b} are both inserted, {} apart",
                hamming(fa, fb)
            );
        }
    }
    // Each refused document was refused for live documents within K,
    // nearest first; none of them is deleted or replaced later, so they
    // are all in the index now.
    let mut refused = 0;
    for ((id, fp), answer) in &answers {
        if let Err(matches) = answer {
            refused += 1;
            assert!(!matches.is_empty(), "{id} refused for nothing");
            for m in matches {
                assert_eq!(
                    model.get(&m.id),
                    Some(&(m.fingerprint, None)),
                    "{id} refused for {m:?}"
                );
                assert_eq!(m.distance, hamming(m.fingerprint, *fp));
                assert!(m.distance <= K);
            }
            assert!(
                matches
                    .windows(2)
                    .all(|w| (w[0].distance, w[0].id) < (w[1].distance, w[1].id))
            );
        }
    }
    assert!(refused > 1_000, "too few near-duplicates to mean anything");
    // Searches agree with brute force over the final documents (a sample
    // of the fingerprints written).
    let probe: Vec<u64> = answers.iter().step_by(16).map(|&((_, fp), _)| fp).collect();
    for (fp, got) in probe.iter().zip(index.query_batch(&probe, K).unwrap()) {
        assert_eq!(got, brute_force(&model, *fp, K), "query_batch({fp:#x})");
    }
    Arc::into_inner(index).unwrap().close().unwrap();
    let index = Index::open(&path, options()).unwrap();
    assert_eq!(live_docs(&index), model);
}

/// The batch's search now runs without the writer lock, so writes may come
/// between it and the batch's own write: a document deleted, one inserted,
/// one moved to another fingerprint, with (the second time) more records
/// beside them than the index notes for a batch, so that it searches
/// again. The answers are those of the calls one at a time after those
/// writes; and the writes, made while the batch waits after its search,
/// do not wait for it (it holds no lock there).
#[test]
fn insert_if_new_many_answers_with_the_writes_made_while_it_searched() {
    const K: u32 = 3;
    for crowd in [0u64, 70_000] {
        let fs = FaultFs::new();
        let gates = Gates::new();
        let options = Options::new()
            .plan(Plan::new(5, K).unwrap())
            .memtable_bytes(64 << 10)
            .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
            .schedule(gates.schedule());
        let index = Arc::new(Index::open(dir(), options).unwrap());
        let (a, b, c, moved) = (
            0x00ff_00ffu64,
            0x0f0f_0f0f_0000u64,
            0xabcd_0000_0000u64,
            0x1234_5678u64 << 32,
        );
        index.insert(1, a).unwrap();
        index.insert(3, c).unwrap();
        // Far from everything else: the crowd's fingerprints have their
        // top 16 bits set.
        let mut docs: Vec<(u64, u64, Option<String>)> = (0..200)
            .map(|j| (1_000 + j, mix(j) | 0xffff << 48, None))
            .collect();
        docs.extend([
            (10, a ^ 1, None),
            (11, b ^ 1, Some("b-like".to_string())),
            (12, c ^ 1, None),
            (13, moved ^ 1, None),
            (14, moved ^ 2, None),
        ]);
        gates.hold(Point::BatchSearched);
        let batch = {
            let (index, docs) = (index.clone(), docs.clone());
            std::thread::spawn(move || index.insert_if_new_many(docs, K).unwrap())
        };
        gates.wait_for(Point::BatchSearched);
        {
            let index = index.clone();
            without_hanging("writes while the batch waits after its search", move || {
                index.delete(1).unwrap();
                index.insert_named(2, b, "b").unwrap();
                index.insert(3, moved).unwrap();
                if crowd > 0 {
                    let far = (0..crowd).map(|i| {
                        (
                            100_000 + i,
                            mix(i) & !(0xffff << 48) | 1 << 47,
                            None::<String>,
                        )
                    });
                    index.insert_batch(far).unwrap();
                }
            });
        }
        gates.release(Point::BatchSearched);
        let answers = without_hanging("the batch", move || batch.join().unwrap());
        let mut model: Model = BTreeMap::new();
        model.insert(2, (b, Some("b".to_string())));
        model.insert(3, (moved, None));
        for i in 0..crowd {
            model.insert(100_000 + i, (mix(i) & !(0xffff << 48) | 1 << 47, None));
        }
        let expected = one_at_a_time(&mut model, &docs, K);
        assert_eq!(
            answers, expected,
            "{crowd} records written beside the batch"
        );
        assert!(
            answers[200].is_ok() && answers[202].is_ok(),
            "{crowd}: 10 and 12 are new now"
        );
        assert_eq!(live_docs(&index), model, "{crowd}");
    }
}

/// Options of an index on real files (the prefault and decoding threads
/// run only there) with merges by `compact` only.
fn real_options(prefault: bool) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .merge_policy(None)
        .prefault(prefault)
}

/// Writes `segments` segments of `per_segment` documents each (ids from
/// `first`), and returns the documents.
fn write_segments(index: &Index, first: u64, segments: u64, per_segment: u64) -> Model {
    let mut model = Model::new();
    let mut rng = Rng(first);
    for s in 0..segments {
        let docs: Vec<(u64, u64, Option<String>)> = (0..per_segment)
            .map(|j| {
                (
                    first + s * per_segment + j,
                    rng.fingerprint() ^ rng.next() >> 40,
                    None,
                )
            })
            .collect();
        for (id, fp, _) in &docs {
            model.insert(*id, (*fp, None));
        }
        index.insert_batch(docs).unwrap();
        index.flush().unwrap();
    }
    model
}

/// The segment files in `path`, by name.
fn segment_files(path: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| {
            matches!(
                FileKind::parse_file_name(n),
                Some((FileKind::Segment | FileKind::DocMap, _))
            )
        })
        .collect();
    names.sort();
    names
}

/// The thread that the first query starts to decode segments, and the
/// open's prefault thread, were detached and held segments: when one
/// dropped the last reference to a segment a merge had replaced, the
/// segment removed its files by path — after `close` had returned and
/// released the directory lock. An index created again in the directory
/// (its segment ids start at 1 again) lost its segments and could not be
/// reopened. Here the thread is held while a compaction replaces the
/// segments it holds, and while `close` runs: `close` must wait for it,
/// remove the replaced segments' files itself, and leave a directory in
/// which a new index keeps its files.
#[test]
fn close_joins_the_decoding_threads_and_a_new_index_in_the_directory_keeps_its_files() {
    for thread in ["simhashdb-prefault", "simhashdb-decode"] {
        let prefault = thread == "simhashdb-prefault";
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("index");
        // Rice-coded tables, which both threads decode: flat ones the open
        // checks itself, leaving the threads nothing to hold them at.
        let options = || real_options(prefault).flat_tables(false);
        let index = Index::open(&path, options()).unwrap();
        let model = write_segments(&index, 0, 2, 500);
        index.close().unwrap();

        let gates = Gates::new();
        gates.only_on(Point::DecodeStarted, thread);
        gates.hold(Point::DecodeStarted);
        let index = Index::open(&path, options().schedule(gates.schedule())).unwrap();
        if !prefault {
            // The first query starts the decoding thread.
            let fp = model.values().next().unwrap().0;
            assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
        }
        gates.wait_for(Point::DecodeStarted);
        // Both segments, which the held thread holds, are replaced.
        index.compact().unwrap();
        assert_eq!(index.stats().segments, 1);
        assert_eq!(live_docs(&index), model);
        let closing = std::thread::spawn(move || index.close());
        // `close` waits for the held thread (it has told it to stop), or,
        // as it used to, returns without it.
        let deadline = Instant::now() + HANG;
        while gates.reached(Point::Closing) == 0 && !closing.is_finished() {
            assert!(
                Instant::now() < deadline,
                "{thread}: hang: close neither waits nor returns"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let returned_early = closing.is_finished();
        if !returned_early {
            gates.release(Point::DecodeStarted);
        }
        without_hanging("close", move || closing.join().unwrap()).unwrap();
        if !returned_early {
            // The replaced segments' files went with the index that owned
            // them: only the compacted segment's are left.
            assert_eq!(
                segment_files(&path).len(),
                2,
                "{thread}: {:?}",
                segment_files(&path)
            );
        }

        // A new index in the directory (as a backup restored there would
        // be), whose segment ids start at 1 again.
        std::fs::remove_dir_all(&path).unwrap();
        let index = Index::open(&path, real_options(prefault)).unwrap();
        let new_model = write_segments(&index, 10_000, 2, 300);
        index.close().unwrap();
        if returned_early {
            // The old index's thread goes on, and drops what it held.
            gates.release(Point::DecodeStarted);
            gates.wait_reached(
                if prefault {
                    Point::PrefaultThreadStopped
                } else {
                    Point::DecodeThreadStopped
                },
                1,
            );
        }
        let index = Index::open(&path, real_options(prefault))
            .unwrap_or_else(|e| panic!("{thread}: the new index no longer opens: {e}"));
        assert_eq!(live_docs(&index), new_model, "{thread}");
        assert!(
            !returned_early,
            "{thread}: close returned while the thread still ran"
        );
    }
}

/// The first query starts a thread that decodes every segment without a
/// decoded copy yet, and the open's prefault thread decodes them too: a
/// segment the prefault thread was decoding when the query came was
/// decoded twice, doubling the work and, for a while, the copies' memory.
/// Here the prefault thread is held while it decodes the newest segment and
/// the query's thread comes to that segment: each segment is decoded once.
#[test]
fn a_segment_is_decoded_once_when_the_first_query_comes_while_the_prefault_thread_decodes() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("index");
    // Decoded copies are made of Rice-coded tables only.
    let index = Index::open(&path, real_options(true).flat_tables(false)).unwrap();
    let model = write_segments(&index, 0, 3, 2_000);
    index.close().unwrap();

    let gates = Gates::new();
    gates.only_on(Point::DecodeStarted, "simhashdb-prefault");
    gates.hold_nth(Point::DecodeStarted, 1);
    gates.only_on(Point::DecodeWanted, "simhashdb-decode");
    let index = Index::open(&path, real_options(true).schedule(gates.schedule())).unwrap();
    assert_eq!(index.stats().segments, 3);
    gates.wait_for(Point::DecodeStarted);
    let fp = model.values().next().unwrap().0;
    assert_eq!(index.query(fp, 3).unwrap(), brute_force(&model, fp, 3));
    // The query's thread has come to the segment being decoded.
    gates.wait_reached(Point::DecodeWanted, 1);
    gates.release(Point::DecodeStarted);
    gates.wait_reached(Point::PrefaultThreadStopped, 1);
    gates.wait_reached(Point::DecodeThreadStopped, 1);
    let stats = index.stats();
    assert_eq!(stats.decodes, 3, "{stats:?}");
    assert!(stats.decoded_table_bytes > 0);
    let probe: Vec<u64> = model.values().map(|&(fp, _)| fp ^ 1).collect();
    for (fp, got) in probe.iter().zip(index.query_batch(&probe, 3).unwrap()) {
        assert_eq!(got, brute_force(&model, *fp, 3));
    }
}

/// Merges the two newest segments whenever there are two.
#[derive(Debug)]
struct MergeTwo;

impl MergePolicy for MergeTwo {
    fn merge_newest(&self, segments: &[simhashdb::format::SegmentMeta]) -> Option<usize> {
        (segments.len() >= 2).then_some(2)
    }
}

/// The merge thread checked for a failure elsewhere only when it woke: a
/// merge it had started went on to commit after a failed write had
/// poisoned the index (whose files may then be in an unknown state), and
/// it went on choosing merges. Here the merge thread is held after writing
/// its merged segment while a write fails: it commits nothing, and the
/// index reopens with the segments it had and every acknowledged write.
#[test]
fn the_merge_thread_commits_nothing_once_a_write_has_failed() {
    let fs = FaultFs::new();
    let gates = Gates::new();
    let options = || {
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .memtable_bytes(1 << 20)
            .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
            .merge_policy(Some(Arc::new(MergeTwo)))
            .flush_thread(false)
            .schedule(gates.schedule())
    };
    gates.hold(Point::MergeWritten);
    let index = Index::open(dir(), options()).unwrap();
    let model = write_segments(&index, 0, 2, 100);
    gates.wait_for(Point::MergeWritten);
    assert_eq!(index.stats().segments, 2);
    fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Write]));
    assert!(index.insert(99_999, 1).is_err(), "the write did not fail");
    gates.release(Point::MergeWritten);
    match index.close() {
        Err(Error::Poisoned { cause }) => assert!(cause.contains(".wal"), "{cause}"),
        other => panic!("close after a failed write: {other:?}"),
    }
    assert_eq!(
        gates.reached(Point::MergeCommitted),
        0,
        "the merge committed"
    );
    let gates_off = Options::new().file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>);
    let index = Index::open(dir(), gates_off.merge_policy(None)).unwrap();
    assert_eq!(index.stats().segments, 2);
    assert_eq!(live_docs(&index), model);
}
