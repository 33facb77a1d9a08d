//! Time of an online backup and the longest pause it causes to a writer.
//!
//! `cargo run --release --example backup_bench -- --n 10000000 [--dir DIR]`
//!
//! Builds an index of N splitmix64 fingerprints (batches of 10,000,
//! Buffered durability, default plan, memtable and merges) under DIR
//! (default: a temporary directory), or reuses the one a previous run left
//! there (`DIR/index`). Then a writer thread inserts one document per call
//! (`Index::insert`, Buffered) for the whole measurement, recording how
//! long each call took; the main thread waits a second, takes
//! `Index::backup` into `DIR/backup-N` (same file system: hard links),
//! waits another second, and takes `Index::backup_dir` of the same index
//! (the lock-free copy `simhashdb backup` makes beside a `serve`). It
//! prints each backup's time, what it linked and copied, and the longest
//! insert in the second before the first backup (the baseline), during
//! each backup, and the percentiles over the run. On a machine busy with
//! other work the longest insert of every window is a thread descheduled,
//! not a lock: compare the windows with each other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use simhashdb::{Index, Options};

mod common;
use common::{arg, splitmix64};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = arg("--n", 10_000_000);
    let temp = tempfile::tempdir()?;
    let args: Vec<String> = std::env::args().collect();
    let root = args
        .iter()
        .position(|a| a == "--dir")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
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
        "index: {} documents in {} segment(s), {} in memory, {:.1} MiB of segments",
        stats.segment_docs,
        stats.segments,
        stats.memtable_docs,
        stats.disk_bytes as f64 / f64::from(1 << 20)
    );

    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    let writer = {
        let (index, stop) = (index.clone(), stop.clone());
        std::thread::spawn(move || -> simhashdb::Result<Vec<(Duration, Duration)>> {
            // (start since origin, duration) of each insert.
            let mut calls = Vec::with_capacity(1 << 20);
            let mut id = n + (1 << 32);
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                index.insert(id, splitmix64(id))?;
                calls.push((start - origin, start.elapsed()));
                id += 1;
            }
            Ok(calls)
        })
    };
    let flushes = index.stats().flushes;
    std::thread::sleep(Duration::from_secs(1));
    println!(
        "flushes by the writer in the second before: {}",
        index.stats().flushes - flushes
    );
    let mut windows = vec![("before (1 s)", Duration::ZERO, origin.elapsed())];
    for (name, lock_free) in [("Index::backup", false), ("Index::backup_dir", true)] {
        let dest = root.join(format!(
            "backup-{}",
            if lock_free { "dir" } else { "index" }
        ));
        if dest.exists() {
            std::fs::remove_dir_all(&dest)?;
        }
        let from = origin.elapsed();
        let flushes = index.stats().flushes;
        let started = Instant::now();
        let report = if lock_free {
            Index::backup_dir(&db, &dest)?
        } else {
            index.backup(&dest)?
        };
        let took = started.elapsed();
        windows.push((name, from, origin.elapsed()));
        println!(
            "flushes by the writer during {name}: {}",
            index.stats().flushes - flushes
        );
        println!(
            "{name}: {:.1} ms; {} linked, {} copied ({:.1} MiB written), {:.1} MiB in all",
            took.as_secs_f64() * 1e3,
            report.linked,
            report.copied,
            report.copied_bytes as f64 / f64::from(1 << 20),
            report.bytes as f64 / f64::from(1 << 20)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    stop.store(true, Ordering::Relaxed);
    let calls = writer.join().map_err(|_| "the writer panicked")??;
    for (name, from, to) in windows {
        // A call that started before the window and ended in it counts too.
        let mut window: Vec<Duration> = calls
            .iter()
            .filter(|(start, took)| *start + *took >= from && *start <= to)
            .map(|(_, took)| *took)
            .collect();
        window.sort();
        let at = |p: f64| {
            window
                .get(((window.len().max(1) - 1) as f64 * p) as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        println!(
            "inserts {name}: {} calls, p99 {:.3} ms, p99.9 {:.3} ms, longest {:.2} ms, {} over 10 ms",
            window.len(),
            at(0.99),
            at(0.999),
            at(1.0),
            window.iter().filter(|d| d.as_millis() > 10).count()
        );
    }
    let mut all: Vec<Duration> = calls.iter().map(|(_, took)| *took).collect();
    all.sort();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "inserts: {} calls; p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.2} ms",
        all.len(),
        pct(0.5),
        pct(0.99),
        pct(0.999),
        pct(1.0) / 1e3
    );
    drop(index);
    Ok(())
}
