//! The sorted-key table codec of segment files: space (bits per key),
//! encode and decode throughput, and range-query latency against a plain
//! sorted `Vec<u64>` searched with `partition_point` (the baseline, same run).
//!
//! `cargo bench --bench segment` first prints a space report for uniform
//! random keys at 2^20, 2^24 and 2^26 keys (one timed encode and full decode
//! each; set `SEGMENT_BENCH_MAX_LOG2=24` to skip the 2^26 case, which needs
//! about 1.5 GiB), including, on the same keys, the ideal size of the
//! top-set-bit encoding (the position of the XOR's top bit entropy-coded at
//! its Shannon entropy, a lower bound for a Huffman code) and the size
//! formula of Elias–Fano. Then criterion measures the timings.

use std::hint::black_box;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput};
use simhashdb::format::{DEFAULT_BLOCK_LEN, TableReader, TableWriter};

/// Distinct sorted xorshift64 values (fixed seed).
fn random_sorted(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    let mut v: Vec<u64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn encode(keys: &[u64], block_len: u32) -> Vec<u8> {
    let mut w = TableWriter::with_writer(Vec::with_capacity(keys.len() * 6), block_len).unwrap();
    for &k in keys {
        w.push(k).unwrap();
    }
    w.finish().unwrap()
}

/// Bits per key of the top-set-bit encoding with an ideal entropy coder and
/// the same block structure (a full first key and a 16-byte index entry per
/// block): each following key costs H(top bit position) + the bits below
/// its XOR's top bit.
fn top_bit_bits_per_key(keys: &[u64], block_len: usize) -> f64 {
    let mut histogram = [0u64; 65];
    let mut below = 0u64;
    let mut coded = 0u64;
    for block in keys.chunks(block_len) {
        for w in block.windows(2) {
            let x = w[0] ^ w[1];
            let top = 63 - x.leading_zeros();
            histogram[top as usize] += 1;
            below += u64::from(top);
            coded += 1;
        }
    }
    let entropy: f64 = histogram
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / coded as f64;
            -p * p.log2()
        })
        .sum();
    let blocks = keys.len().div_ceil(block_len) as f64;
    let bits = entropy * coded as f64 + below as f64 + blocks * (64.0 + 128.0);
    bits / keys.len() as f64
}

fn space_report() {
    let max_log2: u32 = std::env::var("SEGMENT_BENCH_MAX_LOG2")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(26);
    println!(
        "table space, uniform random keys, block length {DEFAULT_BLOCK_LEN} \
         (bits per key, all overheads included)"
    );
    println!(
        "{:>6} {:>12} {:>11} {:>11} {:>13} {:>12} {:>11} {:>11}",
        "keys", "bytes", "bits/key", "bytes/key", "top-bit (H)", "Elias-Fano", "encode", "decode"
    );
    for log2 in [20u32, 24, 26].into_iter().filter(|&l| l <= max_log2) {
        let keys = random_sorted(1 << log2, 0x5eed + u64::from(log2));
        let n = keys.len();
        let t = Instant::now();
        let bytes = encode(&keys, DEFAULT_BLOCK_LEN);
        let encode_ns = t.elapsed().as_nanos() as f64 / n as f64;
        let table = TableReader::new(&bytes).unwrap();
        let t = Instant::now();
        let mut sum = 0u64;
        for k in table.iter() {
            sum = sum.wrapping_add(k.unwrap());
        }
        black_box(sum);
        let decode_ns = t.elapsed().as_nanos() as f64 / n as f64;
        let bits = bytes.len() as f64 * 8.0 / n as f64;
        // Elias–Fano: 2 + ceil(log2(U / n)) bits per key, before any index.
        let ef = 2.0 + (64.0 - (n as f64).log2()).ceil();
        println!(
            "{:>6} {:>12} {:>11.2} {:>11.3} {:>13.2} {:>12.2} {:>8.1} ns {:>8.1} ns",
            format!("2^{log2}"),
            bytes.len(),
            bits,
            bits / 8.0,
            top_bit_bits_per_key(&keys, DEFAULT_BLOCK_LEN as usize),
            ef,
            encode_ns,
            decode_ns
        );
    }
    println!();
}

/// Random queries: the inclusive range of keys sharing a `prefix_bits`-bit
/// prefix with a random key.
fn prefix_queries(count: usize, prefix_bits: u32, seed: u64) -> Vec<(u64, u64)> {
    let mask = u64::MAX << (64 - prefix_bits);
    let mut s = seed;
    (0..count)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s & mask, s | !mask)
        })
        .collect()
}

fn vec_range(v: &[u64], lo: u64, hi: u64) -> u64 {
    let start = v.partition_point(|&k| k < lo);
    v[start..]
        .iter()
        .take_while(|&&k| k <= hi)
        .fold(0, |a, &k| a.wrapping_add(k))
}

fn table_range(t: &TableReader<'_>, lo: u64, hi: u64) -> u64 {
    t.range(lo, hi).fold(0, |a, k| a.wrapping_add(k.unwrap()))
}

fn bench_codec(c: &mut Criterion) {
    let keys = random_sorted(1 << 20, 1);
    let bytes = encode(&keys, DEFAULT_BLOCK_LEN);
    let mut group = c.benchmark_group("table_2^20");
    group.sample_size(10);
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function("encode", |b| {
        b.iter(|| encode(black_box(&keys), DEFAULT_BLOCK_LEN))
    });
    group.bench_function("decode_all", |b| {
        b.iter(|| {
            let t = TableReader::new(black_box(&bytes)).unwrap();
            t.iter().fold(0u64, |a, k| a.wrapping_add(k.unwrap()))
        })
    });
    group.bench_function("verify", |b| {
        b.iter(|| TableReader::new(black_box(&bytes)).unwrap().verify())
    });
    group.finish();
}

fn bench_ranges(c: &mut Criterion) {
    let keys = random_sorted(1 << 24, 2);
    let bytes = encode(&keys, DEFAULT_BLOCK_LEN);
    let table = TableReader::new(&bytes).unwrap();
    let mut group = c.benchmark_group("range_2^24");
    // 24-bit prefixes hold about 1 key each, 20-bit prefixes about 16.
    for prefix_bits in [24u32, 20] {
        let queries = prefix_queries(1 << 16, prefix_bits, 3 + u64::from(prefix_bits));
        let mask = queries.len() - 1;
        let mut i = 0;
        group.bench_function(BenchmarkId::new("table", prefix_bits), |b| {
            b.iter(|| {
                i = (i + 1) & mask;
                let (lo, hi) = queries[i];
                table_range(&table, lo, hi)
            })
        });
        let mut i = 0;
        group.bench_function(BenchmarkId::new("sorted_vec", prefix_bits), |b| {
            b.iter(|| {
                i = (i + 1) & mask;
                let (lo, hi) = queries[i];
                vec_range(&keys, lo, hi)
            })
        });
    }
    group.finish();

    // One whole block: from its first key to its last.
    let block = DEFAULT_BLOCK_LEN as usize;
    let blocks: Vec<(u64, u64)> = keys
        .chunks_exact(block)
        .step_by(97)
        .map(|c| (c[0], c[block - 1]))
        .collect();
    let data_bytes = bytes.len() - table.block_count() * 16 - 28;
    let block_bytes = vec![0xa5u8; data_bytes / table.block_count()];
    let mut group = c.benchmark_group("block_2^24");
    // The same block every time (in cache): the CPU cost of checking and
    // decoding 128 keys; then a different block each time (cache misses).
    let (first, last) = blocks[blocks.len() / 2];
    group.bench_function("decode_one_block_hot", |b| {
        b.iter(|| table_range(&table, black_box(first), black_box(last)))
    });
    let mut i = 0;
    group.bench_function("decode_one_block", |b| {
        b.iter(|| {
            i = (i + 1) % blocks.len();
            let (lo, hi) = blocks[i];
            table_range(&table, lo, hi)
        })
    });
    group.bench_function(
        format!("crc32_of_a_block_{}_bytes", block_bytes.len()),
        |b| b.iter(|| crc32fast::hash(black_box(&block_bytes))),
    );
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    space_report();
    bench_codec(&mut c);
    bench_ranges(&mut c);
    c.final_summary();
}
