//! Queries of a probed plan at distances below its k.
//!
//! `cargo run --release --example probe_radius_bench -- [N] [QUERIES]`
//!
//! In memory (`PermutedTables`), N xorshift64 fingerprints (default
//! 10,000,000) under the plans `Plan::auto` gives an index of texts at k = 6
//! (`Plan::probed(4, 1, 6)`, 10 M; `Plan::probed(3, 2, 6)`, 50 M), QUERIES
//! queries (default 20,000; half a stored fingerprint with a few bits
//! flipped, half random) at each distance 2 to 6, one thread, after one
//! untimed pass: p50 and mean per query, and the hits found (checked
//! against a scan of 200 of the queries).

use std::time::Instant;

use simhashdb::hamming;
use simhashdb::plan::Plan;
use simhashdb::search::PermutedTables;

fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(10_000_000), |s| s.parse())?;
    let count: usize = args.get(1).map_or(Ok(20_000), |s| s.parse())?;
    let mut next = xorshift(0x2545_F491_4F6C_DD1D);
    let fps: Vec<u64> = (0..n).map(|_| next()).collect();
    let queries: Vec<u64> = (0..count)
        .map(|i| {
            if i % 2 == 0 {
                let mut q = fps[(next() % n as u64) as usize];
                for _ in 0..next() % 7 {
                    q ^= 1 << (next() % 64);
                }
                q
            } else {
                next()
            }
        })
        .collect();
    println!("| plan | d | p50 µs | mean µs | hits |");
    println!("|---|---:|---:|---:|---:|");
    for plan in [Plan::probed(4, 1, 6)?, Plan::probed(3, 2, 6)?] {
        let tables = PermutedTables::new(&fps, &plan);
        for d in 2..=6u32 {
            for q in queries.iter().take(200) {
                let got = tables.query(*q, d)?.len();
                let want = fps.iter().filter(|&&f| hamming(f, *q) <= d).count();
                assert_eq!(got, want, "plan {plan}, d {d}");
            }
            let mut times = Vec::with_capacity(count);
            let mut hits = 0usize;
            for pass in 0..2 {
                for q in &queries {
                    let start = Instant::now();
                    let found = tables.query(*q, d)?.len();
                    if pass == 1 {
                        times.push(start.elapsed().as_secs_f64() * 1e6);
                        hits += found;
                    }
                }
            }
            times.sort_by(f64::total_cmp);
            let mean = times.iter().sum::<f64>() / times.len() as f64;
            println!(
                "| {plan} | {d} | {:.1} | {:.1} | {hits} |",
                times[times.len() / 2],
                mean
            );
        }
    }
    Ok(())
}
