//! The first queries after an open, before the background threads have
//! mapped and checked the segments' pages.
//!
//! `cargo run --release --example first_queries_bench -- DIR`
//! (environment: `QUERIES=Q`, default 3,000)
//!
//! Opens the index in DIR (built by `index_bench N DIR`, say) with the
//! default options and times Q random 64-bit queries at k = 3, one at a
//! time, from the first: their p50, p90 and p99, and the time of all of
//! them. Random queries rarely match, so this times the tables, not the doc
//! map. Run it twice in a row and the second run's pages are in the page
//! cache already, as after any reopen (`fincore` shows how much is).

use std::time::Instant;

use simhashdb::{Index, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: first_queries_bench DIR")?;
    let count: usize = std::env::var("QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000)
        .max(1);
    let index = Index::open(&dir, Options::new())?;
    let mut state = 0x1234_5678_9abc_def1u64;
    let mut times = Vec::with_capacity(count);
    let start = Instant::now();
    for _ in 0..count {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let t = Instant::now();
        index.query(state, 3)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let total = start.elapsed().as_secs_f64() * 1e3;
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((count - 1) as f64 * p).round() as usize];
    println!(
        "first {count} queries after the open in {total:.1} ms: p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs",
        at(0.5),
        at(0.9),
        at(0.99)
    );
    Ok(())
}
