//! Batch search: `find_all` against a brute-force scan, the dense case, and
//! single queries over in-memory permuted tables against a linear scan.
//!
//! `cargo bench --bench batch` runs every group and then prints the ratios
//! between each method and its brute-force baseline from the same run.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion, Throughput};
use rayon::prelude::*;
use simhashdb::batch::find_all;
use simhashdb::hamming;
use simhashdb::plan::Plan;
use simhashdb::search::PermutedTables;

/// Deterministic xorshift64 values.
fn random_fingerprints(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

/// All-pairs popcount scan on every core (find_all uses every core too).
fn brute_force_pairs(fps: &[u64], k: u32) -> usize {
    (0..fps.len())
        .into_par_iter()
        .map(|i| {
            fps[i + 1..]
                .iter()
                .filter(|&&b| hamming(fps[i], b) <= k)
                .count()
        })
        .sum()
}

fn bench_find_all(c: &mut Criterion) {
    let plan = Plan::new(6, 3).unwrap();
    let mut group = c.benchmark_group("find_all");
    group.sample_size(10);

    let million = random_fingerprints(1_000_000, 1);
    group.throughput(Throughput::Elements(million.len() as u64));
    group.bench_function("random_1M_b6_k3", |b| {
        b.iter(|| find_all(black_box(&million), &plan))
    });

    // Brute force is feasible only on a small set: compare both on 30,000.
    let small = random_fingerprints(30_000, 2);
    group.throughput(Throughput::Elements(small.len() as u64));
    group.bench_function("random_30k_b6_k3", |b| {
        b.iter(|| find_all(black_box(&small), &plan))
    });
    group.bench_function("brute_force_30k_k3", |b| {
        b.iter(|| brute_force_pairs(black_box(&small), 3))
    });

    // 20,000 fingerprints that differ only in their low 16 bits.
    let dense: Vec<u64> = random_fingerprints(20_000, 3)
        .into_iter()
        .map(|v| 0xdead_beef_0000_0000 | (v & 0xffff))
        .collect();
    group.throughput(Throughput::Elements(dense.len() as u64));
    group.bench_function("dense_20k_low16_b6_k3", |b| {
        b.iter(|| find_all(black_box(&dense), &plan))
    });
    group.bench_function("brute_force_dense_20k_k3", |b| {
        b.iter(|| brute_force_pairs(black_box(&dense), 3))
    });
    group.finish();
}

fn bench_query(c: &mut Criterion) {
    let mut group = c.benchmark_group("query");
    let fps = random_fingerprints(1_000_000, 4);
    let queries: Vec<u64> = random_fingerprints(1024, 5)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            if i % 2 == 0 {
                fps[i * 97] ^ (r & 0b111)
            } else {
                r
            }
        })
        .collect();
    for (name, plan) in [
        ("b4_k3", Plan::new(4, 3).unwrap()),
        ("b6_k3", Plan::new(6, 3).unwrap()),
    ] {
        let tables = PermutedTables::new(&fps, &plan);
        let mut q = queries.iter().cycle();
        group.bench_function(BenchmarkId::new("permuted_tables_1M", name), |b| {
            b.iter(|| tables.query(*q.next().unwrap(), 3).unwrap())
        });
    }
    let mut q = queries.iter().cycle();
    group.bench_function("brute_force_scan_1M", |b| {
        b.iter(|| {
            let query = *q.next().unwrap();
            fps.iter().filter(|&&f| hamming(f, query) <= 3).count()
        })
    });
    group.finish();
}

/// Mean time of a finished benchmark, read from criterion's estimates.
fn mean_ns(id: &str) -> Option<f64> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = target
        .join("criterion")
        .join(id)
        .join("new")
        .join("estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn format_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} µs", ns / 1e3)
    }
}

fn print_ratios() {
    println!("\nRatios against the brute-force baselines of this run:");
    for (what, fast, slow) in [
        (
            "find_all, 30k random",
            "find_all/random_30k_b6_k3",
            "find_all/brute_force_30k_k3",
        ),
        (
            "find_all, 20k dense",
            "find_all/dense_20k_low16_b6_k3",
            "find_all/brute_force_dense_20k_k3",
        ),
        (
            "query, 1M, 4 tables",
            "query/permuted_tables_1M/b4_k3",
            "query/brute_force_scan_1M",
        ),
        (
            "query, 1M, 20 tables",
            "query/permuted_tables_1M/b6_k3",
            "query/brute_force_scan_1M",
        ),
    ] {
        match (mean_ns(fast), mean_ns(slow)) {
            (Some(f), Some(s)) => println!(
                "  {what:<22} {:>12} vs {:>12}: {:>8.1}x faster",
                format_ns(f),
                format_ns(s),
                s / f
            ),
            _ => println!("  {what:<22} (not measured in this run)"),
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench_find_all(&mut c);
    bench_query(&mut c);
    c.final_summary();
    print_ratios();
}
