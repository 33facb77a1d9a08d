//! Readers in another process beside a writer: query latency, the time to
//! open and to refresh a reader, and the writer's ingest rate beside a
//! reader querying flat out.
//!
//! `cargo run --release --example reader_bench -- --n 10000000 [--dir DIR]`
//!
//! Builds an index of N splitmix64 fingerprints (batches of 10,000,
//! Buffered, default options) under DIR (default: a temporary directory),
//! or reuses the one a previous run left there (`DIR/index`); this process
//! holds it open for writing throughout. Then, each in the same run:
//!
//! 1. query p50/p99: 20,000 queries (a document's fingerprint with 2 bits
//!    flipped, at the plan's k) through the writer's own `Index` (an
//!    in-process reader), then the same queries in a child process through
//!    `Index::open_read_only`, the writer idle;
//! 2. open and refresh beside a writing writer: a thread here inserts
//!    batches of 1,000 without pause while a child process opens a reader
//!    20 times, then refreshes one 20 times, 50 ms apart (each refresh
//!    catching up with about 50 ms of writes);
//! 3. ingest: the writer's rate (batches of 1,000 documents, Buffered) for
//!    5 s alone, then for 5 s beside a child process querying flat out.
//!
//! The child is this program again (`--child MODE --db PATH`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use simhashdb::{Index, Options};

mod common;
use common::{arg, splitmix64};

const QUERIES: u64 = 20_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n = arg("--n", 10_000_000);
    if let (Some(mode), Some(db)) = (value("--child"), value("--db")) {
        return child(&mode, Path::new(&db), n);
    }
    let temp = tempfile::tempdir()?;
    let root = value("--dir").map_or_else(|| temp.path().to_path_buf(), PathBuf::from);
    let db = root.join("index");
    let fresh = !db.exists();
    let index = Arc::new(Index::open(&db, Options::new())?);
    if fresh {
        let started = Instant::now();
        let mut id = 0u64;
        while id < n {
            let end = n.min(id + 10_000);
            index.insert_batch((id..end).map(|i| (i, splitmix64(i), None::<String>)))?;
            id = end;
        }
        println!(
            "built {n} documents in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    let stats = index.stats();
    println!(
        "index: {} documents in {} segment(s), {} in the memtable (WAL), {:.1} MiB of segments",
        stats.segment_docs,
        stats.segments,
        stats.memtable_docs,
        stats.disk_bytes as f64 / f64::from(1 << 20)
    );

    // 1. Query latency, in process and in another process.
    let k = index.plan().k();
    let mut times = Vec::with_capacity(QUERIES as usize);
    for q in 0..QUERIES {
        let fp = query_fp(q, n);
        let start = Instant::now();
        std::hint::black_box(index.query(fp, k)?);
        times.push(start.elapsed());
    }
    let (p50, p99) = percentiles(&mut times);
    println!("in-process reader (the writer's Index): p50 {p50:?}, p99 {p99:?}");
    let out = run_child(&db, "query", n)?;
    println!("{out}");

    // 2. Opening and refreshing beside a writing writer.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = start_writer(&index, &stop, &written, n);
    let out = run_child(&db, "open", n)?;
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer")?;
    println!("{out}");
    let stats = index.stats();
    println!(
        "  (the writer: {} segment(s), {} documents in the memtable at the end)",
        stats.segments, stats.memtable_docs
    );

    // 3. Ingest alone and beside a reader querying flat out.
    let solo = ingest_for(&index, Duration::from_secs(5), n + (1 << 34))?;
    println!("ingest alone: {solo:.0} documents/s");
    let mut reader = spawn_child(&db, "flat", n)?;
    let mut lines = BufReader::new(reader.stdout.take().expect("stdout")).lines();
    let ready = lines.next().transpose()?;
    assert_eq!(ready.as_deref(), Some("ready"));
    let beside = ingest_for(&index, Duration::from_secs(5), n + (1 << 35))?;
    reader.kill()?;
    reader.wait()?;
    println!(
        "ingest beside a reader process querying flat out: {beside:.0} documents/s ({:.2}x alone)",
        beside / solo
    );
    Ok(())
}

/// Query `q`: document `q`'s fingerprint (of the first `n`) with 2 bits flipped.
fn query_fp(q: u64, n: u64) -> u64 {
    let r = splitmix64(q ^ 0xbe_ac4);
    splitmix64(r % n) ^ (1 << (r % 64)) ^ (1 << ((r >> 8) % 64))
}

fn percentiles(times: &mut [Duration]) -> (Duration, Duration) {
    times.sort_unstable();
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p) as usize];
    (at(0.5), at(0.99))
}

fn start_writer(
    index: &Arc<Index>,
    stop: &Arc<AtomicBool>,
    written: &Arc<AtomicU64>,
    n: u64,
) -> std::thread::JoinHandle<simhashdb::Result<()>> {
    let (index, stop, written) = (index.clone(), stop.clone(), written.clone());
    std::thread::spawn(move || {
        let mut id = n + (1 << 33);
        while !stop.load(Ordering::SeqCst) {
            index.insert_batch((id..id + 1000).map(|i| (i, splitmix64(i), None::<String>)))?;
            id += 1000;
            written.fetch_add(1000, Ordering::SeqCst);
        }
        Ok(())
    })
}

fn ingest_for(index: &Index, time: Duration, first: u64) -> simhashdb::Result<f64> {
    let start = Instant::now();
    let mut id = first;
    while start.elapsed() < time {
        index.insert_batch((id..id + 1000).map(|i| (i, splitmix64(i), None::<String>)))?;
        id += 1000;
    }
    Ok((id - first) as f64 / start.elapsed().as_secs_f64())
}

fn spawn_child(db: &Path, mode: &str, n: u64) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .args(["--child", mode, "--n", &n.to_string()])
        .arg("--db")
        .arg(db)
        .stdout(Stdio::piped())
        .spawn()
}

fn run_child(db: &Path, mode: &str, n: u64) -> Result<String, Box<dyn std::error::Error>> {
    let out = spawn_child(db, mode, n)?.wait_with_output()?;
    if !out.status.success() {
        return Err(format!("the {mode} child failed: {}", out.status).into());
    }
    Ok(String::from_utf8(out.stdout)?.trim_end().to_string())
}

fn child(mode: &str, db: &Path, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    match mode {
        "query" => {
            let start = Instant::now();
            let reader = Index::open_read_only(db)?;
            let opened = start.elapsed();
            let k = reader.plan().k();
            // The same warm-up as the writer's queries had: none beyond
            // the open's own prefault, which runs in the background.
            let mut times = Vec::with_capacity(QUERIES as usize);
            for q in 0..QUERIES {
                let fp = query_fp(q, n);
                let start = Instant::now();
                std::hint::black_box(reader.query(fp, k)?);
                times.push(start.elapsed());
            }
            let (p50, p99) = percentiles(&mut times);
            println!(
                "reader in another process (open_read_only, opened in {opened:?}): p50 {p50:?}, p99 {p99:?}"
            );
        }
        "open" => {
            let mut opens = Vec::new();
            for _ in 0..20 {
                let start = Instant::now();
                let reader = Index::open_read_only(db)?;
                opens.push(start.elapsed());
                drop(reader);
            }
            let reader = Index::open_read_only(db)?;
            let mut refreshes = Vec::new();
            let mut caught_up = Vec::new();
            for _ in 0..20 {
                std::thread::sleep(Duration::from_millis(50));
                let before = reader.stats().memtable_docs;
                let start = Instant::now();
                reader.refresh()?;
                refreshes.push(start.elapsed());
                // The documents added to its memtable (a flush meanwhile
                // moves them to a segment: then fewer).
                caught_up.push(reader.stats().memtable_docs.saturating_sub(before));
            }
            let (open50, _) = percentiles(&mut opens);
            let (refresh50, _) = percentiles(&mut refreshes);
            let open_max = opens.last().copied().unwrap_or_default();
            let refresh_max = refreshes.last().copied().unwrap_or_default();
            let applied: usize = caught_up.iter().sum();
            let spent: Duration = refreshes.iter().sum();
            caught_up.sort_unstable();
            println!(
                "  refreshes: {applied} documents caught up in {spent:?} in all ({:.0} documents/s)",
                applied as f64 / spent.as_secs_f64()
            );
            println!(
                "beside a writing writer: open_read_only median {open50:?} (max {open_max:?}); \
                 refresh median {refresh50:?} (max {refresh_max:?}), each catching up with \
                 {}..{} new documents in the WAL",
                caught_up[0],
                caught_up[caught_up.len() - 1]
            );
        }
        "flat" => {
            let reader = Index::open_read_only(db)?;
            let k = reader.plan().k();
            println!("ready");
            let mut q = 0;
            loop {
                std::hint::black_box(reader.query(query_fp(q, n), k)?);
                q += 1;
            }
        }
        other => return Err(format!("unknown child mode {other}").into()),
    }
    Ok(())
}
