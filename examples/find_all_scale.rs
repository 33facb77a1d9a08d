//! Time and peak memory of `find_all` on N random fingerprints.
//!
//! `cargo run --release --example find_all_scale -- N [BLOCKS] [K] [LOW_BITS] [clusters]`
//! (defaults: blocks 6, k 3, LOW_BITS 64; `clusters` times `clusters` instead). With LOW_BITS below 64 the
//! fingerprints share their top bits and differ only in their low LOW_BITS
//! bits (a dense corpus). Peak memory is the process's high-water mark of
//! resident memory (VmHWM, Linux), read after the run. For N up to 300,000 a
//! parallel brute-force scan producing the same pairs is timed too.

use std::time::Instant;

use rayon::prelude::*;
use simhashdb::batch::{clusters, find_all};
use simhashdb::hamming;
use simhashdb::plan::Plan;

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `n` xorshift64 values that share every bit outside `low_mask`.
fn fingerprints(n: usize, low_mask: u64) -> Vec<u64> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (0x9e37_79b9_7f4a_7c15 & !low_mask) | (s & low_mask)
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let blocks: u32 = args.get(1).map_or(Ok(6), |s| s.parse())?;
    let k: u32 = args.get(2).map_or(Ok(3), |s| s.parse())?;
    let low_bits: u32 = args.get(3).map_or(Ok(64), |s| s.parse())?;
    let plan = Plan::new(blocks, k)?;
    let low_mask = u64::MAX.checked_shr(64 - low_bits.min(64)).unwrap_or(0);
    // `clusters` as a fifth argument times `clusters` instead of `find_all`.
    if args.get(4).map(String::as_str) == Some("clusters") {
        let fps = fingerprints(n, low_mask);
        let before = peak_rss_bytes().unwrap_or(0);
        let start = Instant::now();
        let groups = clusters(&fps, &plan);
        let elapsed = start.elapsed();
        let peak = peak_rss_bytes().unwrap_or(0);
        println!(
            "clusters: n = {n}, plan = {plan}: {:.3} s, {} clusters; peak resident {:.2} GiB ({:.1} bytes per fingerprint above the input)",
            elapsed.as_secs_f64(),
            groups.len(),
            peak as f64 / (1u64 << 30) as f64,
            peak.saturating_sub(before) as f64 / n as f64
        );
        return Ok(());
    }

    let fps = fingerprints(n, low_mask);
    let before = peak_rss_bytes().unwrap_or(0);
    let start = Instant::now();
    let pairs = find_all(&fps, &plan);
    let elapsed = start.elapsed();
    let peak = peak_rss_bytes().unwrap_or(0);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    println!(
        "n = {n}, plan = {plan}: {:.3} s, {} pairs, {:.0} ns per fingerprint",
        elapsed.as_secs_f64(),
        pairs.len(),
        elapsed.as_nanos() as f64 / n as f64
    );
    println!(
        "input {:.2} GiB; peak resident {:.2} GiB ({:.2} GiB before the search, {:.1} bytes per fingerprint above the input)",
        gib(n as u64 * 8),
        gib(peak),
        gib(before),
        (peak.saturating_sub(before)) as f64 / n as f64
    );
    if n <= 300_000 {
        let start = Instant::now();
        let brute: Vec<(usize, usize)> = (0..n)
            .into_par_iter()
            .flat_map_iter(|i| {
                let a = fps[i];
                fps[i + 1..]
                    .iter()
                    .enumerate()
                    .filter(move |&(_, &b)| hamming(a, b) <= k)
                    .map(move |(d, _)| (i, i + 1 + d))
            })
            .collect();
        let brute_time = start.elapsed();
        assert_eq!(brute, pairs, "find_all and brute force disagree");
        println!(
            "brute force: {:.3} s, same pairs; find_all is {:.1}x faster",
            brute_time.as_secs_f64(),
            brute_time.as_secs_f64() / elapsed.as_secs_f64()
        );
    }
    Ok(())
}
