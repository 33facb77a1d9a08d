//! Power cuts and process kills while the flush and merge threads run.
//!
//! A `FaultFs::process()` handle lets the index run its background threads
//! over the simulated file system (every call through the handle fails once
//! the machine "crashes", so the dead process's threads stop with it). A
//! seeded workload of writes, flushes, syncs and compactions runs with a tiny
//! memtable (a flush every few writes, handed to the flush thread) and a
//! merge fan-in of 2, while another thread crashes the file system after a
//! random number of its operations: wherever the writing, flush and merge
//! threads happen to be. After reopening, the index must equal the model
//! after a prefix of the workload: every acknowledged write in `Sync` mode
//! or after a process kill; in `Buffered` mode after a power cut, at least
//! everything up to the last acknowledged flush, sync or compaction (which
//! covers a memtable the flush thread had not yet committed). The write in
//! flight may or may not have happened.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::Rng;
use common::dir;
use common::snapshot;
use common::workload::{
    ID_SPACE, assert_a_prefix_survived, perform_until_failure, prefix_models, workload,
};
use simhashdb::engine::fault::{CrashMode, FaultFs, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Index, Options};

/// A new process's view of `fs`, with flushes on the flush thread or on
/// the writing thread (merges on the merge thread either way).
fn options(fs: &FaultFs, durability: Durability, flush_thread: bool) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(durability)
        .memtable_bytes(3_000)
        .merge_policy(Some(
            Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
        ))
        .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
        .flush_thread(flush_thread)
}

/// What one cycle saw, for the test to check that the crashes landed where
/// they should.
#[derive(Debug, Default)]
struct Seen {
    /// The crash came while a flush was running on the flush thread.
    during_flush: bool,
}

/// One cycle: runs the workload of `seed` on a fresh file system, crashes it
/// in `mode` after a random number of its operations, reopens and checks.
fn cycle(seed: u64, durability: Durability, flush_thread: bool, mode: CrashMode) -> Seen {
    let fs = FaultFs::with_seed(seed);
    let ops = workload(seed, 150);
    let models = prefix_models(&ops);
    let options = || options(&fs, durability, flush_thread);
    let index = Index::open(dir(), options()).unwrap();
    let mut seen = Seen::default();

    // A fault-free run of this workload takes a few hundred operations.
    let target = fs.op_count() + Rng(seed ^ 0x5eed).below(600);
    let done = AtomicBool::new(false);
    let progress = std::thread::scope(|scope| {
        let crasher = scope.spawn(|| {
            while fs.op_count() < target && !done.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let flushing = index.stats().flushing_docs > 0;
            fs.crash(mode);
            flushing
        });
        let progress = perform_until_failure(&index, &ops);
        done.store(true, Ordering::Release);
        seen.during_flush = crasher.join().unwrap();
        progress
    });
    // The flush and merge threads stop here, if the crash has not stopped
    // them already.
    drop(index);

    let ctx = format!(
        "seed {seed}, {mode:?}, {durability:?}, flush thread {flush_thread}, crash after \
         operation {target}"
    );
    let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let got = snapshot(&index, 0..ID_SPACE);
    let power_cut_buffered = matches!(
        (mode, durability),
        (CrashMode::PowerLoss(_), Durability::Buffered)
    );
    assert_a_prefix_survived(&models, &got, progress, power_cut_buffered, &ctx);
    index
        .verify()
        .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert_eq!(fs.violations(), vec![], "{ctx}");
    seen
}

fn cycles(durability: Durability, flush_thread: bool, seeds: std::ops::Range<u64>) {
    let modes = [
        CrashMode::ProcessKill,
        CrashMode::PowerLoss(Unsynced::Lost),
        CrashMode::PowerLoss(Unsynced::Kept),
        CrashMode::PowerLoss(Unsynced::Torn),
        CrashMode::PowerLoss(Unsynced::Scattered),
    ];
    let mut during_flush = 0;
    let count = seeds.end - seeds.start;
    for seed in seeds {
        let mode = modes[(seed % modes.len() as u64) as usize];
        during_flush += usize::from(cycle(seed, durability, flush_thread, mode).during_flush);
    }
    // Crashes must land inside background flushes, or this tests little.
    assert!(
        !flush_thread || during_flush * 5 >= count as usize,
        "only {during_flush} of {count} crashes came during a flush"
    );
}

#[test]
fn power_cuts_during_background_flushes_keep_a_prefix_when_buffered() {
    cycles(Durability::Buffered, true, 0..400);
}

#[test]
fn power_cuts_during_background_flushes_lose_nothing_synced() {
    cycles(Durability::Sync, true, 1_000..1_400);
}

/// Flushes on the writing thread, merges on the merge thread (the default
/// with two cores or fewer).
#[test]
fn power_cuts_during_background_merges_keep_a_prefix_when_buffered() {
    cycles(Durability::Buffered, false, 2_000..2_200);
}

#[test]
fn power_cuts_during_background_merges_lose_nothing_synced() {
    cycles(Durability::Sync, false, 3_000..3_200);
}
