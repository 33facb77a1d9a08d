//! The first queries after an open, before the background threads have
//! mapped and checked the segments' pages.
//!
//! `cargo run --release --example first_queries_bench -- DIR [N]`
//! (environment: `QUERIES=Q`, default 3,000; `TIMES=FILE`)
//!
//! Opens the index in DIR (built by `index_bench N DIR`, say) with the
//! default options and times Q queries at k = 3, one at a time, from the
//! first: their p50, p90 and p99, and the time of all of them. Without N
//! the queries are random 64-bit values, which rarely match, so this times
//! the tables, not the doc map. With N they are `index_bench N`'s
//! reopened pass (half a stored fingerprint with one bit flipped, so
//! reading the doc map, half random). Run it twice in a row and the second
//! run's pages are in the page cache already, as after any reopen
//! (`fincore` shows how much is).
//!
//! Around each query the thread's page faults are counted
//! (`getrusage(RUSAGE_THREAD)`, Linux): the run prints how many queries
//! took one, and `TIMES=FILE` writes a line per query in order: its time
//! (µs), its minor and major faults, and how many documents it found.

use std::time::Instant;

use simhashdb::{Index, Options};

mod common;
use common::{
    INDEX_BENCH_REOPEN_SEED, index_bench_fingerprints, near_and_random_queries, xorshift,
};

/// The calling thread's minor and major page faults so far (0 where
/// unknown).
#[cfg(target_os = "linux")]
fn faults() -> (i64, i64) {
    #[repr(C)]
    struct Rusage {
        times: [i64; 4],
        maxrss: i64,
        ixrss: i64,
        idrss: i64,
        isrss: i64,
        minflt: i64,
        majflt: i64,
        rest: [i64; 8],
    }
    unsafe extern "C" {
        fn getrusage(who: i32, usage: *mut Rusage) -> i32;
    }
    const RUSAGE_THREAD: i32 = 1;
    let mut usage = Rusage {
        times: [0; 4],
        maxrss: 0,
        ixrss: 0,
        idrss: 0,
        isrss: 0,
        minflt: 0,
        majflt: 0,
        rest: [0; 8],
    };
    // SAFETY: `usage` is a `struct rusage` of 64-bit Linux, written by the call.
    if unsafe { getrusage(RUSAGE_THREAD, &mut usage) } == 0 {
        (usage.minflt, usage.majflt)
    } else {
        (0, 0)
    }
}

#[cfg(not(target_os = "linux"))]
fn faults() -> (i64, i64) {
    (0, 0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args
        .first()
        .ok_or("usage: first_queries_bench DIR [N]")?
        .clone();
    let count: usize = std::env::var("QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
        .max(1);
    let queries: Vec<u64> = match args.get(1) {
        // index_bench's fingerprints and its reopened pass's queries.
        Some(n) => {
            let fps = index_bench_fingerprints(n.parse()?);
            near_and_random_queries(&fps, INDEX_BENCH_REOPEN_SEED, count)
        }
        None => {
            let mut next = xorshift(0x1234_5678_9abc_def1);
            (0..count).map(|_| next()).collect()
        }
    };
    let start = Instant::now();
    let index = Index::open(&dir, Options::new())?;
    let open = start.elapsed().as_secs_f64() * 1e3;
    let mut rows = Vec::with_capacity(count);
    let start = Instant::now();
    for &q in &queries {
        let (min0, maj0) = faults();
        let t = Instant::now();
        let found = index.query(q, 3)?.len();
        let micros = t.elapsed().as_secs_f64() * 1e6;
        let (min1, maj1) = faults();
        rows.push((micros, min1 - min0, maj1 - maj0, found));
    }
    let total = start.elapsed().as_secs_f64() * 1e3;
    if let Ok(path) = std::env::var("TIMES") {
        let lines: String = rows
            .iter()
            .map(|(t, min, maj, found)| format!("{t:.2} {min} {maj} {found}\n"))
            .collect();
        std::fs::write(path, lines)?;
    }
    let faulting = rows.iter().filter(|r| r.1 + r.2 > 0).count();
    let faults_total: i64 = rows.iter().map(|r| r.1 + r.2).sum();
    let mut times: Vec<f64> = rows.iter().map(|r| r.0).collect();
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((count - 1) as f64 * p).round() as usize];
    println!(
        "open {open:.1} ms; first {count} queries after the open in {total:.1} ms: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs; {faulting} queries took page faults ({faults_total} in all)",
        at(0.5),
        at(0.9),
        at(0.99)
    );
    Ok(())
}
