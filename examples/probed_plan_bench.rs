//! The default plan at k = 6 against the 28-table plan, on indexes built
//! once and kept, so that two builds of the library can be alternated on
//! the same files (docs/BENCHMARKS.md, "Probed plans at k = 6: a table's
//! probes in one pass").
//!
//! `cargo run --release --example probed_plan_bench -- DIR [N] [QUERIES]`
//! (environment: `PLANS=auto,flat8` to choose the plans; `DECODED=KEYS`
//! for `Options::decoded_tables_up_to`, default the library's)
//!
//! For each plan, `DIR/<plan>-<N>` holds an index of N xorshift64
//! fingerprints (default 10,000,000; the same for every plan) inserted in
//! batches of 10,000 with the default options, the plan given and
//! `small_segment_plans` off, compacted to one segment; it is built when
//! the directory does not hold a finished one yet. "auto" is
//! `Plan::auto(N, 6)` (the default plan of a new index of texts at 10 M:
//! 4 tables probed at radius 1), "flat8" `Plan::new(8, 6)` (28 tables, one
//! probe each), "probed<M>r<R>" `Plan::probed(M, R, 6)` ("probed3r2": 3
//! tables probed at radius 2). The index is reopened, QUERIES queries (default 20,000;
//! half a stored fingerprint with 0..=6 random bits flipped, half random)
//! are made at k = 6 on one thread, one untimed pass (warm page cache),
//! then a timed one. 300 of them are first checked against a brute-force
//! scan of the N fingerprints (the same fingerprints, each once). Prints
//! one Markdown row per plan: tables, probes per query, table bytes per
//! fingerprint (the segment files), p50, p99 and mean, and the matches.
// Options is set field by field, not by a struct expression, so that it can
// become #[non_exhaustive] without breaking this file.
#![allow(clippy::field_reassign_with_default)]

use std::path::Path;
use std::time::Instant;

use simhashdb::plan::Plan;
use simhashdb::{Index, Options};

/// The distance every query asks for, and the plans are made for.
const K: u32 = 6;

fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn seg_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.extension().is_some_and(|e| e == "seg") {
            total += std::fs::metadata(&path)?.len();
        }
    }
    Ok(total)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = Path::new(
        args.first()
            .ok_or("usage: probed_plan_bench DIR [N] [QUERIES]")?,
    );
    let n: u64 = args.get(1).map_or(Ok(10_000_000), |s| s.parse())?;
    let count: usize = args.get(2).map_or(Ok(20_000), |s| s.parse())?;
    let plans = std::env::var("PLANS").unwrap_or_else(|_| "auto,flat8".into());
    let decoded: Option<u64> = std::env::var("DECODED")
        .ok()
        .map(|v| v.parse())
        .transpose()?;
    let fps: Vec<u64> = {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        (0..n).map(|_| next()).collect()
    };
    let mut next = xorshift(0x5eed ^ u64::from(K));
    let queries: Vec<u64> = (0..count)
        .map(|i| {
            if i % 2 == 0 {
                let mut q = fps[(next() % n) as usize];
                for _ in 0..next() % (u64::from(K) + 1) {
                    q ^= 1 << (next() % 64);
                }
                q
            } else {
                next()
            }
        })
        .collect();
    println!(
        "| plan | tables | probes/query | table bytes/fp | p50 µs | p99 µs | mean µs | matches |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for name in plans.split(',') {
        let plan = match name {
            "auto" => Plan::auto(n, K)?,
            "flat8" => Plan::new(8, K)?,
            other => match other.strip_prefix("probed").and_then(|r| r.split_once('r')) {
                Some((blocks, radius)) => Plan::probed(blocks.parse()?, radius.parse()?, K)?,
                None => {
                    return Err(format!("unknown plan {other} (auto, flat8, probed<M>r<R>)").into());
                }
            },
        };
        let dir = root.join(format!("{name}-{n}"));
        let mut options = Options::default();
        options.k = K;
        options.plan = Some(plan.clone());
        options.small_segment_plans = false;
        if let Some(keys) = decoded {
            options.decoded_tables_up_to = keys;
        }
        let done = dir.join("BUILT");
        if !done.exists() {
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            let start = Instant::now();
            let index = Index::open(&dir, options.clone())?;
            for (c, chunk) in fps.chunks(10_000).enumerate() {
                let base = (c * 10_000) as u64;
                index.insert_batch(
                    chunk
                        .iter()
                        .enumerate()
                        .map(|(i, &fp)| (base + i as u64, fp, None::<String>)),
                )?;
            }
            index.compact()?;
            drop(index);
            std::fs::write(&done, b"")?;
            eprintln!(
                "built {} in {:.1} s",
                dir.display(),
                start.elapsed().as_secs_f64()
            );
        }
        let table_bytes = seg_bytes(&dir)?;
        let index = Index::open(&dir, options)?;
        // Exact answers first: a sample against a scan of every fingerprint.
        for &q in queries.iter().take(300) {
            let mut got: Vec<u64> = index.query(q, K)?.iter().map(|m| m.fingerprint).collect();
            got.sort_unstable();
            let mut want: Vec<u64> = fps
                .iter()
                .copied()
                .filter(|&f| (f ^ q).count_ones() <= K)
                .collect();
            want.sort_unstable();
            want.dedup();
            assert_eq!(got, want, "plan {plan}, query {q:#x}");
        }
        let mut matches = 0usize;
        for &q in &queries {
            matches += index.query(q, K)?.len();
        }
        let mut times: Vec<f64> = Vec::with_capacity(queries.len());
        let mut timed_matches = 0usize;
        for &q in &queries {
            let t = Instant::now();
            timed_matches += index.query(q, K)?.len();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        assert_eq!(matches, timed_matches);
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        times.sort_by(f64::total_cmp);
        println!(
            "| {name}: {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {matches} |",
            plan.shape(),
            plan.tables().len(),
            plan.probes_per_query(),
            table_bytes as f64 / n as f64,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            mean,
        );
    }
    Ok(())
}
