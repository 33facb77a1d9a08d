//! The commit protocol under chosen schedules. The writing thread, the flush
//! thread and the merge thread each stop, in turn, at every point of the
//! protocol where they hand work over or commit it (`engine::schedule`), at
//! each of the first four times they reach it (two workloads each); while
//! one is held there,
//! the others go on (a writer running a seeded workload of writes, flushes,
//! syncs and compactions; the unheld background threads), and readers check
//! that
//!
//! - a walk (`for_each_doc`, one snapshot) equals the model after some
//!   prefix of the workload between the acknowledgements seen before and
//!   after it (the write in flight may or may not be visible), and its
//!   callback can query the index;
//! - a query equals brute force over such a prefix model.
//!
//! Then the schedule ends in one of three ways: the held thread is released
//! and everything finishes (the index then equals the whole workload's
//! model, and again after reopening); or the process is killed, or the power
//! cut, while it is held, and the reopened index equals the model after a
//! prefix that keeps every acknowledged write (in `Sync` mode, or after a
//! kill) or at least those up to the last acknowledged flush, sync or
//! compaction (a power cut in `Buffered` mode).
//!
//! Both configurations: flushes on the flush thread, and on the writing
//! thread (merges on the merge thread in both). What this explores, and what
//! it cannot, is in docs/RELIABILITY.md ("Schedules").

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::schedule::{Gates, HANG, without_hanging};
use common::workload::{
    ID_SPACE, Progress, W, assert_a_prefix_survived, perform, prefix_models, workload,
};
use common::{CENTRES, Model, brute_force, live_docs};
use simhashdb::engine::fault::{CrashMode, FaultFs, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::engine::schedule::Point;
use simhashdb::plan::Plan;
use simhashdb::{Durability, Index, Options};

/// The points held, in turn.
const POINTS: [Point; 9] = [
    Point::WriteLogged,
    Point::FlushWanted,
    Point::HandOverWalCreated,
    Point::HandOverCommitted,
    Point::FlushStarted,
    Point::FlushWritten,
    Point::FlushCommitted,
    Point::MergeWritten,
    Point::MergeCommitted,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Release,
    Crash(CrashMode),
}

const ENDS: [End; 3] = [
    End::Release,
    End::Crash(CrashMode::ProcessKill),
    End::Crash(CrashMode::PowerLoss(Unsynced::Torn)),
];

fn dir() -> &'static Path {
    Path::new("/index")
}

fn options(fs: &FaultFs, gates: &Gates, durability: Durability, flush_thread: bool) -> Options {
    Options {
        plan: Some(Plan::new(5, 3).unwrap()),
        durability,
        memtable_bytes: 1_500,
        file_system: Some(Arc::new(fs.process()) as Arc<dyn FileSystem>),
        merge_policy: Some(Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>),
        flush_thread,
        schedule: Some(gates.schedule()),
        ..Options::default()
    }
}

/// What the writer has done so far.
#[derive(Default)]
struct Shared {
    /// Calls acknowledged (from the first).
    acked: AtomicUsize,
    /// Set once the writer has stopped.
    done: AtomicBool,
    progress: Mutex<Option<Progress>>,
}

/// Runs `ops` until one fails, publishing each acknowledgement.
fn write(index: &Index, ops: &[W], shared: &Shared) {
    let mut progress = Progress {
        acked: 0,
        floor: 0,
        failed: false,
    };
    for op in ops {
        if perform(index, op).is_err() {
            progress.failed = true;
            break;
        }
        progress.acked += 1;
        if matches!(op, W::Flush | W::Sync | W::Compact) {
            progress.floor = progress.acked;
        }
        shared.acked.store(progress.acked, Ordering::Release);
    }
    *shared.progress.lock().unwrap() = Some(progress);
    shared.done.store(true, Ordering::Release);
}

/// Reads while a thread is held: a walk and queries, each equal to the
/// model after a prefix between the acknowledgements before and after it
/// (and the write in flight).
fn check_reads(index: &Index, models: &[Model], shared: &Shared, ctx: &str) {
    let within = |before: usize, got: &dyn Fn(&Model) -> bool| {
        let after = shared.acked.load(Ordering::Acquire);
        let last = (after + 1).min(models.len() - 1);
        (before..=last).any(|p| got(&models[p]))
    };
    let before = shared.acked.load(Ordering::Acquire);
    let mut walked = Model::new();
    index
        .for_each_doc(|doc| {
            // The callback may read.
            assert!(index.get(doc.id).is_ok());
            walked.insert(doc.id, (doc.fingerprint, doc.name.clone()));
        })
        .unwrap();
    assert!(
        within(before, &|m| *m == walked),
        "{ctx}: a walk saw no prefix of the workload: {walked:?}"
    );
    for fp in CENTRES {
        let before = shared.acked.load(Ordering::Acquire);
        let got = index.query(fp, 3).unwrap();
        assert!(
            within(before, &|m| brute_force(m, fp, 3) == got),
            "{ctx}: query({fp:#x}, 3) matches no prefix of the workload: {got:?}"
        );
    }
}

/// One schedule: the `nth` arrival at `point` is held, readers check, and
/// the schedule ends as `end` says. Returns whether a thread was held.
fn schedule(
    seed: u64,
    durability: Durability,
    flush_thread: bool,
    point: Point,
    nth: usize,
    end: End,
) -> bool {
    let ctx = format!(
        "seed {seed}, {durability:?}, flush thread {flush_thread}, {point:?} #{nth}, {end:?}"
    );
    let fs = FaultFs::with_seed(seed);
    let gates = Gates::new();
    gates.hold_nth(point, nth);
    let ops = workload(seed, 60);
    let models = prefix_models(&ops);
    let index = Arc::new(
        Index::open(dir(), options(&fs, &gates, durability, flush_thread))
            .unwrap_or_else(|e| panic!("{ctx}: open: {e}")),
    );
    let shared = Arc::new(Shared::default());
    let writer = {
        let (index, ops, shared) = (index.clone(), ops.clone(), shared.clone());
        std::thread::spawn(move || write(&index, &ops, &shared))
    };
    // Until the point is held, or the workload is over without reaching it.
    let deadline = Instant::now() + HANG;
    while !gates.is_waiting(point) && !shared.done.load(Ordering::Acquire) {
        assert!(
            Instant::now() < deadline,
            "hang: {ctx}: neither held nor done"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let held = gates.is_waiting(point);
    if held {
        check_reads(&index, &models, &shared, &ctx);
    }
    match end {
        End::Release => {
            gates.release(point);
            without_hanging("the writer", move || writer.join().unwrap());
            let progress = shared.progress.lock().unwrap().expect("progress");
            assert!(!progress.failed, "{ctx}: a call failed");
            let model = models.last().unwrap();
            assert_eq!(&live_docs(&index), model, "{ctx}");
            for fp in CENTRES {
                assert_eq!(
                    index.query(fp, 3).unwrap(),
                    brute_force(model, fp, 3),
                    "{ctx}"
                );
            }
            drop(Arc::into_inner(index).expect("one owner"));
            let index = Index::open(dir(), options(&fs, &gates, durability, flush_thread))
                .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            assert_eq!(&live_docs(&index), model, "{ctx}: reopened");
            index
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
        }
        End::Crash(mode) => {
            fs.crash(mode);
            gates.release(point);
            without_hanging("the writer", move || writer.join().unwrap());
            let progress = shared.progress.lock().unwrap().expect("progress");
            drop(Arc::into_inner(index).expect("one owner"));
            let index = Index::open(dir(), options(&fs, &gates, durability, flush_thread))
                .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let got = live_docs(&index);
            let power_cut_buffered = matches!(
                (mode, durability),
                (CrashMode::PowerLoss(_), Durability::Buffered)
            );
            assert_a_prefix_survived(&models, &got, progress, power_cut_buffered, &ctx);
            for fp in CENTRES {
                assert_eq!(
                    index.query(fp, 3).unwrap(),
                    brute_force(&got, fp, 3),
                    "{ctx}"
                );
            }
            for id in 0..ID_SPACE {
                assert_eq!(
                    index.get(id).unwrap(),
                    got.get(&id).map(|(fp, _)| *fp),
                    "{ctx}"
                );
            }
            index
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
        }
    }
    assert_eq!(fs.violations(), vec![], "{ctx}");
    held
}

/// Every point, arrival and ending for one configuration; returns the
/// points held at least once.
fn every_schedule(durability: Durability, flush_thread: bool, seed: u64) -> Vec<Point> {
    let mut held = Vec::new();
    let mut schedules = 0;
    for point in POINTS {
        for (nth, run_seed) in
            (1..=4).flat_map(|nth| [(nth, seed + nth as u64), (nth, seed + 50 + nth as u64)])
        {
            for end in ENDS {
                if schedule(run_seed, durability, flush_thread, point, nth, end) {
                    schedules += 1;
                    if !held.contains(&point) {
                        held.push(point);
                    }
                }
            }
        }
    }
    eprintln!(
        "{durability:?}, flush thread {flush_thread}: {schedules} schedules held a thread; \
         points held: {held:?}"
    );
    held
}

fn assert_held(held: &[Point], expected: &[Point]) {
    for point in expected {
        assert!(held.contains(point), "{point:?} was never held: {held:?}");
    }
}

#[test]
fn every_schedule_point_with_the_flush_thread_keeps_the_contract_buffered() {
    let held = every_schedule(Durability::Buffered, true, 100);
    assert_held(&held, &POINTS);
}

#[test]
fn every_schedule_point_with_the_flush_thread_keeps_the_contract_sync() {
    let held = every_schedule(Durability::Sync, true, 200);
    assert_held(&held, &POINTS);
}

/// Without the flush thread there is no hand-over: the writing thread
/// flushes, and the merge thread merges.
#[test]
fn every_schedule_point_without_the_flush_thread_keeps_the_contract() {
    for (durability, seed) in [(Durability::Buffered, 300), (Durability::Sync, 400)] {
        let held = every_schedule(durability, false, seed);
        assert_held(
            &held,
            &[
                Point::WriteLogged,
                Point::FlushWanted,
                Point::FlushWritten,
                Point::FlushCommitted,
                Point::MergeWritten,
                Point::MergeCommitted,
            ],
        );
    }
}
