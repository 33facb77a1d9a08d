//! A study of a table layout for faster searches (docs/BENCHMARKS.md,
//! "Small segments searched decoded"): the layout of the decoded copies
//! small segments now keep in memory (`Options::decoded_tables_up_to`,
//! turned off here), against the tables as the file holds them.
//!
//! ```text
//! cargo run --release --example table_layout_study -- N [QUERIES]
//! ```
//!
//! Builds an index of N random fingerprints (splitmix64), compacted to one
//! segment, and times `Index::query_batch` over QUERIES (default 1,000,000)
//! random fingerprints in batches of 1,000: the segment's tables (in the
//! plan the index chooses for a segment of N keys) as they are, sorted permuted keys Rice-coded in blocks (docs/FORMAT.md, "Table
//! blocks"), searched through their block index. Then it builds, in memory,
//! the same fingerprints in the layout studied and times the same queries:
//! per permuted table, a directory of `2^d + 1` key counts, one per value of
//! the key's top `d` bits, and the keys' other `64 - d` bits in 6 bytes each
//! (so `d >= 16`), in key order. A probe reads two directory entries and
//! scans the keys between them: no block index, no decoding, and every key
//! in the range is compared with one XOR and a popcount. It is run with
//! the two plans the index uses for segments at k = 3: 4 tables (16-bit
//! prefixes) and 10 tables (25- and 26-bit prefixes, under a directory of
//! at most `log2(N) - 2` bits).
//!
//! Run single-threaded (`RAYON_NUM_THREADS=1`) so that both sides use one
//! core. Both sides are checked against a brute-force scan first, on 500
//! queries near stored fingerprints (two bits flipped) and 500 random ones.

mod common;

use std::time::Instant;

use simhashdb::plan::{Budget, Plan};
use simhashdb::{Index, Options};

use common::splitmix64;

/// Bytes per key of the studied layout.
const KEY_BYTES: usize = 6;

/// One permuted table in the studied layout.
struct Bucketed {
    /// `dir[b]`: the number of keys whose top `bits` bits are below `b`.
    dir: Vec<u32>,
    /// The keys' low `64 - bits` bits, 6 bytes each, little-endian, in key
    /// order; 8 zero bytes after the last, so every key loads as a u64.
    low: Vec<u8>,
    bits: u32,
}

impl Bucketed {
    fn new(mut keys: Vec<u64>, bits: u32) -> Bucketed {
        assert!((16..=32).contains(&bits));
        keys.sort_unstable();
        keys.dedup();
        let mut dir = vec![0u32; (1 << bits) + 1];
        let mut low = Vec::with_capacity(keys.len() * KEY_BYTES + 8);
        for &key in &keys {
            dir[(key >> (64 - bits)) as usize + 1] += 1;
            low.extend_from_slice(&key.to_le_bytes()[..KEY_BYTES]);
        }
        low.extend_from_slice(&[0; 8]);
        for b in 1..dir.len() {
            dir[b] += dir[b - 1];
        }
        Bucketed { dir, low, bits }
    }

    fn bytes(&self) -> usize {
        self.dir.len() * 4 + self.low.len() - 8
    }

    /// The keys sharing `key`'s top bits, as positions.
    #[inline]
    fn bucket(&self, key: u64) -> (usize, usize) {
        let b = (key >> (64 - self.bits)) as usize;
        (self.dir[b] as usize, self.dir[b + 1] as usize)
    }

    /// The low `64 - bits` bits of the key at `i`.
    #[inline]
    fn low(&self, i: usize) -> u64 {
        let mut word = [0u8; 8];
        word.copy_from_slice(&self.low[i * KEY_BYTES..i * KEY_BYTES + 8]);
        u64::from_le_bytes(word) & ((1u64 << (64 - self.bits)) - 1)
    }
}

struct Layout {
    plan: Plan,
    tables: Vec<Bucketed>,
}

impl Layout {
    /// `plan`'s tables of `fps`, each with a directory of the top
    /// `min(prefix, log2(n) - 2)` bits (at least 16): at most about a byte
    /// per key, or 256 KiB.
    fn new(plan: Plan, fps: &[u64]) -> Layout {
        let log2 = 63 - (fps.len() as u64).max(1).leading_zeros();
        let tables = plan
            .tables()
            .iter()
            .map(|t| {
                let bits = t.prefix_bits().min(log2.saturating_sub(2)).clamp(16, 32);
                Bucketed::new(fps.iter().map(|&fp| t.permute(fp)).collect(), bits)
            })
            .collect();
        Layout { plan, tables }
    }

    fn bytes_per_key(&self, n: usize) -> f64 {
        let bytes: usize = self.tables.iter().map(Bucketed::bytes).sum();
        bytes as f64 / (n * self.tables.len()) as f64
    }

    /// For each query, the stored fingerprints within `k`, each once; the
    /// queries in groups of 16, each group's directory entries read before
    /// any range is scanned (the loads overlap, as the engine's pipeline
    /// makes its own overlap). Returns the candidates compared.
    fn search(&self, queries: &[u64], k: u32, mut found: impl FnMut(usize, u64)) -> usize {
        const GROUP: usize = 16;
        let tables = self.plan.tables();
        let mut candidates = 0;
        let mut ranges = vec![(0usize, 0usize, 0u64); GROUP * tables.len()];
        for (g, group) in queries.chunks(GROUP).enumerate() {
            for (j, &q) in group.iter().enumerate() {
                for (t, (table, layout)) in self.tables.iter().zip(tables).enumerate() {
                    let key = layout.permute(q);
                    let (lo, hi) = table.bucket(key);
                    ranges[j * tables.len() + t] = (lo, hi, key);
                }
            }
            for (j, &q) in group.iter().enumerate() {
                for (t, table) in self.tables.iter().enumerate() {
                    let (lo, hi, key) = ranges[j * tables.len() + t];
                    candidates += hi - lo;
                    let want = key & ((1u64 << (64 - table.bits)) - 1);
                    for i in lo..hi {
                        let diff_low = table.low(i) ^ want;
                        if diff_low.count_ones() <= k {
                            // Same top bits: the whole key's difference.
                            let stored = tables[t].unpermute((key ^ want) | table.low(i));
                            // A directory coarser than the prefix holds
                            // keys of other prefixes too: each match is
                            // reported by the first table whose prefix it
                            // shares, as the index reports it.
                            if tables[t].shares_prefix(stored ^ q)
                                && self.plan.first_table_sharing(t, stored ^ q)
                            {
                                found(g * GROUP + j, stored);
                            }
                        }
                    }
                }
            }
        }
        candidates
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("N [QUERIES]"))
        .collect();
    let n = *args.first().expect("N [QUERIES]") as usize;
    let q = args.get(1).copied().unwrap_or(1_000_000) as usize;
    let k = 3;
    let fps: Vec<u64> = (0..n as u64).map(splitmix64).collect();
    let random: Vec<u64> = (0..q as u64)
        .map(|i| splitmix64(i ^ (0xdead << 40)))
        .collect();
    // Near queries for the check: a stored fingerprint, two bits flipped.
    let near: Vec<u64> = (0..500u64)
        .map(|i| {
            let r = splitmix64(i ^ (0xbeef << 40));
            fps[(r % n as u64) as usize] ^ (1 << (r >> 58)) ^ (1 << ((r >> 52) & 63))
        })
        .chain((0..500u64).map(|i| splitmix64(i ^ (0xfeed << 40))))
        .collect();
    let brute: Vec<Vec<u64>> = near
        .iter()
        .map(|&q| {
            let mut m: Vec<u64> = fps
                .iter()
                .copied()
                .filter(|&fp| (fp ^ q).count_ones() <= k)
                .collect();
            m.sort_unstable();
            m.dedup();
            m
        })
        .collect();
    println!(
        "table layout study: {n} fingerprints, {q} random queries, k = {k}, {} thread(s) for the index",
        std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all".into())
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    // The segment's mapped tables, without the decoded copy the index
    // keeps of small segments (`Options::decoded_tables_up_to`): the copy
    // is this layout.
    let options = Options::default().decoded_tables_up_to(0);
    let index = Index::open(tmp.path().join("index"), options).expect("open");
    for (c, chunk) in fps.chunks(100_000).enumerate() {
        let docs = chunk
            .iter()
            .enumerate()
            .map(|(i, &fp)| ((c * 100_000 + i) as u64, fp, None::<String>));
        index.insert_batch(docs).expect("insert");
    }
    index.compact().expect("compact");
    let stats = index.stats();
    let engine_found: Vec<Vec<u64>> = index
        .query_batch(&near, k)
        .expect("query")
        .into_iter()
        .map(|m| {
            let mut fps: Vec<u64> = m.iter().map(|m| m.fingerprint).collect();
            fps.sort_unstable();
            fps.dedup();
            fps
        })
        .collect();
    let wrong = engine_found
        .iter()
        .zip(&brute)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        wrong, 0,
        "the index disagrees with brute force on {wrong} queries"
    );
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let mut matches = 0;
        for run in random.chunks(1000) {
            matches += index.query_batch(run, k).expect("query").len();
        }
        std::hint::black_box(matches);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "index, one segment ({} tables, {:.2} table bytes per key): {:.3} µs per query ({:.0} per second)",
        Plan::choose(n as u64, k, Budget::Unprobed)
            .expect("plan")
            .tables()
            .len(),
        stats.table_bytes_per_key,
        best * 1e6 / q as f64,
        q as f64 / best
    );
    drop(index);

    for plan in [Plan::new(4, k), Plan::new(5, k)] {
        let plan = plan.expect("plan");
        let tables = plan.tables().len();
        let layout = Layout::new(plan, &fps);
        let mut found = vec![Vec::new(); near.len()];
        layout.search(&near, k, |i, fp| found[i].push(fp));
        for f in &mut found {
            f.sort_unstable();
        }
        let wrong = found.iter().zip(&brute).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong, 0,
            "the studied layout ({}) disagrees with brute force on {wrong} queries",
            layout.plan
        );
        let mut best = f64::MAX;
        let mut candidates = 0;
        for _ in 0..3 {
            let start = Instant::now();
            let mut matches = 0;
            candidates = layout.search(&random, k, |_, _| matches += 1);
            std::hint::black_box(matches);
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "studied layout, {tables} tables, directory of {}-bit prefixes ({:.2} bytes per key): {:.3} µs per query ({:.0} per second), {:.1} keys compared per query",
            layout.tables[0].bits,
            layout.bytes_per_key(n),
            best * 1e6 / q as f64,
            q as f64 / best,
            candidates as f64 / q as f64
        );
    }
}
