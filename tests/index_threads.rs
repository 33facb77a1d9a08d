//! The engine under its background threads: what went wrong once between the
//! writing thread, the flush thread and the merge thread, each replayed with
//! the flush thread on. Schedule points (`tests/common/schedule.rs`) hold a
//! thread where the bug needs it, so each case happens every run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::dir;
use common::schedule::{Gates, without_hanging};
use common::{Model, Rng, brute_force};
use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Op};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::engine::schedule::Point;
use simhashdb::format::MAX_NAME_LEN;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

/// A process over `fs` (flush and merge threads allowed), with the flush
/// thread on and a memtable of about 20 documents.
fn options(fs: &FaultFs, gates: &Gates, durability: Durability) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(durability)
        .memtable_bytes(2_000)
        .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
        .merge_policy(None)
        .flush_thread(true)
        .schedule(gates.schedule())
}

/// Inserts new documents from `*next` on until a write hands the memtable
/// over to the flush thread; returns the documents written.
fn fill_until_handed_over(index: &Index, next: &mut u64) -> Vec<(u64, u64)> {
    let mut written = Vec::new();
    while index.stats().flushing_docs == 0 {
        let (id, fp) = (*next, Rng(*next).next());
        index.insert(id, fp).unwrap();
        written.push((id, fp));
        *next += 1;
        assert!(*next < 10_000, "the memtable never filled");
    }
    written
}

/// A batch over the WAL frame limit (256 MiB), refused as the first write
/// to a new WAL, used to take sequence numbers all the same: the next
/// frame's left a gap after the previous WAL's last, and recovery, which
/// ends at such a gap, dropped every later acknowledged write (after a
/// crash before the flush thread committed the frozen memtable).
#[test]
fn a_refused_batch_takes_no_sequence_numbers_and_later_synced_writes_survive_a_crash() {
    let fs = FaultFs::new();
    let gates = Gates::new();
    // The flush thread stops before committing its segment: both WALs stay
    // in the manifest.
    gates.hold(Point::FlushWritten);
    let index = Index::open(dir(), options(&fs, &gates, Durability::Sync)).unwrap();
    let mut next = 0;
    let mut acknowledged = fill_until_handed_over(&index, &mut next);
    gates.wait_for(Point::FlushWritten);

    let name = "n".repeat(MAX_NAME_LEN);
    // Just over the frame limit (256 MiB of names).
    let docs = (256 << 20) / MAX_NAME_LEN as u64 + 8;
    let refused = index.insert_batch((0..docs).map(|i| (1_000_000 + i, i, Some(name.clone()))));
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
    for _ in 0..5 {
        let (id, fp) = (next, Rng(next).next());
        index.insert(id, fp).unwrap();
        assert_eq!(index.get(id).unwrap(), Some(fp));
        acknowledged.push((id, fp));
        next += 1;
    }
    assert!(
        index.stats().flushing_docs > 0,
        "the flush must still be running"
    );
    // The process dies before the flush thread commits.
    fs.crash(CrashMode::ProcessKill);
    gates.release(Point::FlushWritten);
    drop(index);

    let index = Index::open(dir(), options(&fs, &gates, Durability::Sync)).unwrap();
    for &(id, fp) in &acknowledged {
        assert_eq!(
            index.get(id).unwrap(),
            Some(fp),
            "acknowledged insert {id} lost"
        );
    }
    assert_eq!(
        index.get(1_000_000).unwrap(),
        None,
        "a refused batch came back"
    );
    index.verify().unwrap();
}

/// A write is logged and applied, fills the memtable, and then finds that
/// the previous background flush failed: it used to return that failure
/// (`Poisoned`), although the document was written and survived reopening.
/// Now it returns `Ok`, and the next call reports the failure, naming it.
#[test]
fn a_logged_write_returns_ok_when_it_then_finds_a_background_flush_failed() {
    for durability in [Durability::Buffered, Durability::Sync] {
        let fs = FaultFs::new();
        let gates = Gates::new();
        gates.hold(Point::FlushStarted);
        let index = Index::open(dir(), options(&fs, &gates, durability)).unwrap();
        let mut next = 0;
        let mut acknowledged = fill_until_handed_over(&index, &mut next);
        gates.wait_for(Point::FlushStarted);
        // The flush thread's first call, creating the segment's doc map,
        // fails (the writing thread only appends).
        fs.inject(Fault::new(FaultKind::Eio).on(&[Op::Create]));
        // The write that fills the next memtable stops before it waits for
        // the flush thread; the flush thread then fails.
        gates.hold(Point::FlushWanted);
        let index = Arc::new(index);
        let writer = {
            let index = index.clone();
            let mut next = next;
            std::thread::spawn(move || {
                let mut results = Vec::new();
                // Writes until a call fails: the one that fills the memtable
                // stops at the gate, then finds the flush failed.
                while results.len() < 1_000 {
                    let (id, fp) = (next, Rng(next).next());
                    let result = index.insert(id, fp);
                    let failed = result.is_err();
                    results.push((id, fp, result));
                    next += 1;
                    if failed {
                        break;
                    }
                }
                results
            })
        };
        gates.wait_for(Point::FlushWanted);
        gates.release(Point::FlushStarted);
        gates.release(Point::FlushWanted);
        let mut results = without_hanging("the writing thread", move || writer.join().unwrap());
        assert_eq!(
            fs.faults_fired(),
            1,
            "{durability:?}: the fault never fired"
        );
        // The last call failed, naming the flush's failure, and wrote
        // nothing; every other was logged, and said so.
        let (failed_id, _, failed) = results.pop().expect("a call");
        match failed {
            Err(Error::Poisoned { cause }) => {
                assert!(cause.contains(".ids"), "{durability:?}: cause: {cause}")
            }
            other => panic!("{durability:?}: after a failed flush, insert {failed_id}: {other:?}"),
        }
        assert_eq!(index.get(failed_id).unwrap(), None, "{durability:?}");
        for (id, fp, result) in results {
            assert!(
                result.is_ok(),
                "{durability:?}: insert {id}, logged, returned {result:?}"
            );
            acknowledged.push((id, fp));
        }
        for &(id, fp) in &acknowledged {
            assert_eq!(index.get(id).unwrap(), Some(fp), "{durability:?}: {id}");
        }
        drop(Arc::into_inner(index).unwrap());

        let index = Index::open(dir(), options(&fs, &gates, durability)).unwrap();
        for &(id, fp) in &acknowledged {
            assert_eq!(
                index.get(id).unwrap(),
                Some(fp),
                "{durability:?}: {id} after reopening"
            );
        }
        assert_eq!(index.get(failed_id).unwrap(), None, "{durability:?}");
    }
}

/// `for_each_doc` used to call its callback holding the state's read lock:
/// a callback that wrote deadlocked at once, and one that read deadlocked
/// as soon as a commit (a flush's, a merge's or a write's) queued for the
/// write lock between the walk's guard and the callback's. Here callbacks
/// query and write while a writer, the flush thread and the merge thread
/// run, on real files.
#[test]
fn callbacks_of_for_each_doc_may_read_and_write_while_the_threads_run() {
    let tmp = tempfile::tempdir().unwrap();
    let index = Index::open(
        tmp.path(),
        Options::new()
            .plan(Plan::new(5, 3).unwrap())
            .memtable_bytes(16 << 10)
            .merge_policy(Some(
                Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
            ))
            .flush_thread(true),
    )
    .unwrap();
    let index = Arc::new(index);
    /// Ids the callbacks write, above the writer's.
    const FROM_CALLBACKS: u64 = 1 << 32;
    let fp = |id: u64| Rng(id).fingerprint();
    let acked = Arc::new(AtomicU64::new(0));
    let walks = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (index, acked, walks, done) =
            (index.clone(), acked.clone(), walks.clone(), done.clone());
        std::thread::spawn(move || {
            let mut id = 0;
            while !done.load(Ordering::Acquire) {
                // At most 250 documents per walk, so walks stay short.
                if id >= 250 * (walks.load(Ordering::Acquire) + 1) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                index.insert(id, fp(id)).unwrap();
                id += 1;
                acked.store(id, Ordering::Release);
            }
        })
    };
    let walker = {
        let (index, acked) = (index.clone(), acked.clone());
        move || {
            let mut written = Model::new();
            for walk in 0..30u64 {
                walks.store(walk, Ordering::Release);
                let before = acked.load(Ordering::Acquire);
                let mut seen = Vec::new();
                index
                    .for_each_doc(|doc| {
                        if doc.id < FROM_CALLBACKS {
                            seen.push(doc.id);
                            // Writer ids are never rewritten.
                            assert_eq!(doc.fingerprint, fp(doc.id));
                            assert_eq!(index.get(doc.id).unwrap(), Some(doc.fingerprint));
                            let found = index.query(doc.fingerprint, 1).unwrap();
                            assert!(found.iter().any(|m| m.id == doc.id), "{}", doc.id);
                            if doc.id % 97 == 0 {
                                let id = FROM_CALLBACKS + walk * 10_000 + doc.id;
                                index.insert(id, doc.fingerprint).unwrap();
                                written.insert(id, (doc.fingerprint, None));
                            }
                        }
                    })
                    .unwrap();
                // One snapshot: a prefix of the writer's inserts, at least
                // those acknowledged before the walk began.
                seen.sort_unstable();
                let n = seen.len() as u64;
                assert!(
                    n >= before,
                    "walk {walk}: {n} documents, {before} acknowledged"
                );
                assert!(seen.iter().copied().eq(0..n), "walk {walk}: not a prefix");
            }
            written
        }
    };
    let written = without_hanging("30 walks", walker);
    done.store(true, Ordering::Release);
    without_hanging("the writer", move || writer.join().unwrap());
    for (&id, &(fp, _)) in &written {
        assert_eq!(index.get(id).unwrap(), Some(fp));
        assert!(index.query(fp, 0).unwrap().iter().any(|m| m.id == id));
    }
    let n = acked.load(Ordering::Acquire);
    let mut model: Model = (0..n).map(|id| (id, (fp(id), None))).collect();
    model.extend(written);
    for centre in common::CENTRES {
        assert_eq!(
            index.query(centre, 3).unwrap(),
            brute_force(&model, centre, 3)
        );
    }
    assert_eq!(common::live_docs(&index), model);
}

/// Before the fix a callback that wrote hung at its first document, with
/// no thread needed: the walk held the lock the write asked for.
#[test]
fn a_callback_of_for_each_doc_may_write_to_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let index = Arc::new(
        Index::open(
            tmp.path(),
            Options::new().memtable_bytes(4 << 10).flush_thread(true),
        )
        .unwrap(),
    );
    for id in 0..100 {
        index.insert(id, Rng(id).next()).unwrap();
    }
    let walker = index.clone();
    let walked = without_hanging("a walk that writes", move || {
        let mut walked = 0;
        walker
            .for_each_doc(|doc| {
                walked += 1;
                // Moves every document; the walk goes on over its snapshot.
                walker.insert(doc.id, !doc.fingerprint).unwrap();
                walker.insert(1_000 + doc.id, doc.fingerprint).unwrap();
            })
            .unwrap();
        walked
    });
    assert_eq!(walked, 100);
    for id in 0..100 {
        assert_eq!(index.get(id).unwrap(), Some(!Rng(id).next()));
        assert_eq!(index.get(1_000 + id).unwrap(), Some(Rng(id).next()));
    }
    assert_eq!(common::live_docs(&index).len(), 200);
}

/// A walk keeps its snapshot while the memtable it copied is written, handed
/// over, flushed and merged away, and the segments it holds are replaced.
#[test]
fn for_each_doc_walks_the_snapshot_of_its_start() {
    let fs = FaultFs::new();
    let gates = Gates::new();
    let options = || {
        options(&fs, &gates, Durability::Buffered)
            .merge_policy(Some(
                Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
            ))
    };
    let index = Arc::new(Index::open(dir(), options()).unwrap());
    let mut model = Model::new();
    for id in 0..60 {
        let fp = Rng(id).fingerprint();
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
    }
    gates.hold(Point::WalkSnapshotTaken);
    let walk = {
        let index = index.clone();
        std::thread::spawn(move || common::live_docs(&index))
    };
    gates.wait_for(Point::WalkSnapshotTaken);
    // Meanwhile: upserts, deletes, flushes and merges.
    let writer = index.clone();
    without_hanging("writes during a walk", move || {
        for id in 0..60 {
            match id % 3 {
                0 => writer.delete(id).unwrap(),
                1 => writer.insert(id, !Rng(id).fingerprint()).unwrap(),
                _ => {}
            }
        }
        writer.compact().unwrap();
    });
    gates.release(Point::WalkSnapshotTaken);
    let walked = without_hanging("the walk", move || walk.join().unwrap());
    assert_eq!(walked, model, "the walk saw writes made after it started");
    assert!(fs.violations().is_empty(), "{:?}", fs.violations());
}

/// `open` starts the merge thread, then the flush thread; when the second
/// failed to start, the first was left running with nothing to stop it.
#[test]
fn a_failed_start_of_the_flush_thread_stops_the_merge_thread() {
    let fs = FaultFs::new();
    let gates = Gates::new();
    gates.fail(Point::StartFlushThread);
    let options = options(&fs, &gates, Durability::Buffered)
        .merge_policy(Some(
            Arc::new(TieredMergePolicy::default()) as Arc<dyn MergePolicy>
        ));
    match Index::open(dir(), options) {
        Err(Error::Io { op, .. }) => assert_eq!(op, "start the flush thread"),
        other => panic!("{other:?}"),
    }
    assert_eq!(gates.reached(Point::StartMergeThread), 1);
    // Stopped before `open` returned.
    assert_eq!(gates.reached(Point::MergeThreadStopped), 1);
}
