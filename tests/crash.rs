//! Real process kills: a child process (this test binary run again) writes to
//! an index on the real file system and reports every acknowledged operation
//! through a pipe; the parent kills it with SIGKILL at a random moment (after
//! a random number of acknowledgements, while a flush or compaction runs,
//! after a random delay, or while it opens and recovers the index), reopens
//! the index and checks that
//!
//! - it opens without error (and so does a read-only open before it, which
//!   sees the same state);
//! - it holds exactly the documents of the model after some prefix of the
//!   attempted operations: every acknowledged one, plus possibly the one in
//!   flight, and nothing else (no holes, no partial batch);
//! - exact queries equal brute force over that model;
//! - `Index::verify` finds every checksum of every file intact.
//!
//! The same directory then goes through more cycles, so recovery of an
//! already recovered index is exercised too. Both durability modes; small
//! memtables and a merge fan-in of 2 make flushes and merges frequent, so
//! many kills land in the middle of one; merges run on the merge thread, and
//! flushes on the flush thread for half the seeds.
//!
//! `cargo test --release --test crash` runs 120 cycles; the long run
//! (`-- --ignored kill_cycles_long`) runs 5,000, or `SIMHASHDB_CRASH_CYCLES`.

#![cfg(unix)]

mod common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{CENTRES, Model, Rng, brute_force, snapshot};
use simhashdb::engine::policy::{MergePolicy, TieredMergePolicy};
use simhashdb::plan::Plan;
use simhashdb::{Durability, Error, Index, Options};

/// Set in a child process: "<dir>\t<seed>\t<durability>".
const CHILD_ENV: &str = "SIMHASHDB_CRASH_CHILD";
/// Overrides the number of cycles of the long run.
const CYCLES_ENV: &str = "SIMHASHDB_CRASH_CYCLES";

/// Documents live in ids `0..ID_SPACE`, so upserts and deletes of live
/// documents are common.
const ID_SPACE: u64 = 48;
/// More operations than any cycle acknowledges before it is killed.
const CHILD_OPS: usize = 100_000;

#[derive(Debug, Clone)]
enum Op {
    Insert(u64, u64),
    InsertNamed(u64, u64, String),
    Batch(Vec<(u64, u64, Option<String>)>),
    Delete(u64),
    InsertIfNew(u64, u64),
    Flush,
    Compact,
}

impl Op {
    fn is_flush_or_compact(&self) -> bool {
        matches!(self, Op::Flush | Op::Compact)
    }
}

/// The operations a child with `seed` attempts, in order.
fn ops(seed: u64) -> impl Iterator<Item = Op> {
    let mut rng = Rng(seed);
    std::iter::repeat_with(move || {
        let id = rng.below(ID_SPACE);
        match rng.below(40) {
            0..=15 => Op::Insert(id, rng.fingerprint()),
            16..=20 => {
                let fp = rng.fingerprint();
                // Names up to a few KiB, so flushes carry real doc-map bytes.
                let len = [8, 100, 3000][rng.below(3) as usize];
                let name = format!("https://example.com/{id}/{fp:016x}/")
                    + &"n".repeat(rng.below(len) as usize);
                Op::InsertNamed(id, fp, name)
            }
            21..=25 => Op::Batch(
                (0..1 + rng.below(12))
                    .map(|i| {
                        let id = rng.below(ID_SPACE);
                        let fp = rng.fingerprint();
                        (id, fp, (i % 3 == 0).then(|| format!("batch {id} {fp:x}")))
                    })
                    .collect(),
            ),
            26..=32 => Op::Delete(id),
            33..=35 => Op::InsertIfNew(id, rng.fingerprint()),
            36..=38 => Op::Flush,
            _ => Op::Compact,
        }
    })
}

/// What `op` does to the model of live documents.
fn apply(model: &mut Model, op: &Op) {
    match op {
        Op::Insert(id, fp) => {
            model.insert(*id, (*fp, None));
        }
        Op::InsertNamed(id, fp, name) => {
            model.insert(*id, (*fp, Some(name.clone())));
        }
        Op::Batch(docs) => {
            for (id, fp, name) in docs {
                model.insert(*id, (*fp, name.clone()));
            }
        }
        Op::Delete(id) => {
            model.remove(id);
        }
        Op::InsertIfNew(id, fp) => {
            if brute_force(model, *fp, 1).is_empty() {
                model.insert(*id, (*fp, None));
            }
        }
        Op::Flush | Op::Compact => {}
    }
}

fn perform(index: &Index, op: &Op) -> simhashdb::Result<()> {
    match op {
        Op::Insert(id, fp) => index.insert(*id, *fp),
        Op::InsertNamed(id, fp, name) => index.insert_named(*id, *fp, name.clone()),
        Op::Batch(docs) => index.insert_batch(docs.iter().cloned()),
        Op::Delete(id) => index.delete(*id),
        Op::InsertIfNew(id, fp) => index.insert_if_new(*id, *fp, 1).map(|_| ()),
        Op::Flush => index.flush(),
        Op::Compact => index.compact(),
    }
}

/// The options of a child with `seed`: flushes on the flush thread for odd
/// seeds, on the writing thread for even ones, whatever the core count; and
/// for one seed in three, at most 3 segments before a flush waits, so that
/// the writer often merges beside a long merge of the merge thread.
fn options(durability: Durability, seed: u64) -> Options {
    // A flush every few dozen documents, and a merge after every second flush.
    Options::new()
        .plan(Plan::new(5, 3).expect("plan"))
        .durability(durability)
        .memtable_bytes(4096)
        .merge_policy(Some(
            Arc::new(TieredMergePolicy { fan_in: 2 }) as Arc<dyn MergePolicy>
        ))
        .flush_thread(seed % 2 == 1)
        .max_segments(if seed.is_multiple_of(3) { 3 } else { 32 })
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Buffered => "buffered",
        Durability::Sync => "sync",
    }
}

/// The child: runs the operations of its seed, writing `b <i>` before
/// operation `i` starts and `a <i>` once it has returned, until it is killed.
#[test]
#[ignore = "run by the kill tests as a child process"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        // Run directly (`--ignored`): nothing to do without a parent.
        return;
    };
    let mut parts = spec.split('\t');
    let (dir, seed, durability) = (
        parts.next().expect("dir"),
        parts.next().expect("seed").parse::<u64>().expect("seed"),
        parts.next().expect("durability"),
    );
    let durability = match durability {
        "sync" => Durability::Sync,
        _ => Durability::Buffered,
    };
    let index = Index::open(dir, options(durability, seed)).expect("child: open");
    let mut out = std::io::stdout().lock();
    for (i, op) in ops(seed).take(CHILD_OPS).enumerate() {
        writeln!(out, "b {i}")
            .and_then(|()| out.flush())
            .expect("pipe");
        if let Err(e) = perform(&index, &op) {
            panic!("child: operation {i} ({op:?}) failed: {e}");
        }
        writeln!(out, "a {i}")
            .and_then(|()| out.flush())
            .expect("pipe");
    }
}

/// When the parent kills the child.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// Right after the child reports its `n`-th acknowledgement.
    Acks(usize),
    /// Right after the child reports starting its `n`-th flush or compaction,
    /// then a pause of up to a few hundred microseconds.
    FlushOrCompact(usize, Duration),
    /// A delay after the child's first report.
    Delay(Duration),
    /// A delay after the child was started: often while it opens the index
    /// and recovers the previous cycle's WAL.
    SinceSpawn(Duration),
}

/// Counts over a run of cycles.
#[derive(Debug, Default)]
struct Tally {
    cycles: u64,
    acknowledged: u64,
    /// Cycles whose in-flight operation was applied by recovery.
    in_flight_kept: u64,
    /// Cycles killed while a flush or compaction call was in flight.
    killed_in_flush_or_compact: u64,
    /// Cycles where the child finished every operation before the kill.
    finished: u64,
    /// Cycles killed before the child acknowledged anything (most of them
    /// while it opened and recovered the index).
    killed_before_first_ack: u64,
}

/// Reads the child's reports: (started, acknowledged) operation indices.
fn parse(line: &str) -> Option<(char, usize)> {
    let (tag, n) = line.split_once(' ')?;
    let tag = match tag {
        "b" => 'b',
        "a" => 'a',
        _ => return None,
    };
    Some((tag, n.trim().parse().ok()?))
}

fn spawn_child(dir: &Path, seed: u64, durability: Durability) -> Child {
    let exe = std::env::current_exe().expect("current test binary");
    Command::new(exe)
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{}\t{seed}\t{}", dir.display(), durability_name(durability)),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child")
}

/// Runs one child until `kill_at`, kills it, and returns the number of
/// operations it acknowledged (they are contiguous: 0..n) and whether it was
/// killed (rather than finishing on its own).
fn run_child(dir: &Path, seed: u64, durability: Durability, kill_at: KillAt) -> (usize, bool) {
    let mut child = spawn_child(dir, seed, durability);
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel();
    let out_thread = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(report) = parse(&line)
                && tx.send(report).is_err()
            {
                break;
            }
        }
    });

    let mut acked = 0usize;
    let mut flushes_started = 0usize;
    let mut deadline: Option<Instant> = match kill_at {
        KillAt::SinceSpawn(d) => Some(Instant::now() + d),
        _ => None,
    };
    let record = |(tag, n): (char, usize), acked: &mut usize| {
        if tag == 'a' {
            assert_eq!(n, *acked, "acknowledgements out of order");
            *acked += 1;
        }
    };
    let killed = loop {
        let report = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(r) => Some(r),
                Err(mpsc::RecvTimeoutError::Timeout) => break true,
                Err(mpsc::RecvTimeoutError::Disconnected) => None,
            },
            None => rx.recv().ok(),
        };
        let Some(report) = report else {
            // The child exited on its own.
            break false;
        };
        record(report, &mut acked);
        match (kill_at, report) {
            (KillAt::Acks(n), ('a', _)) if acked >= n => break true,
            (KillAt::FlushOrCompact(n, pause), ('b', i)) => {
                let op = ops(seed).nth(i).expect("op");
                if op.is_flush_or_compact() {
                    flushes_started += 1;
                    if flushes_started > n {
                        std::thread::sleep(pause);
                        break true;
                    }
                }
            }
            (KillAt::Delay(d), _) if deadline.is_none() => deadline = Some(Instant::now() + d),
            _ => {}
        }
    };
    if killed {
        // SIGKILL: no destructor, no flush, no unlock in the child.
        let _ = child.kill();
    }
    let status = child.wait().expect("wait for child");
    // Every report written before the kill is still in the pipe: those
    // operations were acknowledged too.
    for report in rx.iter() {
        record(report, &mut acked);
    }
    out_thread.join().expect("reader thread");
    let stderr = err_thread.join().expect("stderr thread");
    if !killed || status.code().is_some() {
        assert!(
            status.success(),
            "child (seed {seed}, {durability:?}) failed on its own: {status}\n{stderr}"
        );
    }
    (acked, killed && status.code().is_none())
}

fn check_queries(index: &Index, model: &Model, rng: &mut Rng, ctx: &str) {
    let probes: Vec<u64> = CENTRES
        .iter()
        .copied()
        .chain((0..8).map(|_| rng.fingerprint()))
        .collect();
    for fp in probes {
        for k in 0..=3 {
            assert_eq!(
                index.query(fp, k).expect("query"),
                brute_force(model, fp, k),
                "{ctx}: query({fp:#x}, {k}) differs from brute force"
            );
        }
    }
}

/// `cycles` kill-and-reopen cycles in `dirs` fresh directories.
fn kill_cycles(durability: Durability, dirs: u64, cycles_per_dir: u64, base_seed: u64) -> Tally {
    let mut tally = Tally::default();
    let mut rng = Rng(base_seed);
    for d in 0..dirs {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("index");
        let mut model = Model::new();
        for c in 0..cycles_per_dir {
            // Odd seeds flush on the flush thread: every other cycle.
            let seed = rng.next() & !1 | (c % 2);
            // Sync mode is slower per operation; fewer acknowledgements keep
            // the run short.
            let max_acks = match durability {
                Durability::Buffered => 400,
                Durability::Sync => 150,
            };
            let kill_at = match rng.below(4) {
                0 => KillAt::Acks(rng.below(max_acks) as usize),
                1 => KillAt::FlushOrCompact(
                    rng.below(6) as usize,
                    Duration::from_micros(rng.below(400)),
                ),
                2 => KillAt::Delay(Duration::from_micros(rng.below(40_000))),
                _ => KillAt::SinceSpawn(Duration::from_micros(rng.below(30_000))),
            };
            let ctx = format!(
                "{durability:?}, dir {d} cycle {c}, seed {seed}, kill at {kill_at:?} (base seed {base_seed})"
            );
            let (acked, killed) = run_child(&dir, seed, durability, kill_at);

            // A reader first: it recovers in memory, leaving the files as the
            // kill left them, and must see what the writer will.
            let read_only = if rng.below(2) == 0 {
                match Index::open_read_only(&dir) {
                    Ok(reader) => Some(snapshot(&reader, 0..ID_SPACE)),
                    // Killed while creating the index: there is none yet
                    // (the parent's writer open below creates it).
                    Err(Error::Io { source, .. })
                        if c == 0 && acked == 0 && source.kind() == ErrorKind::NotFound =>
                    {
                        None
                    }
                    Err(e) => panic!("{ctx}: read-only open after the kill: {e}"),
                }
            } else {
                None
            };
            let index = Index::open(&dir, options(durability, seed))
                .unwrap_or_else(|e| panic!("{ctx}: reopen after the kill: {e}"));
            // Every checksum of every file the manifest names holds.
            index
                .verify()
                .unwrap_or_else(|e| panic!("{ctx}: verify after the kill: {e}"));
            let got = snapshot(&index, 0..ID_SPACE);
            // Models after every acknowledged operation, then after the one
            // in flight (if any).
            let attempted: Vec<Op> = ops(seed).take(acked + 1).collect();
            let mut after_acked = model.clone();
            for op in &attempted[..acked] {
                apply(&mut after_acked, op);
            }
            let mut after_next = after_acked.clone();
            if let Some(op) = attempted.get(acked) {
                apply(&mut after_next, op);
            }
            let next_in_flight = killed && attempted.len() > acked;
            if got == after_acked {
                model = after_acked;
            } else if next_in_flight && got == after_next {
                model = after_next;
                tally.in_flight_kept += 1;
            } else {
                panic!(
                    "{ctx}: after {acked} acknowledged operations the index equals no prefix \
                     model\n got: {got:?}\n acknowledged: {after_acked:?}\n with the next \
                     operation ({:?}): {after_next:?}",
                    attempted.get(acked)
                );
            }
            if let Some(seen) = read_only {
                assert_eq!(seen, got, "{ctx}: a read-only open saw another state");
            }
            check_queries(&index, &model, &mut rng, &ctx);
            if next_in_flight && attempted[acked].is_flush_or_compact() {
                tally.killed_in_flush_or_compact += 1;
            }
            tally.cycles += 1;
            tally.acknowledged += acked as u64;
            tally.finished += u64::from(!killed);
            tally.killed_before_first_ack += u64::from(killed && acked == 0);
            if tally.cycles % 500 == 0 {
                eprintln!("{durability:?}: {tally:?}");
            }
        }
    }
    tally
}

#[test]
fn killed_buffered_writer_keeps_every_acknowledged_write() {
    let tally = kill_cycles(Durability::Buffered, 6, 12, 0x5eed_0001);
    eprintln!("buffered: {tally:?}");
    assert_eq!(tally.cycles, 72);
    assert!(tally.acknowledged > 0, "no operation was ever acknowledged");
}

#[test]
fn killed_sync_writer_keeps_every_acknowledged_write() {
    let tally = kill_cycles(Durability::Sync, 4, 12, 0x5eed_0002);
    eprintln!("sync: {tally:?}");
    assert_eq!(tally.cycles, 48);
    assert!(tally.acknowledged > 0, "no operation was ever acknowledged");
}

/// The long run: `SIMHASHDB_CRASH_CYCLES` cycles (default 5,000), half per
/// durability mode, 25 cycles per directory.
#[test]
#[ignore = "long: run before a release (`cargo test --release --test crash -- --ignored kill_cycles_long`)"]
fn kill_cycles_long() {
    let cycles: u64 = std::env::var(CYCLES_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let started = Instant::now();
    let per_dir = 25;
    let dirs = cycles.div_ceil(2 * per_dir);
    let base = std::env::var("SIMHASHDB_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x10_0000u64);
    let buffered = kill_cycles(Durability::Buffered, dirs, per_dir, base);
    eprintln!("buffered: {buffered:?} after {:?}", started.elapsed());
    let sync = kill_cycles(Durability::Sync, dirs, per_dir, base + 1);
    eprintln!("sync: {sync:?} after {:?}", started.elapsed());
    assert_eq!(buffered.cycles + sync.cycles, 2 * dirs * per_dir);
    assert!(buffered.acknowledged > 0 && sync.acknowledged > 0);
}
