//! `find_all` against a brute-force popcount scan, at distances from 3 to 16.
//!
//! `cargo run --release --example find_all_vs_scan -- [N ...]` (default: 8000 100000)
//!
//! For each N and k in 3, 6, 12, 16: N fingerprints (random, with every
//! fourth a near copy of an earlier one: 1 to 20 bits flipped, as planted
//! near-duplicates are), the plan `Plan::choose(N, k, Budget::Unprobed)`
//! (what `dedup` and `clusters` use), and three timings, each the best of
//! three runs (one for the tables alone, which take minutes at k = 16): `find_all` (which scans when the plan's estimated work is
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

/// The pairs within `k`, comparing every pair: a parallel loop over the
/// rows, each compared with every later fingerprint.
fn brute_force(fps: &[u64], k: u32) -> Vec<(usize, usize)> {
    let rows: Vec<Vec<(usize, usize)>> = (0..fps.len())
        .into_par_iter()
        .with_min_len(64)
        .map(|i| {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("popcnt") {
                // SAFETY: the processor has `popcnt` (checked just above).
                return unsafe { row_popcnt(fps, i, k) };
            }
            row(fps, i, k)
        })
        .collect();
    rows.concat()
}

/// [`row`] with the processor's population count instruction, as
/// `find_all`'s scan uses it: the baseline a scan is held to.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn row_popcnt(fps: &[u64], i: usize, k: u32) -> Vec<(usize, usize)> {
    row(fps, i, k)
}

/// The pairs `(i, j)`, `j > i`, within `k`.
#[inline(always)]
fn row(fps: &[u64], i: usize, k: u32) -> Vec<(usize, usize)> {
    let a = fps[i];
    let mut out = Vec::new();
    for (j, &b) in fps.iter().enumerate().skip(i + 1) {
        if (a ^ b).count_ones() <= k {
            out.push((i, j));
        }
    }
    out
}

/// CPU time of every thread of the process so far (Linux: the first field
/// of each thread's `schedstat`, in nanoseconds): the work done, whatever
/// else the machine runs.
fn cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
                .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0)
}

/// The best of `runs` runs of `f` (wall time, CPU time), and its last answer.
fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let (mut wall, mut cpu) = (Duration::MAX, Duration::MAX);
    let mut answer = None;
    for _ in 0..runs {
        let (start, cpu_start) = (Instant::now(), cpu_ns());
        let a = f();
        wall = wall.min(start.elapsed());
        cpu = cpu.min(Duration::from_nanos(cpu_ns().saturating_sub(cpu_start)));
        answer = Some(a);
    }
    (wall, cpu, answer.expect("at least one run"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let sizes: Vec<usize> = match std::env::args().skip(1).collect::<Vec<_>>() {
        args if args.is_empty() => vec![8_000, 100_000],
        args => args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?,
    };
    println!(
        "| N | k | plan | pairs | `find_all` wall / CPU | tables alone wall / CPU | brute force wall / CPU | `find_all` / brute force (CPU) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
    for &n in &sizes {
        let fps = fingerprints(n);
        for k in [3u32, 6, 12, 16] {
            let plan = Plan::choose(n as u64, k, Budget::Unprobed)?;
            let (brute_wall, brute_cpu, want) = best_of(3, || brute_force(&fps, k));
            let (find_wall, find_cpu, got) = best_of(3, || find_all(&fps, &plan));
            assert_eq!(got, want, "find_all, n = {n}, k = {k}");
            let (tables_wall, tables_cpu, mut by_tables) = best_of(1, || {
                (0..plan.tables().len())
                    .flat_map(|t| find_all_in_table(&fps, &plan, t))
                    .collect::<Vec<_>>()
            });
            by_tables.sort_unstable();
            assert_eq!(by_tables, want, "tables, n = {n}, k = {k}");
            println!(
                "| {n} | {k} | {plan} | {} | {} / {} ms | {} / {} ms | {} / {} ms | {:.2} |",
                want.len(),
                ms(find_wall),
                ms(find_cpu),
                ms(tables_wall),
                ms(tables_cpu),
                ms(brute_wall),
                ms(brute_cpu),
                find_cpu.as_secs_f64() / brute_cpu.as_secs_f64()
            );
        }
    }
    Ok(())
}
