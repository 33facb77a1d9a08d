//! Query latency and size of the persistent index under different plans:
//! the permuted plans of earlier releases against probed ones (multi-index
//! hashing), in the same run.
//!
//! `cargo run --release --example plan_bench -- N PLAN...`
//!
//! Each PLAN is `K:auto` (`Plan::auto`, the default budget), `K:unprobed`
//! (`Budget::Unprobed`: the plan earlier releases chose), `K:tables=T`
//! (`Budget::Space(T)`), `K:flat=B` (`Plan::new(B, K)`) or `K:probed=B/R`
//! (`Plan::probed(B, R, K)`). For each, in a fresh temporary directory: N
//! xorshift64 fingerprints (the same for every plan) inserted in batches of
//! 10,000 with the default options, the plan and `small_segment_plans` off,
//! compacted to one segment,
//! the index reopened, then 20,000 queries at distance K (half a stored
//! fingerprint with up to K random bits flipped, half random), one thread:
//! one untimed pass (warm page cache), then a timed one. Prints one Markdown
//! row per plan: tables, radius, probes per query, bytes per fingerprint of
//! the tables (the segment file) and of the whole index, query p50/p99/mean,
//! and the matches found (equal for every plan of one K: each is exact).
//! The directory is removed before the next plan, so the run needs the disk
//! of one index at a time.
// Options is set field by field, not by a struct expression, so that it can
// become #[non_exhaustive] without breaking this file.
#![allow(clippy::field_reassign_with_default)]

use std::time::Instant;

use simhashdb::plan::{Budget, Plan};
use simhashdb::{Index, Options};

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

fn parse_plan(spec: &str, n: u64) -> Result<Plan, Box<dyn std::error::Error>> {
    let (k, how) = spec.split_once(':').ok_or("a plan is K:HOW")?;
    let k: u32 = k.parse()?;
    let plan = match how.split_once('=') {
        None if how == "auto" => Plan::auto(n, k)?,
        None if how == "unprobed" => Plan::choose(n, k, Budget::Unprobed)?,
        Some(("tables", t)) => Plan::choose(n, k, Budget::Space(t.parse()?))?,
        Some(("flat", b)) => Plan::new(b.parse()?, k)?,
        Some(("probed", br)) => {
            let (b, r) = br.split_once('/').ok_or("probed=BLOCKS/RADIUS")?;
            Plan::probed(b.parse()?, r.parse()?, k)?
        }
        _ => return Err(format!("unknown plan {spec}").into()),
    };
    Ok(plan)
}

fn dir_bytes(dir: &std::path::Path, ext: Option<&str>) -> std::io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if ext.is_none_or(|x| path.extension().is_some_and(|e| e == x)) {
            total += std::fs::metadata(&path)?.len();
        }
    }
    Ok(total)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = args.first().ok_or("usage: plan_bench N PLAN...")?.parse()?;
    let specs = &args[1..];
    if specs.is_empty() {
        return Err("usage: plan_bench N PLAN... (e.g. 3:unprobed 3:auto)".into());
    }
    let fps: Vec<u64> = {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        (0..n).map(|_| next()).collect()
    };
    println!(
        "| k | plan | tables | radius | probes/query | table bytes/fp | index bytes/fp | build s | p50 µs | p99 µs | mean µs | matches |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for spec in specs {
        let plan = parse_plan(spec, n)?;
        let k = plan.k();
        let temp = tempfile::tempdir()?;
        let mut options = Options::default();
        options.k = k;
        options.plan = Some(plan.clone());
        // Every segment in the plan measured (small ones would get their own).
        options.small_segment_plans = false;
        let start = Instant::now();
        {
            let index = Index::open(temp.path(), options.clone())?;
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
        }
        let build = start.elapsed().as_secs_f64();
        let table_bytes = dir_bytes(temp.path(), Some("seg"))?;
        let index_bytes = dir_bytes(temp.path(), None)?;
        let index = Index::open(temp.path(), options)?;

        let mut next = xorshift(0x5eed ^ u64::from(k));
        let queries: Vec<u64> = (0..20_000)
            .map(|i| {
                if i % 2 == 0 {
                    let mut q = fps[(next() % n) as usize];
                    for _ in 0..next() % (u64::from(k) + 1) {
                        q ^= 1 << (next() % 64);
                    }
                    q
                } else {
                    next()
                }
            })
            .collect();
        let mut matches = 0usize;
        for &q in &queries {
            matches += index.query(q, k)?.len();
        }
        let mut times: Vec<f64> = Vec::with_capacity(queries.len());
        let mut timed_matches = 0usize;
        for &q in &queries {
            let t = Instant::now();
            timed_matches += index.query(q, k)?.len();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        assert_eq!(matches, timed_matches);
        let mean = times.iter().sum::<f64>() / times.len() as f64;
        times.sort_by(f64::total_cmp);
        println!(
            "| {k} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {matches} |",
            plan.shape(),
            plan.tables().len(),
            plan.radius(),
            plan.probes_per_query(),
            table_bytes as f64 / n as f64,
            index_bytes as f64 / n as f64,
            build,
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            mean,
        );
    }
    Ok(())
}
