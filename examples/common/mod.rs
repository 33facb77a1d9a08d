//! Process figures for the benchmark harnesses (Linux `/proc`), their
//! random fingerprints and arguments, shared by the examples that
//! `mod common;` this folder (each uses some of them).
#![allow(dead_code)]

/// The splitmix64 mix: the harnesses' random fingerprints (`splitmix64(i)`
/// for document `i`), so that nothing has to be held to remember them.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The number after `name` on the command line, or `default` without one.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, not {v:?}"))
        })
}

/// User + system CPU seconds of this process so far (Linux).
pub fn cpu_seconds() -> f64 {
    cpu_seconds_of("self")
}

/// User + system CPU seconds of process `pid` (a number, or `self`) so far
/// (Linux).
pub fn cpu_seconds_of(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

pub fn written_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines().find_map(|l| {
                l.strip_prefix("wchar: ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(f64::NAN)
}

/// Inserts documents `ids` with xorshift64 fingerprints continuing from
/// `state`, in batches of 10,000 (the harnesses' workload), pushing how long
/// each `insert_batch` call took (in seconds) to `latencies`.
pub fn insert_xorshift_timed(
    index: &simhashdb::Index,
    state: &mut u64,
    ids: std::ops::Range<u64>,
    latencies: &mut Vec<f64>,
) -> simhashdb::Result<()> {
    let mut id = ids.start;
    while id < ids.end {
        let batch: Vec<(u64, u64, Option<String>)> = (id..ids.end.min(id + 10_000))
            .map(|i| {
                *state ^= *state << 13;
                *state ^= *state >> 7;
                *state ^= *state << 17;
                (i, *state, None)
            })
            .collect();
        id += batch.len() as u64;
        let start = std::time::Instant::now();
        if with_sketches() {
            // A 16-byte sketch per document (format version 4), derived
            // from the fingerprint: what an index of texts stores.
            index.insert_batch_sketched(batch.into_iter().map(|(i, fp, name)| {
                let mut bytes = [0u8; simhashdb::sketch::Sketch::BYTES];
                bytes[..8].copy_from_slice(&fp.to_le_bytes());
                bytes[8..].copy_from_slice(&fp.rotate_left(29).to_le_bytes());
                (
                    i,
                    fp,
                    Some(simhashdb::sketch::Sketch::from_bytes(bytes)),
                    name,
                )
            }))?;
        } else {
            index.insert_batch(batch)?;
        }
        latencies.push(start.elapsed().as_secs_f64());
    }
    Ok(())
}

/// `SKETCHES=1`: [`insert_xorshift_timed`] stores a sketch with every
/// document, as an index of texts does.
pub fn with_sketches() -> bool {
    std::env::var("SKETCHES").is_ok_and(|v| v == "1")
}

/// A xorshift64 stream from `s` (not 0).
pub fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// `index_bench`'s `n` fingerprints (`examples/first_queries_bench.rs`
/// replays its queries against the same index).
pub fn index_bench_fingerprints(n: usize) -> Vec<u64> {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    (0..n).map(|_| next()).collect()
}

/// `index_bench`'s seed of the queries timed after a reopen.
pub const INDEX_BENCH_REOPEN_SEED: u64 = 12345;

/// `count` queries from `seed`: even ones a fingerprint of `fps` with one
/// bit flipped, odd ones random.
pub fn near_and_random_queries(fps: &[u64], seed: u64, count: usize) -> Vec<u64> {
    let mut noise = xorshift(seed);
    (0..count)
        .map(|i| {
            let r = noise();
            if i % 2 == 0 {
                fps[(r % fps.len() as u64) as usize] ^ (1 << (r >> 58))
            } else {
                r
            }
        })
        .collect()
}
