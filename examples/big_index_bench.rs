//! An index larger than memory: ingest, then queries from a cold start.
//!
//! `cargo run --release --example big_index_bench -- build N DIR`
//! `cargo run --release --example big_index_bench -- query N DIR [Q]`
//!
//! `build` inserts N fingerprints (document `i` has fingerprint
//! `splitmix64(i)`, so nothing is held in memory to remember them) in
//! batches of 10,000 with the default options (merge thread on), times the
//! ingest to the last flush, then compacts the index to one segment.
//! `query` opens DIR and runs two passes of Q queries (default 20,000) at
//! k = 3, one thread: half a stored fingerprint with one bit flipped, half
//! random. For each pass it prints p50, p99 and mean latency and, per query,
//! the bytes this process read from storage (`/proc/self/io` `read_bytes`)
//! and its major page faults (`/proc/self/stat`), then the p99 of each
//! quarter of the pass (in the order the queries ran), and, from the query
//! thread's `/proc/thread-self/schedstat`, p50 and p99 of the latency less
//! the time the thread waited for a CPU (on a loaded machine, the part the
//! disk and the code set), its CPU time and how often it was switched in
//! per query, and by which query the open's prefault thread had ended
//! (looked for every 100 queries). The first queries
//! of the first pass are checked against a brute-force scan of the N
//! fingerprints.
//!
//! The memory the index may use is the machine's or, run in a control group
//! with a memory limit, the group's (its page cache counts against it):
//! docs/BENCHMARKS.md, "An index larger than memory", runs it in a cgroup
//! of a quarter of the machine, with the page cache dropped before `query`.

use std::time::Instant;

use simhashdb::{Index, Options, hamming};

fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Bytes this process has caused to be read from storage.
fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("read_bytes:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// Major page faults of this process (field 12 of `/proc/self/stat`).
fn major_faults() -> u64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name, which is in parentheses.
            let rest = &s[s.rfind(')')? + 2..];
            rest.split_whitespace().nth(9)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The calling thread's scheduler counters (`/proc/thread-self/schedstat`):
/// nanoseconds on a CPU, nanoseconds spent waiting for a CPU while
/// runnable, and the number of times it was switched in (after each sleep,
/// as for a disk read, or preemption). Zeros where the file is not there.
struct SchedStat(Option<std::fs::File>);

impl SchedStat {
    fn open() -> SchedStat {
        SchedStat(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }

    fn read(&mut self) -> [u64; 3] {
        use std::io::{Read, Seek};
        let mut counters = [0; 3];
        let Some(file) = self.0.as_mut() else {
            return counters;
        };
        let mut text = String::new();
        if file.rewind().is_err() || file.read_to_string(&mut text).is_err() {
            return counters;
        }
        for (counter, field) in counters.iter_mut().zip(text.split_whitespace()) {
            *counter = field.parse().unwrap_or(0);
        }
        counters
    }
}

/// Whether the index's prefault thread (`simhashdb-prefault`, which the
/// kernel names by its first 15 bytes) is running.
fn prefault_running() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| {
        tasks.flatten().any(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| "simhashdb-prefault".starts_with(name.trim_end()))
        })
    })
}

/// CPU seconds (user + system) of each of this process's threads, by name.
fn thread_cpu() -> String {
    let ticks = 100.0; // USER_HZ on Linux
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let name = &stat[open + 1..close];
            let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
            let cpu = |i: usize| {
                fields
                    .get(i)
                    .and_then(|f| f.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            out.push(format!("{name} {:.1}", (cpu(11) + cpu(12)) / ticks));
        }
    }
    out.join(", ")
}

fn build(n: u64, dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let index = Index::open(dir, Options::new())?;
    println!("plan: {}", index.plan());
    let start = Instant::now();
    let report_every: u64 = std::env::var("REPORT_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000_000);
    let mut next_report = report_every;
    for base in (0..n).step_by(10_000) {
        let end = (base + 10_000).min(n);
        index.insert_batch((base..end).map(|i| (i, splitmix(i), None::<String>)))?;
        if end >= next_report {
            println!(
                "  {end} in {:.1} s ({} segments; CPU s by thread: {})",
                start.elapsed().as_secs_f64(),
                index.stats().segments,
                thread_cpu()
            );
            next_report += report_every;
        }
    }
    index.flush()?;
    let ingest = start.elapsed().as_secs_f64();
    let stats = index.stats();
    println!(
        "ingest: {n} in {ingest:.1} s = {:.0} per second (batches of 10,000, merges on); {} segments, {:.2} GiB",
        n as f64 / ingest,
        stats.segments,
        stats.disk_bytes as f64 / (1u64 << 30) as f64
    );
    let start = Instant::now();
    index.compact()?;
    println!(
        "compact: {:.1} s; {:.2} GiB, {:.1} bytes per fingerprint",
        start.elapsed().as_secs_f64(),
        index.stats().disk_bytes as f64 / (1u64 << 30) as f64,
        index.stats().disk_bytes as f64 / n as f64
    );
    Ok(())
}

fn query(n: u64, dir: &std::path::Path, q: usize) -> Result<(), Box<dyn std::error::Error>> {
    let start = Instant::now();
    let index = Index::open(dir, Options::new())?;
    println!("open: {:.1} ms", start.elapsed().as_secs_f64() * 1e3);
    let mut seed = 0x5eed_u64;
    for pass in 1..=2 {
        let queries: Vec<u64> = (0..q)
            .map(|i| {
                seed += 1;
                let r = splitmix(seed ^ 0xabcd_ef01_2345_6789);
                if i % 2 == 0 {
                    splitmix(r % n) ^ (1 << (r >> 58))
                } else {
                    r
                }
            })
            .collect();
        let (bytes, faults) = (read_bytes(), major_faults());
        let mut times = Vec::with_capacity(q);
        // Each query's time less its waits for a CPU, its CPU time and its
        // switches.
        let mut sched = SchedStat::open();
        let (mut off_queue, mut cpu, mut switches) = (Vec::new(), 0u64, 0u64);
        let mut found = 0usize;
        // The first query (a multiple of 100) that found the open's
        // prefault thread gone, once it had been seen (a thread takes its
        // name once it runs).
        let (mut prefault_seen, mut prefault_gone) = (false, None);
        for (i, &fp) in queries.iter().enumerate() {
            if prefault_gone.is_none() && i % 100 == 0 {
                if prefault_running() {
                    prefault_seen = true;
                } else if prefault_seen {
                    prefault_gone = Some(i);
                }
            }
            let [run, delay, count] = sched.read();
            let t = Instant::now();
            found += index.query(fp, 3)?.len();
            let time = t.elapsed().as_secs_f64() * 1e6;
            let [run_after, delay_after, count_after] = sched.read();
            times.push(time);
            off_queue.push(time - delay_after.saturating_sub(delay) as f64 / 1e3);
            cpu += run_after.saturating_sub(run);
            switches += count_after.saturating_sub(count);
        }
        let (bytes, faults) = (read_bytes() - bytes, major_faults() - faults);
        // The tail by quarter of the pass, in the order the queries ran:
        // whether it is the first queries' (the open's reads still going on).
        let by_quarter = |times: &[f64]| -> String {
            times
                .chunks(q.div_ceil(4).max(1))
                .map(|quarter| {
                    let mut quarter = quarter.to_vec();
                    quarter.sort_by(f64::total_cmp);
                    format!("{:.1}", percentile(&quarter, 0.99))
                })
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let quarters = by_quarter(&times);
        let off_queue_quarters = by_quarter(&off_queue);
        off_queue.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / q as f64;
        times.sort_by(f64::total_cmp);
        println!(
            "pass {pass}: {q} queries, {found} matches: p50 {:.1} µs, p99 {:.1} µs, mean {mean:.1} µs, max {:.1} ms; per query {:.1} KiB read, {:.2} major faults",
            percentile(&times, 0.5),
            percentile(&times, 0.99),
            times[q - 1] / 1e3,
            bytes as f64 / q as f64 / 1024.0,
            faults as f64 / q as f64
        );
        println!("  p99 by quarter of the pass: {quarters} µs");
        println!(
            "  less the waits for a CPU: p50 {:.1} µs, p99 {:.1} µs (by quarter: {off_queue_quarters}); per query {:.1} µs on a CPU, switched in {:.2} times (after each sleep, as for a disk read, or a preemption)",
            percentile(&off_queue, 0.5),
            percentile(&off_queue, 0.99),
            cpu as f64 / q as f64 / 1e3,
            switches as f64 / q as f64
        );
        match (prefault_seen, prefault_gone) {
            _ if pass > 1 => {}
            (_, Some(i)) => println!("  the open's prefault thread had ended by query {i}"),
            (true, None) => println!("  the open's prefault thread still ran after the last query"),
            (false, _) => println!("  the open's prefault thread was not seen running"),
        }
        if pass == 1 {
            // Exactness: the first queries against a scan of every fingerprint.
            for &fp in queries.iter().take(4) {
                let mut want: Vec<u64> =
                    (0..n).filter(|&i| hamming(splitmix(i), fp) <= 3).collect();
                let mut got: Vec<u64> = index.query(fp, 3)?.iter().map(|m| m.id).collect();
                want.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, want, "index and brute force disagree on {fp:#x}");
            }
            println!("  the first 4 queries agree with a brute-force scan");
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: big_index_bench build N DIR | query N DIR [Q]";
    let (Some(mode), Some(n), Some(dir)) = (args.first(), args.get(1), args.get(2)) else {
        return Err(usage.into());
    };
    let n: u64 = n.parse()?;
    let dir = std::path::Path::new(dir);
    match mode.as_str() {
        "build" => build(n, dir),
        "query" => query(n, dir, args.get(3).map_or(Ok(20_000), |s| s.parse())?),
        _ => Err(usage.into()),
    }
}
