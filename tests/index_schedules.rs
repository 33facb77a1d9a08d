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
//! Then the schedule ends in one of four ways: the held thread is released
//! and everything finishes (the index then equals the whole workload's
//! model, and again after reopening); or the process is killed, or the power
//! cut, while it is held, and the reopened index equals the model after a
//! prefix that keeps every acknowledged write (in `Sync` mode, or after a
//! kill) or at least those up to the last acknowledged flush, sync or
//! compaction (a power cut in `Buffered` mode); or the next file-system call
//! of any thread fails, the workload goes on until a call fails, and the
//! process is killed: then every call that returned `Ok` survives, and a
//! call refused as poisoned left no trace.
//!
//! Both configurations: flushes on the flush thread, and on the writing
//! thread (merges on the merge thread in both). What this explores, and what
//! it cannot, is in docs/RELIABILITY.md ("Schedules").

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::dir;
use common::schedule::{Gates, HANG, without_hanging};
use common::workload::{
    ID_SPACE, Progress, W, assert_a_prefix_survived, perform, prefix_models, workload,
};
use common::{CENTRES, Model, brute_force, live_docs, mix};
use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Unsynced};
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
    /// The next file-system call, of whichever thread, fails once; then
    /// everything goes on until a call fails, and the process is killed.
    FailThenKill,
}

const ENDS: [End; 4] = [
    End::Release,
    End::Crash(CrashMode::ProcessKill),
    End::Crash(CrashMode::PowerLoss(Unsynced::Torn)),
    End::FailThenKill,
];

/// The largest number of segments a flush leaves before the writer waits
/// (or merges beside the merge thread), as by default.
const MAX_SEGMENTS: usize = 32;

fn options(
    fs: &FaultFs,
    gates: &Gates,
    durability: Durability,
    flush_thread: bool,
    max_segments: usize,
) -> Options {
    Options::new()
        .max_segments(max_segments)
        .plan(Plan::new(5, 3).unwrap())
        .durability(durability)
        .memtable_bytes(1_500)
        .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
        .merge_policy(Some(
            Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
        ))
        .flush_thread(flush_thread)
        .schedule(gates.schedule())
}

/// What the writer has done so far.
#[derive(Default)]
struct Shared {
    /// Calls acknowledged (from the first).
    acked: AtomicUsize,
    /// Set once the writer has stopped.
    done: AtomicBool,
    progress: Mutex<Option<Progress>>,
    /// The call that failed was refused as poisoned: it wrote nothing.
    refused: AtomicBool,
}

/// Runs `ops` until one fails, publishing each acknowledgement.
fn write(index: &Index, ops: &[W], shared: &Shared) {
    let mut progress = Progress {
        acked: 0,
        floor: 0,
        failed: false,
    };
    for op in ops {
        if let Err(e) = perform(index, op) {
            progress.failed = true;
            let refused = matches!(e, simhashdb::Error::Poisoned { .. });
            shared.refused.store(refused, Ordering::Release);
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

/// One schedule: the `nth` arrival at each `(point, nth)` of `holds` is
/// held, and with `then: Some((first, n, point))` the next arrival at
/// `point` after the `n`-th at `first`; once every one holds a thread (or
/// the workload is over), readers check, and the schedule ends as `end`
/// says, releasing the points in the order given. Returns whether every
/// point held a thread.
fn schedule(
    seed: u64,
    durability: Durability,
    flush_thread: bool,
    holds: &[(Point, usize)],
    end: End,
) -> bool {
    schedule_of(
        workload(seed, 60),
        seed,
        durability,
        flush_thread,
        holds,
        None,
        end,
        DEFAULT_SETTING,
    )
}

/// What a schedule sets besides its workload, holds and ending.
#[derive(Debug, Clone, Copy)]
struct Setting {
    max_segments: usize,
    /// Count and hold the merge points (`MergeWritten`, `MergeCommitted`)
    /// on the merge thread only, not in the writing thread's merges; and
    /// hold the writer at its third flush until the first of `holds` holds
    /// the merge thread, so that the merge thread's first run is the
    /// workload's first two segments whatever the machine's load.
    merges_on_merge_thread: bool,
}

const DEFAULT_SETTING: Setting = Setting {
    max_segments: MAX_SEGMENTS,
    merges_on_merge_thread: false,
};

/// [`schedule`] of the workload `ops`, with `setting`.
#[allow(clippy::too_many_arguments)]
fn schedule_of(
    ops: Vec<W>,
    seed: u64,
    durability: Durability,
    flush_thread: bool,
    holds: &[(Point, usize)],
    then: Option<(Point, usize, Point)>,
    end: End,
    setting: Setting,
) -> bool {
    let max_segments = setting.max_segments;
    let ctx =
        format!("seed {seed}, {durability:?}, flush thread {flush_thread}, {holds:?}, {end:?}");
    let fs = FaultFs::with_seed(seed);
    let gates = Gates::new();
    if setting.merges_on_merge_thread {
        for point in [Point::MergeWritten, Point::MergeCommitted] {
            gates.only_on(point, "simhashdb-merge");
        }
        gates.hold_nth(Point::FlushWanted, 3);
    }
    let models = prefix_models(&ops);
    let index = Arc::new(
        Index::open(
            dir(),
            options(&fs, &gates, durability, flush_thread, max_segments),
        )
        .unwrap_or_else(|e| panic!("{ctx}: open: {e}")),
    );
    for &(point, nth) in holds {
        gates.hold_nth(point, nth);
    }
    if let Some((first, n, point)) = then {
        gates.hold_after(first, n, point);
    }
    let holds: Vec<(Point, usize)> = holds
        .iter()
        .copied()
        .chain(then.map(|(_, _, point)| (point, 1)))
        .collect();
    let holds = &holds[..];
    let release = || {
        for &(point, _) in holds {
            gates.release(point);
        }
    };
    let waiting = || holds.iter().all(|&(point, _)| gates.is_waiting(point));
    let shared = Arc::new(Shared::default());
    let writer = {
        let (index, ops, shared) = (index.clone(), ops.clone(), shared.clone());
        std::thread::spawn(move || write(&index, &ops, &shared))
    };
    // Each point in turn until it is held, or the workload is over without
    // reaching it. (A schedule whose held threads waited for each other
    // would hang: the detector fails it.)
    let deadline = Instant::now() + HANG;
    if setting.merges_on_merge_thread {
        let first = holds[0].0;
        while !gates.is_waiting(first) && !shared.done.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "hang: {ctx}: the merge thread neither held nor the workload done"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        gates.release(Point::FlushWanted);
    }
    for &(point, _) in holds {
        while !gates.is_waiting(point) && !shared.done.load(Ordering::Acquire) {
            assert!(
                Instant::now() < deadline,
                "hang: {ctx}: neither held nor done"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    let held = waiting();
    if held {
        check_reads(&index, &models, &shared, &ctx);
    }
    match end {
        End::Release => {
            release();
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
            let index = Index::open(
                dir(),
                options(&fs, &gates, durability, flush_thread, max_segments),
            )
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            assert_eq!(&live_docs(&index), model, "{ctx}: reopened");
            index
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
        }
        End::Crash(_) | End::FailThenKill => {
            let mode = match end {
                End::Crash(mode) => mode,
                _ => CrashMode::ProcessKill,
            };
            if end == End::FailThenKill {
                fs.inject(Fault::new(FaultKind::Eio));
                release();
                without_hanging("the writer", move || writer.join().unwrap());
                fs.crash(mode);
            } else {
                fs.crash(mode);
                release();
                without_hanging("the writer", move || writer.join().unwrap());
            }
            let progress = shared.progress.lock().unwrap().expect("progress");
            drop(Arc::into_inner(index).expect("one owner"));
            let index = Index::open(
                dir(),
                options(&fs, &gates, durability, flush_thread, max_segments),
            )
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let got = live_docs(&index);
            let power_cut_buffered = matches!(
                (mode, durability),
                (CrashMode::PowerLoss(_), Durability::Buffered)
            );
            assert_a_prefix_survived(&models, &got, progress, power_cut_buffered, &ctx);
            if end == End::FailThenKill && shared.refused.load(Ordering::Acquire) {
                // A call refused as poisoned did not happen; every call
                // before it, `Ok`, did (a write whose flush failed too).
                assert!(
                    got == models[progress.acked],
                    "{ctx}: a call refused as poisoned left a trace, or an acknowledged one \
                     none ({progress:?})"
                );
            }
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
                if schedule(run_seed, durability, flush_thread, &[(point, nth)], end) {
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

/// Two threads held at once: the flush thread at a point of the flush of
/// the `nth` hand-over, and the writing thread at its next flush after that
/// hand-over, after a write that filled the memtable (a workload of writes
/// and syncs only: an explicit flush would wait for the held one instead).
/// The flush thread is released first. With `FailThenKill` the flush fails
/// while the writer waits for it: the write that was logged must say `Ok`,
/// and a call refused as poisoned must leave no trace.
#[test]
fn the_writer_waiting_for_a_held_flush_keeps_the_contract() {
    let mut held = 0;
    for durability in [Durability::Buffered, Durability::Sync] {
        for flush_point in [
            Point::FlushStarted,
            Point::FlushWritten,
            Point::FlushCommitted,
        ] {
            for nth in 1..=3 {
                for end in ENDS {
                    let seed = 500 + nth as u64;
                    let ops: Vec<W> = workload(seed, 80)
                        .into_iter()
                        .filter(|op| !matches!(op, W::Flush | W::Compact))
                        .collect();
                    let holds = [(flush_point, nth)];
                    let then = Some((Point::HandOverCommitted, nth, Point::FlushWanted));
                    held += usize::from(schedule_of(
                        ops,
                        seed,
                        durability,
                        true,
                        &holds,
                        then,
                        end,
                        DEFAULT_SETTING,
                    ));
                }
            }
        }
    }
    eprintln!("{held} of 72 schedules held both threads");
    assert!(held >= 36, "only {held} of 72 schedules held both threads");
}

/// Two merges at once: the merge thread held at a point of its first merge
/// (its run claimed), and the writing thread, which finds more segments
/// than `max_segments` allows, held as it claims a run of newer
/// segments to merge itself rather than wait (`Point::HelpMerge`), then
/// released in that order, or killed, the power cut, or the next call
/// failed while both are held. Either way the contract holds, and the
/// writer's merge, of segments newer than the held run, never takes one of
/// its segments.
#[test]
fn the_writer_merging_beside_a_held_merge_keeps_the_contract() {
    // Low enough for the writer to exceed it while the merge thread is
    // held, high enough that at least two segments are then newer than the
    // held run (with fewer, the writer can only wait, and the held merge
    // thread never lets it go on): with 8, a merge thread that a loaded
    // machine kept from choosing its run until the writer had flushed 9
    // segments took them all, and the writer hung.
    const HELPING_MAX_SEGMENTS: usize = 16;
    let mut held = 0;
    let mut schedules = 0;
    for (durability, flush_thread) in [
        (Durability::Buffered, false),
        (Durability::Sync, false),
        (Durability::Buffered, true),
    ] {
        for merge_point in [Point::MergeWritten, Point::MergeCommitted] {
            for seed in [601, 602] {
                for end in ENDS {
                    let holds = [(merge_point, 1)];
                    let then = Some((merge_point, 1, Point::HelpMerge));
                    // Two segments of 1,000 documents first: the merge
                    // thread's first run, at least `HELP_RATIO` times any
                    // run of the small segments the writer flushes after
                    // them (a writer does not merge beside a run about its
                    // own run's size: it waits). `compact` would wait for
                    // the held merge thread.
                    let big = |b: u64| {
                        W::UnnamedBatch(
                            (0..1_000)
                                .map(|j| (ID_SPACE + b * 1_000 + j, mix(seed << 32 | b << 16 | j)))
                                .collect(),
                        )
                    };
                    let ops: Vec<W> = [big(0), big(1)]
                        .into_iter()
                        .chain(workload(seed, 240))
                        .filter(|op| !matches!(op, W::Compact))
                        .collect();
                    schedules += 1;
                    held += usize::from(schedule_of(
                        ops,
                        seed,
                        durability,
                        flush_thread,
                        &holds,
                        then,
                        end,
                        Setting {
                            max_segments: HELPING_MAX_SEGMENTS,
                            // The writer's own merge may reach these points
                            // first.
                            merges_on_merge_thread: true,
                        },
                    ));
                }
            }
        }
    }
    eprintln!("{held} of {schedules} schedules held both threads");
    assert!(
        held * 2 >= schedules,
        "only {held} of {schedules} schedules held both threads"
    );
}
