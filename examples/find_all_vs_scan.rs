//! `find_all` against a brute-force popcount scan, at distances from 3 to 16.
//!
//! `cargo run --release --example find_all_vs_scan -- [N ...]` (default: 8000 100000)
//!
//! For each N and k in 3, 6, 12, 16: N fingerprints (random, with every
//! fourth a near copy of an earlier one: 1 to 20 bits flipped, as planted
//! near-duplicates are), the plan `Plan::choose(N, k, Budget::Unprobed)`
//! (what `dedup` and `clusters` use), and three timings, each the best of
//! three runs: `find_all` (which scans when the plan's estimated work is
//! larger), the plan's table search alone (`find_all_in_table` over every
//! table: what `find_all` ran before it could scan) and a parallel
//! brute-force popcount over all pairs. Every answer is checked against the
//! brute force.

use std::time::{Duration, Instant};

use rayon::prelude::*;
use simhashdb::batch::{find_all, find_all_in_table};
use simhashdb::plan::{Budget, Plan};

/// `n` fingerprints: splitmix64 values, every fourth a near copy (1 to 20
/// bits flipped) of an earlier one.
fn fingerprints(n: usize) -> Vec<u64> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let mut fps: Vec<u64> = Vec::with_capacity(n);
    while fps.len() < n {
        let r = next();
        if fps.len() % 4 == 3 {
            let mut fp = fps[(r % fps.len() as u64) as usize];
            for _ in 0..=(r >> 32) % 20 {
                fp ^= 1 << (next() % 64);
            }
            fps.push(fp);
        } else {
            fps.push(r);
        }
    }
    fps
}

fn brute_force(fps: &[u64], k: u32) -> Vec<(usize, usize)> {
    (0..fps.len())
        .into_par_iter()
        .flat_map_iter(|i| {
            let a = fps[i];
            fps[i + 1..]
                .iter()
                .enumerate()
                .filter(move |&(_, &b)| (a ^ b).count_ones() <= k)
                .map(move |(d, _)| (i, i + 1 + d))
        })
        .collect()
}

/// The best of three runs of `f`, and its last answer.
fn best_of_three<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut answer = None;
    for _ in 0..3 {
        let start = Instant::now();
        let a = f();
        best = best.min(start.elapsed());
        answer = Some(a);
    }
    (best, answer.expect("three runs"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = match std::env::args().skip(1).collect::<Vec<_>>() {
        args if args.is_empty() => vec![8_000, 100_000],
        args => args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?,
    };
    println!(
        "| N | k | plan | pairs | `find_all` | tables alone | brute force | `find_all` / brute force |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        let fps = fingerprints(n);
        for k in [3u32, 6, 12, 16] {
            let plan = Plan::choose(n as u64, k, Budget::Unprobed)?;
            let (brute_time, want) = best_of_three(|| brute_force(&fps, k));
            let (find_time, got) = best_of_three(|| find_all(&fps, &plan));
            assert_eq!(got, want, "find_all, n = {n}, k = {k}");
            let (tables_time, mut by_tables) = best_of_three(|| {
                (0..plan.tables().len())
                    .flat_map(|t| find_all_in_table(&fps, &plan, t))
                    .collect::<Vec<_>>()
            });
            by_tables.sort_unstable();
            assert_eq!(by_tables, want, "tables, n = {n}, k = {k}");
            let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
            println!(
                "| {n} | {k} | {plan} | {} | {} | {} | {} | {:.2} |",
                want.len(),
                ms(find_time),
                ms(tables_time),
                ms(brute_time),
                find_time.as_secs_f64() / brute_time.as_secs_f64()
            );
        }
    }
    Ok(())
}
