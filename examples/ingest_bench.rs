//! Ingest rate of the persistent index under three merge settings, measured
//! in one run so they share the machine's conditions.
//!
//! `cargo run --release --example ingest_bench -- N [DIR]`
//!
//! Inserts N xorshift64 fingerprints in batches of 10,000 with Buffered
//! durability and the default plan and memtable budget, flushes included
//! (the final flush too), into a fresh index under DIR (default: a temporary
//! directory) for each setting:
//! - `merge thread`: the default, merges on a background thread;
//! - `writer merges`: the same merge policy run on the writing thread;
//! - `no merges`: no merge policy (segments pile up).
//!
//! `ONLY=thread` (any part of a setting's name) runs just the matching
//! settings, e.g. under a profiler. `FAN_IN=8` replaces the default merge
//! policy's fan-in, `MEMTABLE_MIB=128` the memtable budget,
//! `MAX_SEGMENTS=48` the segment count above which a flush waits,
//! `SKETCHES=1` stores a 16-byte sketch with every document (as an index
//! of texts does), `SMALL_PLANS=0` writes every segment in the index's plan
//! (`Options::small_segment_plans`), and `FLUSH_THREAD=0` or `1` flushes on
//! the writing thread or the flush thread (`Options::flush_thread`; the
//! default depends on the core count), to compare settings with the same
//! harness.
//!
//! For each it prints wall time, fingerprints per second, the process's CPU
//! seconds over the run, the bytes it wrote per fingerprint, and the
//! segments left; then the time until the index was closed, which waits for
//! a merge in progress (the rate up to the last flush leaves it out), and the
//! rate over that time; then percentiles of the time one `insert_batch` call
//! took (a write that triggers a flush, or waits for one, takes longest).

use std::time::Instant;

use simhashdb::{Index, Options};

mod common;
use common::{cpu_seconds, insert_xorshift_timed, written_bytes};

/// Adjusts the default options.
type Setting = fn(Options) -> Options;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().map_or(Ok(10_000_000), |s| s.parse())?;
    let temp = tempfile::tempdir()?;
    let root = args
        .get(1)
        .map_or_else(|| temp.path().to_path_buf(), std::path::PathBuf::from);
    let settings: [(&str, Setting); 3] = [
        ("merge thread", |o| o),
        ("writer merges", |o| o.merge_thread(false)),
        ("no merges", |o| o.merge_policy(None)),
    ];
    // ONLY=<substring> runs only the settings whose name contains it.
    let only = std::env::var("ONLY").unwrap_or_default();
    for (name, setting) in settings {
        if !name.contains(only.as_str()) {
            continue;
        }
        let dir = root.join(name.replace(' ', "-"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let mut options = Options::default();
        if let Ok(fan_in) = std::env::var("FAN_IN") {
            options.merge_policy = Some(std::sync::Arc::new(
                simhashdb::engine::policy::TieredMergePolicy {
                    fan_in: fan_in.parse()?,
                },
            ));
        }
        if let Ok(mib) = std::env::var("MEMTABLE_MIB") {
            options.memtable_bytes = mib.parse::<usize>()? << 20;
        }
        if let Ok(max) = std::env::var("MAX_SEGMENTS") {
            options.max_segments = max.parse()?;
        }
        if let Ok(on) = std::env::var("FLUSH_THREAD") {
            options.flush_thread = on != "0";
        }
        if std::env::var("SMALL_PLANS").is_ok_and(|v| v == "0") {
            options.small_segment_plans = false;
        }
        let index = Index::open(&dir, setting(options))?;
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let cpu = cpu_seconds();
        let written = written_bytes();
        let start = Instant::now();
        let mut latencies = Vec::new();
        insert_xorshift_timed(&index, &mut s, 0..n, &mut latencies)?;
        index.flush()?;
        let wall = start.elapsed().as_secs_f64();
        let segments = index.stats().segments;
        // Dropping waits for a merge in progress (not for merges not yet
        // started: the segments left say how many wait).
        drop(index);
        let closed = start.elapsed().as_secs_f64();
        println!(
            "{name:>13}: {n} fingerprints in {wall:.2} s = {:.0} per second; {:.2} CPU s; {:.1} bytes written per fingerprint; {segments} segments after the last flush; closed after {closed:.2} s ({:.0} per second)",
            n as f64 / wall,
            cpu_seconds() - cpu,
            (written_bytes() - written) / n as f64,
            n as f64 / closed,
        );
        latencies.sort_by(f64::total_cmp);
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize] * 1e3;
        println!(
            "{:>13}  insert_batch of 10,000: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
            "",
            at(0.5),
            at(0.99),
            at(0.999),
            at(1.0)
        );
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}
