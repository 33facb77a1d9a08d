//! Ingest, open and query figures of the persistent index.
//!
//! `cargo run --release --example index_bench -- N [DIR]`
//! (environment: `WARMUP_QUERIES=W`, default 1,000; `PREFAULT=0` to open
//! without prefaulting the segments' pages; `PAUSE_MS=P` to wait P ms after
//! the open, while the prefault runs, before the warm-up)
//!
//! Builds an index of N xorshift64 fingerprints in a fresh directory (default:
//! a temporary one) with the default options (k = 3, automatic plan,
//! Buffered), inserting batches of 10,000 (flushes included), compacts it to
//! one segment, times the first queries on the same handle, reopens it
//! (timing the open), then times 10,000 queries (`QUERIES=Q` for another number) at
//! k = 3 (half near a stored fingerprint, half random), one thread, warm page
//! cache, against a brute-force popcount scan of the same fingerprints in the
//! same run. `TIMES=FILE` writes the reopened pass's query times (µs), in
//! query order, one a line, to FILE.

use std::time::Instant;

use simhashdb::{Index, Options, hamming};

mod common;
use common::{
    INDEX_BENCH_REOPEN_SEED, index_bench_fingerprints, near_and_random_queries, xorshift,
};

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Resident anonymous memory (heap and stacks; mapped file pages, which
/// the open prefaults in the background, are not counted).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("RssAnon:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The default options; `PREFAULT=0` turns off the background prefault of the
/// tables' pages at open (for comparing).
fn options() -> Options {
    Options::new().prefault(std::env::var("PREFAULT").map_or(true, |v| v != "0"))
}

/// `QUERIES`, or 10,000: how many queries each timed pass makes.
fn query_count() -> usize {
    std::env::var("QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Times `queries` at k = 3, one at a time; the times in µs, sorted.
fn time_queries(index: &Index, queries: &[u64]) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(queries.len());
    for &q in queries {
        let t = Instant::now();
        index.query(q, 3)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let temp = tempfile::tempdir()?;
    let dir = args
        .get(1)
        .map_or_else(|| temp.path().join("index"), std::path::PathBuf::from);
    let fps = index_bench_fingerprints(n);

    // An existing index in DIR (built by an earlier run with the same N) is reused.
    let reuse = dir.join("MANIFEST").exists();
    let index = Index::open(&dir, options())?;
    println!("plan: {}", index.plan());
    let start = Instant::now();
    if !reuse {
        for (b, chunk) in fps.chunks(10_000).enumerate() {
            let base = (b * 10_000) as u64;
            index.insert_batch(
                chunk
                    .iter()
                    .enumerate()
                    .map(|(i, &fp)| (base + i as u64, fp, None::<String>)),
            )?;
        }
        index.flush()?;
        let ingest = start.elapsed();
        println!(
            "ingest: {n} fingerprints in {:.2} s = {:.0} per second (batches of 10,000, Buffered, flushes included); {} segments",
            ingest.as_secs_f64(),
            n as f64 / ingest.as_secs_f64(),
            index.stats().segments
        );
        let start = Instant::now();
        index.compact()?;
        println!("compact: {:.2} s", start.elapsed().as_secs_f64());
        // The first queries on the same handle, right after the build and
        // the compaction (whose output was prefaulted as it was written).
        let count = query_count();
        let times = time_queries(&index, &near_and_random_queries(&fps, 0x5eed_c0de, count))?;
        println!(
            "first {count} queries after the compaction, same handle: p50 {:.1} µs, p99 {:.1} µs, mean {:.1} µs",
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times.iter().sum::<f64>() / times.len() as f64
        );
    }
    drop(index);

    let rss_before = rss_kib();
    let start = Instant::now();
    let index = Index::open(&dir, options())?;
    let open = start.elapsed();
    let stats = index.stats();
    println!(
        "open: {:.1} ms; resident anonymous memory grew by {} KiB; {} segment(s), {:.2} table bytes per key ({:.1} bits), {:.1} MiB on disk",
        open.as_secs_f64() * 1e3,
        rss_kib().saturating_sub(rss_before),
        stats.segments,
        stats.table_bytes_per_key,
        stats.table_bytes_per_key * 8.0,
        stats.disk_bytes as f64 / (1 << 20) as f64
    );

    let queries = near_and_random_queries(&fps, INDEX_BENCH_REOPEN_SEED, query_count());
    // PAUSE_MS=P waits P ms after the open (the background prefault goes on).
    if let Some(ms) = std::env::var("PAUSE_MS").ok().and_then(|v| v.parse().ok()) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    // Warm the page cache and the code.
    let warmup: usize = std::env::var("WARMUP_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mut warm = xorshift(777);
    for q in (0..warmup).map(|_| warm()) {
        index.query(q, 3)?;
    }
    let mut times = Vec::with_capacity(queries.len());
    // The same times split by whether the query found a document (which
    // reads the doc map) or not (tables only).
    let (mut hits, mut misses) = (Vec::new(), Vec::new());
    let mut found = 0usize;
    for &q in &queries {
        let t = Instant::now();
        let matches = index.query(q, 3)?.len();
        let micros = t.elapsed().as_secs_f64() * 1e6;
        found += matches;
        times.push(micros);
        if matches > 0 { &mut hits } else { &mut misses }.push(micros);
    }
    if let Ok(path) = std::env::var("TIMES") {
        let lines: String = times.iter().map(|t| format!("{t:.2}\n")).collect();
        std::fs::write(path, lines)?;
    }
    times.sort_by(f64::total_cmp);
    hits.sort_by(f64::total_cmp);
    misses.sort_by(f64::total_cmp);
    let brute_queries = 20;
    let t = Instant::now();
    let mut brute_found = 0usize;
    for &q in queries.iter().take(brute_queries) {
        brute_found += fps.iter().filter(|&&f| hamming(f, q) <= 3).count();
    }
    let brute = t.elapsed().as_secs_f64() * 1e6 / brute_queries as f64;
    let index_found_first: usize = queries
        .iter()
        .take(brute_queries)
        .map(|&q| index.query(q, 3).map(|m| m.len()).unwrap_or(0))
        .sum();
    assert_eq!(
        brute_found, index_found_first,
        "index and brute force disagree"
    );
    println!(
        "query k=3 ({} queries, {found} matches): p50 {:.1} µs, p99 {:.1} µs, mean {:.1} µs; brute-force scan {:.0} µs: {:.0}x faster at p50",
        queries.len(),
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        times.iter().sum::<f64>() / times.len() as f64,
        brute,
        brute / percentile(&times, 0.5)
    );
    for (what, times) in [("with matches", &hits), ("without", &misses)] {
        if !times.is_empty() {
            println!(
                "  {} queries {what}: p50 {:.1} µs, p99 {:.1} µs",
                times.len(),
                percentile(times, 0.5),
                percentile(times, 0.99)
            );
        }
    }
    Ok(())
}
