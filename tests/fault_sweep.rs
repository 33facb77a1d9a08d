//! Countdown fault injection at every file-system call of a workload: for
//! each call in turn and each kind of fault (EIO, ENOSPC, a short write, a
//! failing sync), the fault fires once, and
//!
//! - the index call that hit it returns `Error::Io` (an error is never
//!   swallowed; nothing panics), unless it hit a write's flush after the
//!   write was logged: then the write returns `Ok` (it happened) and the
//!   next call reports the failure as `Error::Poisoned`, naming it;
//! - the writer is poisoned: every later write, flush, compaction and sync
//!   fails with `Error::Poisoned`, while queries still answer;
//! - after a process kill (and, in `Durability::Sync`, after a power loss
//!   that drops every unsynced byte) the index reopens cleanly and holds
//!   every acknowledged operation, plus possibly the failed one, never
//!   anything else;
//! - the reopened index takes new writes, and the engine never wrote to or
//!   truncated a mapped file.
//!
//! The one exception is removing a file no manifest names any more (an old
//! WAL, a merged segment): that is best effort, so a failed removal is not
//! an error; it must leave every answer intact (the next open removes the
//! leftover file).

mod common;

use std::sync::Arc;

use common::dir;
use common::workload::{ID_SPACE, W, perform, prefix_models, workload};
use common::{CENTRES, Model, Rng, brute_force, snapshot};
use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Op, Unsynced};
use simhashdb::engine::fs::FileSystem;
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::format::{WalEnd, WalReader};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

fn options(fs: &FaultFs, durability: Durability) -> Options {
    Options::new()
        .plan(Plan::new(5, 3).unwrap())
        .durability(durability)
        .memtable_bytes(2_000)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
        .merge_policy(Some(
            Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
        ))
}

fn assert_queries(index: &Index, model: &Model, ctx: &str) {
    for fp in CENTRES {
        assert_eq!(
            index.query(fp, 3).unwrap(),
            brute_force(model, fp, 3),
            "{ctx}: query({fp:#x}, 3)"
        );
    }
}

/// Every write entry point refuses with `Error::Poisoned`.
fn assert_poisoned(index: &Index, ctx: &str) {
    let results = [
        ("insert", index.insert(0, 1)),
        ("insert_named", index.insert_named(0, 1, "x")),
        ("insert_batch", index.insert_batch([(0, 1, None::<String>)])),
        ("delete", index.delete(0)),
        (
            "insert_if_new",
            index.insert_if_new(ID_SPACE + 1, 0x5555, 0).map(|_| ()),
        ),
        ("flush", index.flush()),
        ("compact", index.compact()),
        ("sync", index.sync()),
    ];
    for (what, result) in results {
        assert!(
            matches!(result, Err(Error::Poisoned { .. })),
            "{ctx}: {what} after a failed write: {result:?}"
        );
    }
}

/// File-system calls a fault-free run of `ops` makes after the open.
fn calls(ops: &[W], durability: Durability) -> u64 {
    let fs = FaultFs::new();
    let index = Index::open(dir(), options(&fs, durability)).unwrap();
    let start = fs.op_count();
    for op in ops {
        perform(&index, op).unwrap();
    }
    assert_eq!(
        &snapshot(&index, 0..ID_SPACE),
        prefix_models(ops).last().unwrap()
    );
    fs.op_count() - start
}

#[derive(Debug, Default)]
struct Tally {
    cases: u64,
    fired: u64,
    failed_calls: u64,
    /// Faults that hit the flush a logged write started: the write said
    /// `Ok`, and the next call reported the failure.
    failed_flushes_after_writes: u64,
    removals_failed: u64,
}

#[allow(clippy::too_many_arguments)]
fn one_case(
    ops: &[W],
    models: &[Model],
    durability: Durability,
    kind: FaultKind,
    n: u64,
    removes: bool,
    crash: CrashMode,
    tally: &mut Tally,
) {
    let what = if removes { "removal" } else { "call" };
    let ctx = format!("{kind:?} at {what} {n}, {durability:?}, then {crash:?}");
    let fs = FaultFs::with_seed(n ^ 0xfa17);
    let index = Index::open(dir(), options(&fs, durability)).unwrap();
    let on: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|&op| (op == Op::Remove) == removes)
        .collect();
    fs.inject(Fault::new(kind).after(n).on(&on));
    let mut acked = 0;
    let mut failed = None;
    for op in ops {
        match perform(&index, op) {
            Ok(()) => acked += 1,
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let fired = fs.faults_fired();
    tally.cases += 1;
    tally.fired += fired;
    if removes {
        assert!(
            failed.is_none(),
            "{ctx}: a failed removal failed a call: {failed:?}"
        );
        tally.removals_failed += fired;
        assert_eq!(snapshot(&index, 0..ID_SPACE), models[acked], "{ctx}");
    }
    // Whether the failed call may have happened.
    let mut failed_may_have_happened = failed.is_some();
    match &failed {
        None if removes || fired == 0 => {}
        None => {
            // The last call, a write, was logged, then its flush failed.
            tally.failed_flushes_after_writes += 1;
            assert_eq!(fired, 1, "{ctx}");
            assert!(
                is_write(&ops[acked - 1]),
                "{ctx}: {:?} hid a fault",
                ops[acked - 1]
            );
            assert_poisoned(&index, &ctx);
            assert_eq!(snapshot(&index, 0..ID_SPACE), models[acked], "{ctx}");
        }
        Some(Error::Poisoned { cause }) => {
            // The call before, a write, was logged, then its flush failed:
            // it returned `Ok`, and this one, refused, reports the failure.
            tally.failed_flushes_after_writes += 1;
            failed_may_have_happened = false;
            assert_eq!(fired, 1, "{ctx}");
            assert!(acked > 0 && is_write(&ops[acked - 1]), "{ctx}: {cause}");
            assert!(!cause.is_empty(), "{ctx}: no cause named");
            assert_poisoned(&index, &ctx);
            assert_eq!(snapshot(&index, 0..ID_SPACE), models[acked], "{ctx}");
        }
        Some(Error::Io { .. }) => {
            tally.failed_calls += 1;
            assert_eq!(fired, 1, "{ctx}: a call failed without a fault");
            assert_poisoned(&index, &ctx);
            // Queries still answer, from what is in memory: the acknowledged
            // operations and possibly the failed one.
            let got = snapshot(&index, 0..ID_SPACE);
            assert!(
                got == models[acked] || got == models[acked + 1],
                "{ctx}: in memory after the failure: {got:?}"
            );
        }
        Some(other) => panic!("{ctx}: the failed call returned {other:?}, not an I/O error"),
    }
    fs.crash(crash);
    drop(index);

    let index = Index::open(dir(), options(&fs, durability))
        .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let got = snapshot(&index, 0..ID_SPACE);
    let newest = acked + usize::from(failed_may_have_happened);
    assert!(
        got == models[acked] || got == models[newest],
        "{ctx}: after reopening, neither the {acked} acknowledged operations nor those and \
         the failed one\n got: {got:?}\n acknowledged: {:?}",
        models[acked]
    );
    assert_queries(&index, &got, &ctx);

    // The reopened index takes writes again, and they last.
    index.insert_named(ID_SPACE, 0x77, "after").unwrap();
    index.sync().unwrap();
    drop(index);
    fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
    let index = Index::open(dir(), options(&fs, durability))
        .unwrap_or_else(|e| panic!("{ctx}: second reopen: {e}"));
    assert_eq!(index.get(ID_SPACE).unwrap(), Some(0x77), "{ctx}");
    assert_eq!(snapshot(&index, 0..ID_SPACE), got, "{ctx}: second reopen");
    assert_eq!(fs.violations(), vec![], "{ctx}");
}

/// Whether `op` writes documents (and may start a flush).
fn is_write(op: &W) -> bool {
    !matches!(op, W::Flush | W::Sync | W::Compact)
}

fn sweep(durability: Durability, seed: u64) -> Tally {
    let ops = workload(seed, 70);
    let models = prefix_models(&ops);
    let total = calls(&ops, durability);
    assert!(total > 100, "only {total} calls");
    let mut tally = Tally::default();
    for n in 0..=total {
        for kind in [
            FaultKind::Eio,
            FaultKind::NoSpace,
            FaultKind::ShortWrite,
            FaultKind::SyncFails,
        ] {
            let kill = CrashMode::ProcessKill;
            one_case(&ops, &models, durability, kind, n, false, kill, &mut tally);
            if durability == Durability::Sync {
                // Every acknowledged write was synced: power loss keeps it.
                let lost = CrashMode::PowerLoss(Unsynced::Lost);
                one_case(&ops, &models, durability, kind, n, false, lost, &mut tally);
            }
            if kind == FaultKind::Eio {
                one_case(&ops, &models, durability, kind, n, true, kill, &mut tally);
            }
        }
    }
    eprintln!("{durability:?}, seed {seed}: {total} calls, {tally:?}");
    assert!(tally.failed_calls > 0 && tally.removals_failed > 0);
    tally
}

#[test]
fn every_fault_at_every_call_poisons_and_loses_nothing_buffered() {
    let tally = sweep(Durability::Buffered, 7);
    // (The Sync workload's memtable never fills between its flushes.)
    assert!(
        tally.failed_flushes_after_writes > 0,
        "no fault hit a write's flush"
    );
}

#[test]
fn every_fault_at_every_call_poisons_and_loses_nothing_sync() {
    sweep(Durability::Sync, 8);
}

/// Power loss with out-of-order write-back (`Unsynced::Scattered`): the WAL's
/// unsynced tail keeps a random length, and each 4 KiB page of it either
/// reached the disk or reads as zeros, so valid frames can follow a hole.
/// Sync mode still holds every acknowledged write; Buffered mode opens to
/// the state after a prefix of the operations, at least up to the last
/// explicit sync, flush or compaction.
/// Ids the scattered sweep draws from (fewer than the shared workload's
/// [`ID_SPACE`], so more of its writes are upserts).
const SCATTERED_IDS: u64 = 24;

fn scattered_sweep(durability: Durability) -> (u64, u64) {
    // Long names and a large memtable: the unsynced part of the WAL spans
    // several pages between syncs.
    let ops: Vec<W> = {
        let mut rng = Rng(99);
        (0..90)
            .map(|i| {
                let id = rng.below(SCATTERED_IDS);
                match (i, rng.below(10)) {
                    (45, _) => W::Sync,
                    (70, _) => W::Flush,
                    (_, 0..=5) => W::Named(id, rng.fingerprint()),
                    (_, 6 | 7) => W::UnnamedBatch(
                        (0..1 + rng.below(5))
                            .map(|_| (rng.below(SCATTERED_IDS), rng.fingerprint()))
                            .collect(),
                    ),
                    _ => W::Delete(id),
                }
            })
            .collect()
    };
    let models = prefix_models(&ops);
    let options = |fs: &FaultFs| options(fs, durability).memtable_bytes(1 << 20);
    let total = {
        let fs = FaultFs::new();
        let index = Index::open(dir(), options(&fs)).unwrap();
        let start = fs.op_count();
        for op in &ops {
            perform(&index, op).unwrap();
        }
        fs.op_count() - start
    };
    let (mut cases, mut holes) = (0, 0);
    for n in 0..=total {
        for seed in 0..4 {
            let fs = FaultFs::with_seed(n * 4 + seed);
            let index = Index::open(dir(), options(&fs)).unwrap();
            fs.inject(Fault::new(FaultKind::Eio).after(n).sticky());
            let (mut acked, mut floor, mut failed) = (0, 0, false);
            for op in &ops {
                match perform(&index, op) {
                    Ok(()) => {
                        acked += 1;
                        if matches!(op, W::Flush | W::Sync | W::Compact) {
                            floor = acked;
                        }
                    }
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            fs.crash(CrashMode::PowerLoss(Unsynced::Scattered));
            drop(index);
            let ctx = format!("{durability:?}, power cut at call {n}, seed {seed}");
            // A hole followed by valid frames in a WAL?
            let wals = fs.list(dir()).unwrap_or_default();
            if wals
                .iter()
                .filter(|p| p.extension().is_some_and(|e| e == "wal"))
                .any(|p| {
                    let bytes = fs.read(&dir().join(p)).unwrap();
                    WalReader::new(&bytes)
                        .is_ok_and(|r| matches!(r.read_all().1, WalEnd::Corrupted { .. }))
                })
            {
                holes += 1;
            }
            // docs/FORMAT.md, "WAL torn tail": a WAL written in Buffered mode
            // says so in its header, and a hole followed by valid frames in it
            // is a loss, not damage: the open keeps the prefix before it.
            let index =
                Index::open(dir(), options(&fs)).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
            let got = snapshot(&index, 0..ID_SPACE);
            let oldest = if durability == Durability::Sync {
                acked
            } else {
                floor
            };
            let newest = acked + usize::from(failed);
            assert!(
                (oldest..=newest).any(|p| models[p] == got),
                "{ctx}: the index equals the model after none of the operations \
                 {oldest}..={newest}\n got: {got:?}"
            );
            assert_queries(&index, &got, &ctx);
            cases += 1;
        }
    }
    eprintln!("{durability:?}: {total} calls, {cases} power cuts, {holes} left a hole in a WAL");
    if durability == Durability::Sync {
        // Every acknowledged frame was synced: no hole before a valid frame.
        assert_eq!(holes, 0);
    }
    (cases, holes)
}

#[test]
fn scattered_write_back_keeps_a_prefix_when_buffered() {
    let (cases, holes) = scattered_sweep(Durability::Buffered);
    assert!(cases > 100);
    // Holes followed by valid frames do arise, and each such open kept a prefix.
    assert!(holes > 0);
}

#[test]
fn scattered_write_back_loses_nothing_synced() {
    assert!(scattered_sweep(Durability::Sync).0 > 100);
}
