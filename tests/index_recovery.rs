//! Recovery of the persistent index: unflushed writes after a process kill,
//! torn WAL tails, power loss at every file-system operation of a workload,
//! and damaged files (reported as `Error::Corrupted` naming the file, never a
//! panic or a wrong answer).

mod common;

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::workload::{
    ID_SPACE, W, assert_a_prefix_survived, name, perform, perform_until_failure, prefix_models,
    workload,
};
use common::{CENTRES, Model, Rng, brute_force, snapshot};
use common::{copy_dir, dir};
use simhashdb::engine::fault::{CrashMode, Fault, FaultFs, FaultKind, Op, Unsynced};
use simhashdb::engine::fs::{FileSystem, RealFs};
use simhashdb::format::{
    FileKind, Manifest, WAL_UNSYNCED_APPENDS, WalEnd, WalReader, encode_wal_header_with_flags,
};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

fn plan() -> Plan {
    Plan::new(5, 3).unwrap()
}

fn fault_options(fs: &FaultFs, durability: Durability, memtable_bytes: usize) -> Options {
    Options::new()
        .plan(plan())
        .durability(durability)
        .memtable_bytes(memtable_bytes)
        .file_system(Arc::new(fs.clone()) as Arc<dyn FileSystem>)
}

fn real_options(durability: Durability) -> Options {
    Options::new().plan(plan()).durability(durability)
}

fn assert_holds(index: &Index, model: &Model) {
    assert_eq!(&snapshot(index, 0..ID_SPACE), model);
    for fp in CENTRES {
        assert_eq!(index.query(fp, 3).unwrap(), brute_force(model, fp, 3));
    }
}

/// The WAL files of an index directory.
fn wal_files(fs: &dyn FileSystem, dir: &Path) -> Vec<PathBuf> {
    fs.list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.extension().is_some_and(|e| e == "wal"))
        .map(|n| dir.join(n))
        .collect()
}

fn files_with_extension(fs: &dyn FileSystem, dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs
        .list(dir)
        .unwrap()
        .into_iter()
        .filter(|n| n.extension().is_some_and(|e| e == ext))
        .map(|n| dir.join(n))
        .collect();
    files.sort();
    files
}

// ---------------------------------------------------------------------------
// Dropped without a flush.

/// A mix of writes of every kind, applied to the index and the model.
fn mixed_writes(index: &Index, model: &mut Model, rng: &mut Rng, count: usize) {
    for _ in 0..count {
        let id = rng.below(ID_SPACE);
        let fp = rng.fingerprint();
        match rng.below(5) {
            0 | 1 => {
                index.insert(id, fp).unwrap();
                model.insert(id, (fp, None));
            }
            2 => {
                index.insert_named(id, fp, name(id, fp)).unwrap();
                model.insert(id, (fp, Some(name(id, fp))));
            }
            3 => {
                let docs: Vec<(u64, u64)> = (0..1 + rng.below(4))
                    .map(|_| (rng.below(ID_SPACE), rng.fingerprint()))
                    .collect();
                index
                    .insert_batch(docs.iter().map(|&(i, f)| (i, f, Some(name(i, f)))))
                    .unwrap();
                for (i, f) in docs {
                    model.insert(i, (f, Some(name(i, f))));
                }
            }
            _ => {
                index.delete(id).unwrap();
                model.remove(&id);
            }
        }
    }
}

#[test]
fn unflushed_writes_survive_drop_on_the_real_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let mut model = Model::new();
    let mut rng = Rng(7);
    for round in 0..4 {
        let index = Index::open(&dir, real_options(Durability::Buffered)).unwrap();
        assert_holds(&index, &model);
        mixed_writes(&index, &mut model, &mut rng, 60);
        if round == 1 {
            // Some of it in a segment, the rest only in the WAL.
            index.flush().unwrap();
            mixed_writes(&index, &mut model, &mut rng, 30);
        }
        drop(index);
        let index = Index::open(&dir, real_options(Durability::Buffered)).unwrap();
        assert_holds(&index, &model);
    }
}

#[test]
fn unflushed_writes_survive_a_process_kill() {
    for durability in [Durability::Buffered, Durability::Sync] {
        let fs = FaultFs::with_seed(3);
        let mut model = Model::new();
        let mut rng = Rng(11);
        for round in 0..4 {
            let index = Index::open(dir(), fault_options(&fs, durability, 64 << 20)).unwrap();
            assert_holds(&index, &model);
            mixed_writes(&index, &mut model, &mut rng, 50);
            if round == 2 {
                index.flush().unwrap();
                mixed_writes(&index, &mut model, &mut rng, 20);
            }
            // Killed: the index is never dropped cleanly; its writers die.
            fs.crash(CrashMode::ProcessKill);
            let reopened = Index::open(dir(), fault_options(&fs, durability, 64 << 20)).unwrap();
            assert_holds(&reopened, &model);
            drop(index);
            drop(reopened);
        }
        assert_eq!(fs.violations(), vec![]);
    }
}

// ---------------------------------------------------------------------------
// Torn WAL tails.

/// Batches written to a fresh index, not flushed: the model of all but the
/// last, the model of all, and where the last frame lies in the WAL.
struct TornSetup {
    fs: FaultFs,
    wal: PathBuf,
    before_last: Model,
    frame: std::ops::Range<u64>,
}

fn torn_setup() -> TornSetup {
    let fs = FaultFs::with_seed(5);
    let index = Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20)).unwrap();
    let wal = wal_files(&fs, dir()).pop().unwrap();
    let mut model = Model::new();
    let mut rng = Rng(99);
    for batch in 0..6 {
        index.delete(batch).unwrap();
        model.remove(&batch);
        let docs: Vec<(u64, u64)> = (0..3)
            .map(|_| (rng.below(ID_SPACE), rng.fingerprint()))
            .collect();
        index
            .insert_batch(docs.iter().map(|&(i, f)| (i, f, Some(name(i, f)))))
            .unwrap();
        for (i, f) in docs {
            model.insert(i, (f, Some(name(i, f))));
        }
    }
    let before_last = model.clone();
    let start = fs.len(&wal).unwrap();
    // The last frame: a batch with long names, so there are many cut points
    // inside names as well as in headers and fixed fields.
    let last: Vec<(u64, u64, Option<String>)> = (0..3)
        .map(|i| {
            let fp = rng.fingerprint();
            (
                30 + i,
                fp,
                Some(format!("{}#{}", name(30 + i, fp), "x".repeat(40))),
            )
        })
        .collect();
    index.insert_batch(last.clone()).unwrap();
    let end = fs.len(&wal).unwrap();
    assert!(end > start + 100, "the last frame is {} bytes", end - start);
    drop(index);
    TornSetup {
        fs,
        wal,
        before_last,
        frame: start..end,
    }
}

fn wal_frames(fs: &dyn FileSystem, wal: &Path) -> (usize, WalEnd) {
    let bytes = fs.read(wal).unwrap();
    let (frames, end) = WalReader::new(&bytes).unwrap().read_all();
    (frames.len(), end)
}

/// Frames in all the WAL files of the directory, and whether every one of
/// them ends cleanly (no garbage after its last frame).
fn log_frames(fs: &dyn FileSystem) -> (usize, bool) {
    let mut total = 0;
    let mut clean = true;
    for wal in wal_files(fs, dir()) {
        let (frames, end) = wal_frames(fs, &wal);
        total += frames;
        clean &= end == WalEnd::Clean;
    }
    (total, clean)
}

/// Reopens a directory whose WAL lost its last frame from `cut` on (the rest
/// `tail`: cut off, or zeros), then checks the recovery and that the log
/// continues cleanly after it.
fn check_torn(setup: &TornSetup, cut: u64, zero_tail: bool) {
    let wal_name = setup.wal.file_name().unwrap().to_str().unwrap().to_owned();
    let fs = copy_dir(&setup.fs, dir(), |name, bytes| {
        if name == wal_name {
            if zero_tail {
                bytes[cut as usize..].fill(0);
            } else {
                bytes.truncate(cut as usize);
            }
        }
    });
    let ctx = format!("WAL torn at byte {cut} (zero tail: {zero_tail})");
    let index = Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20))
        .unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(snapshot(&index, 0..ID_SPACE), setup.before_last, "{ctx}");
    assert_eq!(
        log_frames(&fs),
        (12, true),
        "{ctx}: the torn tail was not cut off"
    );

    let mut model = setup.before_last.clone();
    index.insert_named(35, 0x5555, "after the tear").unwrap();
    model.insert(35, (0x5555, Some("after the tear".to_owned())));
    index.delete(0).unwrap();
    model.remove(&0);
    drop(index);
    assert_eq!(log_frames(&fs), (12 + 2, true), "{ctx}");

    let index = Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20)).unwrap();
    assert_eq!(snapshot(&index, 0..ID_SPACE), model, "{ctx}");
}

/// Writes `bytes` to `path` on `fs` (replacing the file, if any), synced.
fn put(fs: &FaultFs, path: &Path, bytes: &[u8]) {
    let _ = fs.remove(path);
    let mut file = fs.create_new(path).unwrap();
    file.write_all(bytes).unwrap();
    file.sync().unwrap();
}

/// What a power cut can leave while the flush thread writes a frozen
/// memtable: the manifest names two WALs, the first (Buffered, unsynced)
/// lost its last frame exactly at a frame boundary, and the second's frame,
/// written later, reached the disk. Recovery must keep a prefix (the first
/// WAL's surviving frame) and drop the second WAL's frame after the gap in
/// sequence numbers, not replay both with a hole between them.
#[test]
fn a_gap_in_sequence_numbers_between_wals_ends_the_replay() {
    let fs = FaultFs::new();
    let options = || fault_options(&fs, Durability::Buffered, 64 << 20);
    {
        // Three writes, a frame each, in one WAL.
        let index = Index::open(dir(), options()).unwrap();
        index.insert(1, 0x11).unwrap();
        index.insert(2, 0x22).unwrap();
        index.insert(3, 0x33).unwrap();
    }
    let manifest_path = dir().join(FileKind::Manifest.file_name(0));
    let mut manifest = Manifest::decode(&fs.read(&manifest_path).unwrap()).unwrap();
    let first = manifest.wal_ids[0];
    let first_path = dir().join(FileKind::Wal.file_name(first));
    let bytes = fs.read(&first_path).unwrap();
    let (frames, _) = WalReader::new(&bytes).unwrap().read_all();
    assert_eq!(frames.len(), 3);
    let frame = |i: usize| &bytes[frames[i].offset as usize..frames[i].end as usize];
    // The first WAL keeps its first frame; the second holds the third.
    put(&fs, &first_path, &bytes[..frames[0].end as usize]);
    let second = manifest.next_wal_id;
    let mut wal = encode_wal_header_with_flags(manifest.index_id, second, WAL_UNSYNCED_APPENDS);
    wal.extend_from_slice(frame(2));
    put(&fs, &dir().join(FileKind::Wal.file_name(second)), &wal);
    manifest.next_wal_id += 1;
    manifest.wal_ids = vec![first, second];
    manifest.generation += 1;
    put(&fs, &manifest_path, &manifest.encode().unwrap());
    fs.sync_dir(dir()).unwrap();

    let index = Index::open(dir(), options()).unwrap();
    assert_eq!(
        [1, 2, 3].map(|id| index.get(id).unwrap()),
        [Some(0x11), None, None],
        "the prefix before the gap, and nothing after it"
    );
    // What recovery kept was made durable, and the index goes on.
    index.insert(4, 0x44).unwrap();
    index.sync().unwrap();
    fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
    drop(index);
    let index = Index::open(dir(), options()).unwrap();
    assert_eq!(
        [1, 2, 3, 4].map(|id| index.get(id).unwrap()),
        [Some(0x11), None, None, Some(0x44)]
    );
}

#[test]
fn every_cut_inside_the_last_wal_frame_drops_exactly_that_frame() {
    let setup = torn_setup();
    let (frames, end) = wal_frames(&setup.fs, &setup.wal);
    assert_eq!((frames, end), (13, WalEnd::Clean));
    for cut in setup.frame.clone() {
        check_torn(&setup, cut, false);
    }
}

#[test]
fn a_zeroed_last_frame_is_a_torn_tail() {
    let setup = torn_setup();
    for cut in setup.frame.clone() {
        check_torn(&setup, cut, true);
    }
}

#[test]
fn torn_tail_on_the_real_file_system() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let index = Index::open(&dir, real_options(Durability::Sync)).unwrap();
    let mut model = Model::new();
    for id in 0..10 {
        index.insert(id, id * 0x1111).unwrap();
        model.insert(id, (id * 0x1111, None));
    }
    let wal = files_with_extension(&RealFs, &dir, "wal").pop().unwrap();
    let start = std::fs::metadata(&wal).unwrap().len();
    index
        .insert_batch([(20, 1, Some("a")), (21, 2, Some("b"))])
        .unwrap();
    let end = std::fs::metadata(&wal).unwrap().len();
    let manifest = std::fs::read(dir.join("MANIFEST")).unwrap();
    drop(index);
    let full = std::fs::read(&wal).unwrap();
    for cut in [
        start,
        start + 1,
        start + 7,
        start + 8,
        (start + end) / 2,
        end - 1,
    ] {
        // The WAL as the first crash left it, under its original name (and
        // the manifest that names it).
        for wal in files_with_extension(&RealFs, &dir, "wal") {
            std::fs::remove_file(wal).unwrap();
        }
        std::fs::write(&wal, &full[..cut as usize]).unwrap();
        std::fs::write(dir.join("MANIFEST"), &manifest).unwrap();
        // A reader sees the complete frames and changes nothing.
        let reader = Index::open_read_only(&dir).unwrap();
        assert_eq!(
            snapshot(&reader, 0..ID_SPACE),
            model,
            "read-only, cut at {cut}"
        );
        drop(reader);
        assert_eq!(std::fs::read(&wal).unwrap(), &full[..cut as usize]);
        assert_eq!(std::fs::read(dir.join("MANIFEST")).unwrap(), manifest);
        let index = Index::open(&dir, real_options(Durability::Sync)).unwrap();
        assert_eq!(snapshot(&index, 0..ID_SPACE), model, "cut at {cut}");
        let wals = files_with_extension(&RealFs, &dir, "wal");
        assert_eq!(wals.len(), 1);
        let bytes = std::fs::read(&wals[0]).unwrap();
        let (frames, end) = WalReader::new(&bytes).unwrap().read_all();
        assert_eq!((frames.len(), end), (10, WalEnd::Clean), "cut at {cut}");
        index.insert(22, 3).unwrap();
        drop(index);
        let index = Index::open(&dir, real_options(Durability::Sync)).unwrap();
        let mut expected = model.clone();
        expected.insert(22, (3, None));
        assert_eq!(snapshot(&index, 0..ID_SPACE), expected, "cut at {cut}");
        index.delete(22).unwrap();
    }
}

// ---------------------------------------------------------------------------
// Power loss (and process kill) at every file-system operation of a workload.

/// A small memtable budget: writes flush every few documents, so crashes
/// land inside flushes as well as between them.
const SMALL_MEMTABLE: usize = 3_000;

/// Runs `ops` with every file-system operation from the `n`-th on failing
/// (a dead device), crashes in `mode`, reopens, and checks what survived:
/// everything acknowledged in `Sync` mode or after a process kill; in
/// `Buffered` mode after power loss, the state after some prefix of the
/// operations, no shorter than the last successful flush, sync or compaction.
/// The failed operation itself may or may not have happened.
fn crash_at(
    ops: &[W],
    models: &[Model],
    n: u64,
    mode: CrashMode,
    durability: Durability,
    threads: Option<bool>,
) {
    let fs = FaultFs::with_seed(n);
    let options = || threaded_options(&fs, durability, SMALL_MEMTABLE, threads);
    let index = Index::open(dir(), options()).unwrap();
    fs.inject(Fault::new(FaultKind::Eio).after(n).sticky());
    let progress = perform_until_failure(&index, ops);
    if progress.failed {
        // Later writes are refused without touching the disk.
        let after = index.insert(0, 0);
        assert!(
            matches!(after, Err(Error::Poisoned { .. })),
            "after a failed call, a write was not refused as poisoned: {after:?}"
        );
    }
    // Queries still answer from memory after a failure.
    let _ = index.query(CENTRES[0], 3).unwrap();
    fs.crash(mode);
    drop(index);

    let ctx =
        format!("{mode:?}, {durability:?}, threads {threads:?}, device dead from operation {n}");
    let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let got = snapshot(&index, 0..ID_SPACE);
    let power_cut_buffered = matches!(
        (mode, durability),
        (CrashMode::PowerLoss(_), Durability::Buffered)
    );
    assert_a_prefix_survived(models, &got, progress, power_cut_buffered, &ctx);

    // The recovered index takes new writes, and they survive another crash.
    let mut expected = got;
    index
        .insert_named(ID_SPACE - 1, 0x77, "after recovery")
        .unwrap();
    expected.insert(ID_SPACE - 1, (0x77, Some("after recovery".to_owned())));
    index.sync().unwrap();
    fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
    drop(index);
    let index =
        Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: second reopen: {e}"));
    assert_eq!(
        snapshot(&index, 0..ID_SPACE),
        expected,
        "{ctx}: second reopen"
    );
    assert_eq!(fs.violations(), vec![], "{ctx}");
}

/// File-system operations a fault-free run of `ops` performs after the open.
fn operations(ops: &[W], durability: Durability) -> u64 {
    let fs = FaultFs::new();
    let index = Index::open(dir(), fault_options(&fs, durability, SMALL_MEMTABLE)).unwrap();
    let start = fs.op_count();
    for op in ops {
        perform(&index, op).unwrap();
    }
    let models = prefix_models(ops);
    assert_eq!(&snapshot(&index, 0..ID_SPACE), models.last().unwrap());
    fs.op_count() - start
}

/// [`fault_options`], with the background threads if `threads` is
/// `Some(flush_thread)`: a process handle, merges on the merge thread, and
/// flushes on the flush thread if `flush_thread`.
fn threaded_options(
    fs: &FaultFs,
    durability: Durability,
    memtable_bytes: usize,
    threads: Option<bool>,
) -> Options {
    match threads {
        None => fault_options(fs, durability, memtable_bytes),
        Some(flush_thread) => fault_options(fs, durability, memtable_bytes)
            .file_system(Arc::new(fs.process()) as Arc<dyn FileSystem>)
            .flush_thread(flush_thread),
    }
}

fn crash_everywhere(durability: Durability, seed: u64, threads: Option<bool>) {
    let ops = workload(seed, 60);
    let models = prefix_models(&ops);
    let total = operations(&ops, durability);
    assert!(total > 100, "only {total} operations");
    for n in 0..=total {
        for mode in [
            CrashMode::ProcessKill,
            CrashMode::PowerLoss(Unsynced::Lost),
            CrashMode::PowerLoss(Unsynced::Kept),
            CrashMode::PowerLoss(Unsynced::Torn),
        ] {
            crash_at(&ops, &models, n, mode, durability, threads);
        }
    }
}

#[test]
fn power_loss_at_every_operation_loses_nothing_synced() {
    for seed in [1, 11, 21] {
        crash_everywhere(Durability::Sync, seed, None);
    }
}

#[test]
fn power_loss_at_every_operation_keeps_a_prefix_when_buffered() {
    for seed in [2, 12, 22] {
        crash_everywhere(Durability::Buffered, seed, None);
    }
}

/// The same with the background threads: the device dies at the `n`-th
/// operation of whichever thread makes it (so the failing operation varies
/// with the schedule), with flushes on the flush thread and without it.
#[test]
fn power_loss_at_every_operation_with_the_threads() {
    for flush_thread in [true, false] {
        crash_everywhere(Durability::Sync, 31, Some(flush_thread));
        crash_everywhere(Durability::Buffered, 32, Some(flush_thread));
    }
}

/// Faults that do not kill the device: one failed operation, then power loss.
#[test]
fn a_single_failed_operation_then_power_loss() {
    let ops = workload(3, 40);
    let models = prefix_models(&ops);
    for durability in [Durability::Sync, Durability::Buffered] {
        let total = operations(&ops, durability);
        for n in 0..total {
            for kind in [
                FaultKind::SyncFails,
                FaultKind::ShortWrite,
                FaultKind::NoSpace,
            ] {
                let fs = FaultFs::with_seed(n);
                let options = || fault_options(&fs, durability, SMALL_MEMTABLE);
                let index = Index::open(dir(), options()).unwrap();
                fs.inject(Fault::new(kind).after(n));
                let progress = perform_until_failure(&index, &ops);
                fs.crash(CrashMode::PowerLoss(Unsynced::Kept));
                drop(index);
                let ctx = format!("{kind:?} at operation {n}, {durability:?}");
                let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let got = snapshot(&index, 0..ID_SPACE);
                let buffered = durability == Durability::Buffered;
                assert_a_prefix_survived(&models, &got, progress, buffered, &ctx);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Damaged files.

/// Two segments (the second with upserts and tombstones over the first) and
/// a few writes in the WAL, on `fs` under `dir`; returns the model.
fn corruption_setup(fs: Option<&FaultFs>, dir: &Path) -> Model {
    let options = || match fs {
        Some(fs) => fault_options(fs, Durability::Buffered, 64 << 20),
        None => real_options(Durability::Buffered),
    };
    let index = Index::open(dir, options()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng(2024);
    for id in 0..24 {
        let fp = rng.fingerprint();
        index.insert_named(id, fp, name(id, fp)).unwrap();
        model.insert(id, (fp, Some(name(id, fp))));
    }
    index.flush().unwrap();
    for id in (0..6).chain(24..30) {
        let fp = rng.fingerprint();
        index.insert(id, fp).unwrap();
        model.insert(id, (fp, None));
    }
    for id in [7, 8, 25] {
        index.delete(id).unwrap();
        model.remove(&id);
    }
    index.flush().unwrap();
    index.insert(31, CENTRES[2]).unwrap();
    index.delete(9).unwrap();
    model.insert(31, (CENTRES[2], None));
    model.remove(&9);
    drop(index);
    model
}

/// How a damaged file showed.
#[derive(Debug, Default)]
struct Outcomes {
    refused_at_open: usize,
    reported_by_a_read: usize,
    unnoticed: usize,
}

/// Opens the index and reads everything; every answer must be the model's
/// or `Error::Corrupted` naming `damaged`.
fn read_damaged(
    open: impl FnOnce() -> simhashdb::Result<Index>,
    damaged: &Path,
    model: &Model,
    ctx: &str,
) -> Outcomes {
    let mut outcomes = Outcomes::default();
    let check = |e: Error, what: &str| match e {
        Error::Corrupted { ref path, .. } if path == damaged => {}
        other => panic!("{ctx}: {what} failed with {other:?}, not Corrupted naming the file"),
    };
    let index = match open() {
        Ok(index) => index,
        Err(e) => {
            check(e, "open");
            outcomes.refused_at_open += 1;
            return outcomes;
        }
    };
    let mut reported = false;
    for id in 0..ID_SPACE {
        match index.get(id) {
            Ok(fp) => assert_eq!(fp, model.get(&id).map(|d| d.0), "{ctx}: get({id})"),
            Err(e) => {
                check(e, "get");
                reported = true;
            }
        }
    }
    let fps: BTreeSet<u64> = model.values().map(|d| d.0).chain(CENTRES).collect();
    for fp in fps {
        match index.query(fp, 3) {
            Ok(found) => assert_eq!(found, brute_force(model, fp, 3), "{ctx}: query({fp:#x})"),
            Err(e) => {
                check(e, "query");
                reported = true;
            }
        }
    }
    if reported {
        outcomes.reported_by_a_read += 1;
    } else {
        outcomes.unnoticed += 1;
    }
    outcomes
}

/// Flips one bit of every byte of `file` in turn (a fresh copy each time).
fn flip_every_byte(src: &FaultFs, file: &Path, model: &Model) -> Outcomes {
    let len = src.len(file).unwrap() as usize;
    let target = file.file_name().unwrap().to_str().unwrap().to_owned();
    let mut total = Outcomes::default();
    for offset in 0..len {
        let fs = copy_dir(src, dir(), |name, bytes| {
            if name == target {
                bytes[offset] ^= 1 << (offset % 8);
            }
        });
        let ctx = format!("{} with byte {offset} flipped", file.display());
        let open = || Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20));
        let outcome = catch_unwind(AssertUnwindSafe(|| read_damaged(open, file, model, &ctx)))
            .unwrap_or_else(|_| panic!("{ctx}: panicked (see above)"));
        total.refused_at_open += outcome.refused_at_open;
        total.reported_by_a_read += outcome.reported_by_a_read;
        total.unnoticed += outcome.unnoticed;
    }
    total
}

#[test]
fn a_flipped_bit_in_the_manifest_is_refused_at_open() {
    let src = FaultFs::new();
    let model = corruption_setup(Some(&src), dir());
    let outcomes = flip_every_byte(&src, &dir().join("MANIFEST"), &model);
    assert_eq!(
        outcomes.refused_at_open,
        src.len(&dir().join("MANIFEST")).unwrap() as usize
    );
}

#[test]
fn a_flipped_bit_in_a_segment_is_reported_or_harmless() {
    let src = FaultFs::new();
    let model = corruption_setup(Some(&src), dir());
    let segments = files_with_extension(&src, dir(), "seg");
    assert_eq!(segments.len(), 2);
    for file in segments {
        let outcomes = flip_every_byte(&src, &file, &model);
        eprintln!("{}: {outcomes:?}", file.display());
        assert!(outcomes.refused_at_open > 0 && outcomes.reported_by_a_read > 0);
    }
}

#[test]
fn a_flipped_bit_in_a_doc_map_is_reported_or_harmless() {
    let src = FaultFs::new();
    let model = corruption_setup(Some(&src), dir());
    let doc_maps = files_with_extension(&src, dir(), "ids");
    assert_eq!(doc_maps.len(), 2);
    for file in doc_maps {
        let outcomes = flip_every_byte(&src, &file, &model);
        eprintln!("{}: {outcomes:?}", file.display());
        assert!(outcomes.refused_at_open > 0 && outcomes.reported_by_a_read > 0);
    }
}

#[test]
fn a_flipped_bit_before_the_last_wal_frame_is_refused_at_open() {
    let src = FaultFs::new();
    let index = Index::open(dir(), fault_options(&src, Durability::Sync, 64 << 20)).unwrap();
    let wal = wal_files(&src, dir()).pop().unwrap();
    let mut model = Model::new();
    for id in 0..4 {
        index
            .insert_named(id, id << 20, name(id, id << 20))
            .unwrap();
        model.insert(id, (id << 20, Some(name(id, id << 20))));
    }
    let last_frame = src.len(&wal).unwrap() as usize;
    index.insert(4, 4).unwrap();
    model.insert(4, (4, None));
    drop(index);
    let target = wal.file_name().unwrap().to_str().unwrap().to_owned();
    // Damage before the last frame is acknowledged data: never dropped
    // silently. (Damage inside the last frame cannot be told from a torn
    // write.)
    for offset in 0..last_frame {
        let fs = copy_dir(&src, dir(), |name, bytes| {
            if name == target {
                bytes[offset] ^= 1 << (offset % 8);
            }
        });
        let ctx = format!("{} with byte {offset} flipped", wal.display());
        match Index::open(dir(), fault_options(&fs, Durability::Sync, 64 << 20)) {
            Err(Error::Corrupted { path, .. }) if path == wal => {}
            Err(e) => panic!("{ctx}: {e:?}"),
            Ok(index) => panic!("{ctx}: opened, holding {:?}", snapshot(&index, 0..ID_SPACE)),
        }
    }
}

/// A fresh copy of the real directory `src` in a new temporary directory.
fn copy_real(src: &Path) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
    }
    tmp
}

#[test]
fn damaged_real_files_are_reported_with_their_path() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("index");
    let model = corruption_setup(None, &src);
    let seg = files_with_extension(&RealFs, &src, "seg").remove(0);
    let ids = files_with_extension(&RealFs, &src, "ids").remove(0);
    let seg_len = std::fs::metadata(&seg).unwrap().len() as usize;
    let ids_len = std::fs::metadata(&ids).unwrap().len() as usize;
    // Bytes in the first table section, the doc map's sections, the
    // footers, and the manifest's fixed fields and segment list.
    let mut targets: Vec<(PathBuf, usize)> = Vec::new();
    for offset in (44..seg_len).step_by(37) {
        targets.push((seg.clone(), offset));
    }
    for offset in (44..ids_len).step_by(53) {
        targets.push((ids.clone(), offset));
    }
    for offset in [0, 20, 40, 90, 130] {
        targets.push((src.join("MANIFEST"), offset));
    }
    let mut noticed = 0;
    for (file, offset) in targets {
        let copy = copy_real(&src);
        let damaged = copy.path().join(file.file_name().unwrap());
        let mut bytes = std::fs::read(&damaged).unwrap();
        bytes[offset] ^= 0x10;
        std::fs::write(&damaged, &bytes).unwrap();
        let ctx = format!("{} with byte {offset} flipped", damaged.display());
        let open = || Index::open(copy.path(), real_options(Durability::Buffered));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            read_damaged(open, &damaged, &model, &ctx)
        }))
        .unwrap_or_else(|_| panic!("{ctx}: panicked (see above)"));
        noticed += outcome.refused_at_open + outcome.reported_by_a_read;
    }
    assert!(noticed > 0);
}

#[test]
fn a_segment_file_of_the_wrong_length_is_refused_before_it_is_mapped() {
    let src = FaultFs::new();
    let index = Index::open(dir(), fault_options(&src, Durability::Buffered, 64 << 20)).unwrap();
    for id in 0..50 {
        index
            .insert(id, id.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .unwrap();
    }
    index.flush().unwrap();
    drop(index);
    for ext in ["seg", "ids"] {
        let file = files_with_extension(&src, dir(), ext).remove(0);
        let target = file.file_name().unwrap().to_str().unwrap().to_owned();
        for change in [-1i64, -200, 1, 4096] {
            let fs = copy_dir(&src, dir(), |name, bytes| {
                if name == target {
                    let len = bytes.len() as i64 + change;
                    bytes.resize(len as usize, 0);
                }
            });
            // Mapping the damaged file would fail (the segment file is
            // mapped first): its length must be checked before.
            let mapped_before = if ext == "seg" { 0 } else { 1 };
            fs.inject(
                Fault::new(FaultKind::Eio)
                    .on(&[Op::Map])
                    .after(mapped_before)
                    .sticky(),
            );
            match Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20)) {
                Err(Error::Corrupted { path, reason, .. }) => {
                    assert_eq!(path, file, "{ext} {change:+}");
                    assert!(reason.contains("manifest"), "{reason}");
                }
                other => panic!("{ext} {change:+}: {other:?}"),
            }
        }
    }

    // The same on real files.
    let tmp = tempfile::tempdir().unwrap();
    let index = Index::open(tmp.path(), real_options(Durability::Buffered)).unwrap();
    index.insert(1, 2).unwrap();
    index.flush().unwrap();
    drop(index);
    let seg = files_with_extension(&RealFs, tmp.path(), "seg").remove(0);
    let len = std::fs::metadata(&seg).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    match Index::open(tmp.path(), real_options(Durability::Buffered)) {
        Err(Error::Corrupted { path, .. }) => assert_eq!(path, seg),
        other => panic!("{other:?}"),
    }
    match Index::open_read_only(tmp.path()) {
        Err(Error::Corrupted { path, .. }) => assert_eq!(path, seg),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_file_named_by_the_manifest_is_corruption() {
    let src = FaultFs::new();
    let index = Index::open(dir(), fault_options(&src, Durability::Buffered, 64 << 20)).unwrap();
    index.insert(1, 2).unwrap();
    index.flush().unwrap();
    index.insert(3, 4).unwrap();
    drop(index);
    let mut files = files_with_extension(&src, dir(), "seg");
    files.extend(files_with_extension(&src, dir(), "ids"));
    files.extend(wal_files(&src, dir()));
    assert_eq!(files.len(), 3);
    for file in files {
        let fs = copy_dir(&src, dir(), |_, _| {});
        fs.remove(&file).unwrap();
        match Index::open(dir(), fault_options(&fs, Durability::Buffered, 64 << 20)) {
            Err(Error::Corrupted { path, .. }) => assert_eq!(path, file),
            other => panic!("{} missing: {other:?}", file.display()),
        }
    }
}

// ---------------------------------------------------------------------------
// Crashes during an open: creation and recovery are interrupted too.

const CRASH_MODES: [CrashMode; 4] = [
    CrashMode::ProcessKill,
    CrashMode::PowerLoss(Unsynced::Lost),
    CrashMode::PowerLoss(Unsynced::Kept),
    CrashMode::PowerLoss(Unsynced::Torn),
];

#[test]
fn an_interrupted_creation_leaves_an_index_that_opens() {
    let probe = FaultFs::new();
    drop(Index::open(dir(), fault_options(&probe, Durability::Sync, 64 << 20)).unwrap());
    let total = probe.op_count();
    for n in 0..total {
        for mode in CRASH_MODES {
            let fs = FaultFs::with_seed(n);
            let options = || fault_options(&fs, Durability::Sync, 64 << 20);
            fs.inject(Fault::new(FaultKind::Eio).after(n).sticky());
            // Fails, unless only a best-effort step (removing stale files) failed.
            let _ = Index::open(dir(), options());
            fs.crash(mode);
            let ctx = format!("creation stopped at operation {n}, {mode:?}");
            let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(snapshot(&index, 0..ID_SPACE), Model::new(), "{ctx}");
            index.insert(1, 2).unwrap();
            fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
            drop(index);
            let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(index.get(1).unwrap(), Some(2), "{ctx}");
        }
    }
}

#[test]
fn an_interrupted_recovery_loses_nothing() {
    for durability in [Durability::Sync, Durability::Buffered] {
        // A directory with segments and a WAL holding frames and a torn tail.
        let src = FaultFs::new();
        let index = Index::open(dir(), fault_options(&src, durability, SMALL_MEMTABLE)).unwrap();
        let ops = workload(17, 40);
        for op in &ops {
            perform(&index, op).unwrap();
        }
        let wal = wal_files(&src, dir()).pop().unwrap();
        drop(index);
        let model = prefix_models(&ops).pop().unwrap();
        let mut appended = src.open_append(&wal).unwrap();
        appended.write_all(&[7, 0, 0, 0, 1, 2]).unwrap();
        drop(appended);

        let probe = copy_dir(&src, dir(), |_, _| {});
        let start = probe.op_count();
        let index = Index::open(dir(), fault_options(&probe, durability, SMALL_MEMTABLE)).unwrap();
        assert_holds(&index, &model);
        let total = probe.op_count() - start;
        for n in 0..total {
            for mode in CRASH_MODES {
                let fs = copy_dir(&src, dir(), |_, _| {});
                let options = || fault_options(&fs, durability, SMALL_MEMTABLE);
                fs.inject(Fault::new(FaultKind::Eio).after(n).sticky());
                let _ = Index::open(dir(), options());
                fs.crash(mode);
                let ctx = format!("{durability:?} recovery stopped at operation {n}, {mode:?}");
                let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(snapshot(&index, 0..ID_SPACE), model, "{ctx}");
                index.insert(ID_SPACE - 1, 5).unwrap();
                index.sync().unwrap();
                fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
                drop(index);
                let index = Index::open(dir(), options()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let mut expected = model.clone();
                expected.insert(ID_SPACE - 1, (5, None));
                assert_eq!(
                    snapshot(&index, 0..ID_SPACE),
                    expected,
                    "{ctx}: second reopen"
                );
            }
        }
    }
}

/// A document name is user data (a crawled URL): one holding the bytes of a
/// valid WAL frame must not make a crash while its batch was being appended
/// look like damage in the middle of the log.
#[test]
fn a_torn_frame_whose_name_holds_a_frame_is_still_a_torn_tail() {
    use simhashdb::format::{Record, encode_frame};
    // A frame whose every byte is ASCII, so it fits in a name.
    let embedded = (0u64..)
        .map(|id| {
            encode_frame(&[Record::Delete {
                seq: 1,
                id: id & 0x7f7f_7f7f,
                timestamp: 2,
            }])
            .unwrap()
        })
        .find(|frame| frame.iter().all(|b| b.is_ascii()))
        .unwrap();
    let name = format!(
        "https://example.com/?q={}&p=2",
        String::from_utf8(embedded).unwrap()
    );
    let src = FaultFs::new();
    let index = Index::open(dir(), fault_options(&src, Durability::Sync, 64 << 20)).unwrap();
    index.insert(5, 5).unwrap();
    index.insert_named(1, 1, name).unwrap();
    let wal = wal_files(&src, dir()).pop().unwrap();
    drop(index);
    let target = wal.file_name().unwrap().to_str().unwrap().to_owned();
    let fs = copy_dir(&src, dir(), |name, bytes| {
        if name == target {
            // Cut inside "&p=2", after the embedded frame.
            bytes.pop();
        }
    });
    let index = Index::open(dir(), fault_options(&fs, Durability::Sync, 64 << 20))
        .unwrap_or_else(|e| panic!("a torn tail refused: {e}"));
    assert_eq!(index.get(5).unwrap(), Some(5));
    assert_eq!(index.get(1).unwrap(), None);
}
