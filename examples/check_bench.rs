//! Long runs of check-and-insert in one process: what the server's
//! `POST /v1/check` costs the engine, without HTTP, JSON or clients
//! (docs/BENCHMARKS.md, "A merge fan-in of 3 for the server").
//!
//! ```text
//! cargo run --release --example check_bench -- [--preload 1000000] [--checks 3000000]
//!     [--batch 1000] [--fan-in 3] [--memtable-mib M] [--compact] [--flush-thread on|off]
//! ```
//!
//! Preloads `--preload` random fingerprints (splitmix64) into a fresh index
//! in a temporary directory, in batches of 100,000, flushes and closes it;
//! reopens it (compacting it to one segment first with `--compact`) and
//! calls `Index::insert_if_new_many` on `--checks` other random
//! fingerprints, `--batch` at a time, k = 3. Random fingerprints are almost
//! never within 3 bits of each other, so nearly every check inserts, and
//! the index grows, flushes and merges (with a tiered policy of fan-in
//! `--fan-in`, the server's default) while it is searched. Prints the
//! checks per second, the process's CPU seconds per check, the duplicates
//! found (expected: about 0), the segments before and after and on average
//! after each batch (each check searches every segment), and the heap
//! bytes of the small segments' decoded tables (`Stats::decoded_table_bytes`).

mod common;

use std::sync::Arc;
use std::time::Instant;

use simhashdb::engine::policy::TieredMergePolicy;
use simhashdb::{Index, Options};

use common::{arg, splitmix64};

fn main() {
    let preload = arg("--preload", 1_000_000);
    let checks = arg("--checks", 3_000_000);
    let batch = arg("--batch", 1000).max(1);
    let fan_in = arg("--fan-in", 3) as usize;
    // The default: `Options::memtable_bytes`'s.
    let memtable_mib = arg(
        "--memtable-mib",
        (Options::default().memtable_bytes >> 20) as u64,
    ) as usize;
    let compact = std::env::args().any(|a| a == "--compact");
    let flush_thread = std::env::args()
        .skip_while(|a| a != "--flush-thread")
        .nth(1)
        .map(|v| v == "on");
    let options = || {
        let options = Options::default()
            .merge_policy(Some(Arc::new(TieredMergePolicy { fan_in })))
            .memtable_bytes(memtable_mib << 20);
        match flush_thread {
            Some(on) => options.flush_thread(on),
            None => options,
        }
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("index");
    {
        let index = Index::open(&dir, options()).expect("create");
        for start in (0..preload).step_by(100_000) {
            let docs = (start..(start + 100_000).min(preload))
                .map(|id| (id, splitmix64(id), None::<String>));
            index.insert_batch(docs).expect("preload");
        }
        index.close().expect("close");
    }
    let index = Index::open(&dir, options()).expect("open");
    if compact {
        index.compact().expect("compact");
    }
    let k = index.plan().k();
    let segments_before = index.stats().segments;
    let (start, cpu) = (Instant::now(), common::cpu_seconds());
    let mut duplicates = 0;
    let (mut segments_seen, mut batches) = (0, 0);
    let first = 1u64 << 40;
    for from in (first..first + checks).step_by(batch as usize) {
        let docs: Vec<(u64, u64, Option<String>)> = (from..(from + batch).min(first + checks))
            .map(|id| (id, splitmix64(id), None))
            .collect();
        let results = index
            .insert_if_new_many(docs, k)
            .expect("insert_if_new_many");
        duplicates += results.iter().filter(|r| r.is_err()).count();
        segments_seen += index.stats().segments;
        batches += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = common::cpu_seconds() - cpu;
    let stats = index.stats();
    println!(
        "check_bench: {preload} preloaded{}, {checks} checked in batches of {batch}, fan-in {fan_in}, memtable {memtable_mib} MiB: {:.0} checks/s, {:.2} CPU µs per check, {duplicates} duplicates, segments {segments_before} -> {} ({:.2} on average), decoded tables {:.1} MiB",
        if compact { " (compacted)" } else { "" },
        checks as f64 / seconds,
        cpu * 1e6 / checks as f64,
        stats.segments,
        segments_seen as f64 / batches.max(1) as f64,
        stats.decoded_table_bytes as f64 / (1 << 20) as f64,
    );
}
