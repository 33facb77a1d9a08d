//! All near-duplicate pairs, and their clusters, within one set of fingerprints.
//!
//! [`find_all`] walks the tables of a [`Plan`] one at a time. For each table it
//! permutes every fingerprint, groups the permuted keys by their leading bits
//! (a parallel counting pass and scatter into buckets; a bucket is sorted only
//! if a hash check finds two keys sharing a prefix in it), and compares
//! fingerprints only inside runs that share the table's whole prefix. A pair is
//! reported by the first table whose prefix it shares
//! ([`Plan::first_table_sharing`]), so no pair is reported twice and no set of
//! seen pairs is needed.
//!
//! A large run (many fingerprints sharing a prefix, as when a corpus holds
//! thousands of near-identical pages) is not compared pair by pair. The run's
//! members differ only in the bits where they vary; a pair within `k` differs
//! in at most `k` of them, so splitting those bits into `k + 1` parts leaves one
//! part on which the pair agrees. The run is grouped on each part in turn and
//! each group is searched the same way, a pair being reported under the first
//! part it agrees on. A group that varies in few bits (at most 20) is instead
//! indexed by those bits and each member's neighbours within `k` looked up
//! directly. Work grows with `n log n` plus the size of the answer, not with
//! the square of a run.
//!
//! The plan must not probe ([`Plan::radius`] 0): sorting a table groups
//! fingerprints by their exact prefix, and a probed plan's pairs may differ in
//! their prefixes. [`Budget::Unprobed`](crate::plan::Budget::Unprobed)
//! chooses among the plans that suit; a probed plan is refused with a panic
//! that says so.
//!
//! Memory: the input, plus one permuted copy of it (8 bytes per fingerprint:
//! a key's prefix packed with its position) while a table is processed, plus
//! the pairs found.

use rayon::prelude::*;

use crate::plan::{Plan, Table};

/// Runs up to this size are compared pair by pair.
const BRUTE_FORCE_RUN: usize = 64;

/// Groups varying in at most this many bits may be searched by enumerating
/// neighbourhoods in a table of `2^bits` slots.
const MAX_ENUMERATED_BITS: u32 = 20;

/// Groups of at least this size search their parts in parallel.
const PARALLEL_GROUP: usize = 4096;

/// A pair of input positions `(i, j)`, `i < j`, as `i << 32 | j`: half the
/// size of a pair of `usize`, and sorts in the same order.
type Pair = u64;

/// A permuted key's leading bits (left-aligned) packed with the position of
/// its fingerprint in the input (in the low bits): 8 bytes per fingerprint.
type Entry = u64;

/// Every pair of positions `(i, j)`, `i < j`, whose fingerprints are within
/// the plan's distance `k`, sorted. Identical fingerprints at different
/// positions are a pair.
///
/// # Panics
///
/// If `fingerprints` holds more than `u32::MAX` values, or `plan` probes
/// (see the [module docs](self)).
pub fn find_all(fingerprints: &[u64], plan: &Plan) -> Vec<(usize, usize)> {
    assert_unprobed(plan);
    assert!(
        u32::try_from(fingerprints.len()).is_ok(),
        "find_all handles at most u32::MAX fingerprints"
    );
    if fingerprints.len() < 2 {
        return Vec::new();
    }
    let found: Vec<Vec<Pair>> = match choose_search(fingerprints.len(), plan) {
        Search::Scan => scan(fingerprints, plan.k()),
        Search::Tables => {
            // Each table's parallel tasks hand back their own vectors of pairs.
            let mut found = Vec::new();
            let mut entries: Vec<Entry> = vec![0; fingerprints.len()];
            for t in 0..plan.tables().len() {
                let search = TableSearch {
                    plan,
                    t,
                    table: &plan.tables()[t],
                    fingerprints,
                };
                found.extend(search.run(&mut entries));
            }
            found
        }
    };
    let mut pairs: Vec<Pair> = Vec::with_capacity(found.iter().map(Vec::len).sum());
    for part in found {
        pairs.extend_from_slice(&part);
    }
    radix_sort(&mut pairs);
    pairs
        .into_iter()
        .map(|p| ((p >> 32) as usize, (p & u64::from(u32::MAX)) as usize))
        .collect()
}

/// The pairs of [`find_all`] that table `t` of `plan` reports: those within
/// `k` that share table `t`'s prefix and no earlier table's
/// ([`Plan::first_table_sharing`]), sorted. [`find_all`]'s answer is the
/// union of these over the tables, without overlap, so a job that partitions
/// the fingerprints by (table, leading bits of the permuted fingerprint), as
/// a cluster does, searches each part with this and needs no global
/// de-duplication: a part must hold every fingerprint sharing its prefix.
///
/// # Panics
///
/// If `t` is not a table of `plan`, `fingerprints` holds more than
/// `u32::MAX` values, or `plan` probes.
pub fn find_all_in_table(fingerprints: &[u64], plan: &Plan, t: usize) -> Vec<(usize, usize)> {
    assert_unprobed(plan);
    assert!(t < plan.tables().len(), "the plan has no table {t}");
    assert!(
        u32::try_from(fingerprints.len()).is_ok(),
        "find_all_in_table handles at most u32::MAX fingerprints"
    );
    if fingerprints.len() < 2 {
        return Vec::new();
    }
    let mut entries: Vec<Entry> = vec![0; fingerprints.len()];
    let search = TableSearch {
        plan,
        t,
        table: &plan.tables()[t],
        fingerprints,
    };
    let mut pairs: Vec<Pair> = search.run(&mut entries).concat();
    radix_sort(&mut pairs);
    pairs
        .into_iter()
        .map(|p| ((p >> 32) as usize, (p & u64::from(u32::MAX)) as usize))
        .collect()
}

/// Connected components (of two or more positions) of the graph whose edges
/// are the pairs within the plan's distance `k`. Each cluster lists its
/// positions in ascending order; clusters are ordered by their first position.
///
/// Identical fingerprints are joined directly, so a set with many exact
/// duplicates does not enumerate their pairs.
///
/// # Panics
///
/// If `fingerprints` holds more than `u32::MAX` values, or `plan` probes.
pub fn clusters(fingerprints: &[u64], plan: &Plan) -> Vec<Vec<usize>> {
    assert_unprobed(plan);
    let n =
        u32::try_from(fingerprints.len()).expect("clusters handles at most u32::MAX fingerprints");
    let mut sets = UnionFind::new(n);
    // One representative position per distinct value.
    let mut distinct: Vec<u64> = Vec::new();
    let mut representative: Vec<u32> = Vec::new();
    {
        // Sorted (value, position) pairs: sequential reads, unlike sorting
        // positions by looking their values up.
        let mut order: Vec<(u64, u32)> = fingerprints.iter().copied().zip(0..n).collect();
        order.par_sort_unstable();
        for (m, &(fp, i)) in order.iter().enumerate() {
            match m.checked_sub(1).map(|p| order[p]) {
                Some((previous_fp, p)) if previous_fp == fp => sets.union(p, i),
                _ => {
                    distinct.push(fp);
                    representative.push(i);
                }
            }
        }
    }
    for (a, b) in find_all(&distinct, plan) {
        sets.union(representative[a], representative[b]);
    }
    sets.components()
}

/// How [`find_all`] searches a set of fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// Through the plan's permuted tables.
    Tables,
    /// By comparing every pair ([`scan`]).
    Scan,
}

/// Work of placing one fingerprint in one table (permuting it, scattering
/// it into its bucket, sorting the bucket), in pair comparisons of [`scan`]
/// (measured: about 23 ns against 0.25 ns, docs/BENCHMARKS.md).
const TABLE_ENTRY_COST: f64 = 90.0;

/// Work of one candidate pair met in a table's run, in pair comparisons of
/// [`scan`] (measured: 2.4 to 9 ns, as runs are split and searched again).
const CANDIDATE_COST: f64 = 10.0;

/// The search [`find_all`] runs for `n` fingerprints: the plan's tables,
/// unless their estimated work (each fingerprint placed in every table, and
/// the expected candidate pairs of [`Plan::cost`] compared) exceeds that of
/// comparing all `n (n - 1) / 2` pairs. At a large `k` the plan's prefixes
/// are short and nearly every pair is a candidate in some table: the scan
/// is then the faster search (docs/BENCHMARKS.md, "find_all against a
/// scan").
fn choose_search(n: usize, plan: &Plan) -> Search {
    let n_f = n as f64;
    let cost = plan.cost(n as u64);
    let tables = cost.tables as f64 * n_f * TABLE_ENTRY_COST
        + n_f * cost.expected_candidates / 2.0 * CANDIDATE_COST;
    let scan = n_f * (n_f - 1.0) / 2.0;
    if scan <= tables {
        Search::Scan
    } else {
        Search::Tables
    }
}

/// Rows of one block of [`scan`] (one parallel task).
const SCAN_ROWS: usize = 64;

/// Fingerprints of one tile of [`scan_block`] (32 KiB).
const SCAN_COLUMNS: usize = 4096;

/// Fingerprints tested at once by [`scan_block`].
const SCAN_CHUNK: usize = 16;

/// Every pair within `k`, by comparing all pairs: the fingerprints in
/// blocks of [`SCAN_ROWS`], each block compared with itself and every later
/// fingerprint, blocks in parallel. Each block's pairs come back sorted,
/// blocks in order.
fn scan(fingerprints: &[u64], k: u32) -> Vec<Vec<Pair>> {
    let n = fingerprints.len();
    #[cfg(target_arch = "x86_64")]
    let compiled: Option<CompiledBlock> = if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("popcnt")
    {
        Some(scan_block_avx2)
    } else if std::arch::is_x86_feature_detected!("popcnt") {
        Some(scan_block_popcnt)
    } else {
        None
    };
    #[cfg(not(target_arch = "x86_64"))]
    let compiled: Option<CompiledBlock> = None;
    let block = |r0: usize| match compiled {
        // SAFETY: each of these requires instructions the processor has
        // (checked above). One of the crate's four `unsafe` blocks
        // (docs/ARCHITECTURE.md).
        Some(f) => unsafe { f(fingerprints, r0, k) },
        None => scan_block(fingerprints, r0, k),
    };
    (0..n.div_ceil(SCAN_ROWS))
        .into_par_iter()
        .map(|b| block(b * SCAN_ROWS))
        .filter(|pairs| !pairs.is_empty())
        .collect()
}

/// [`scan_block`] compiled for instructions the processor may lack.
type CompiledBlock = unsafe fn(&[u64], usize, u32) -> Vec<Pair>;

/// [`scan_block`] compiled with the processor's population count
/// instruction: the baseline x86-64 target has none, and counts the bits of
/// an XOR with a dozen instructions (the scan is 3 to 5 times slower).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn scan_block_popcnt(fingerprints: &[u64], r0: usize, k: u32) -> Vec<Pair> {
    scan_block(fingerprints, r0, k)
}

/// [`scan_block`] compiled for AVX2: the test of a chunk of
/// [`SCAN_CHUNK`] fingerprints counts their bits four at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
fn scan_block_avx2(fingerprints: &[u64], r0: usize, k: u32) -> Vec<Pair> {
    scan_block(fingerprints, r0, k)
}

/// The pairs within `k` of the block of [`SCAN_ROWS`] rows from `r0`: among
/// its rows, and between its rows and every later fingerprint, sorted. The
/// later fingerprints are taken in tiles of [`SCAN_COLUMNS`], each compared
/// with every row of the block while it is in L1.
#[inline(always)]
fn scan_block(fingerprints: &[u64], r0: usize, k: u32) -> Vec<Pair> {
    let n = fingerprints.len();
    let r1 = (r0 + SCAN_ROWS).min(n);
    let mut pairs = Vec::new();
    for c0 in (r0..n).step_by(SCAN_COLUMNS) {
        let c1 = (c0 + SCAN_COLUMNS).min(n);
        for (i, &a) in fingerprints.iter().enumerate().take(r1).skip(r0) {
            let from = c0.max(i + 1);
            let Some(tile) = fingerprints.get(from..c1) else {
                continue;
            };
            // A chunk is tested as one (a reduction without branches, which
            // vectorizes); the rare chunk with a pair is then gone through.
            let mut chunks = tile.chunks_exact(SCAN_CHUNK);
            let mut at = from;
            for chunk in chunks.by_ref() {
                let mut near = false;
                for &b in chunk {
                    near |= (a ^ b).count_ones() <= k;
                }
                if near {
                    for (d, &b) in chunk.iter().enumerate() {
                        if (a ^ b).count_ones() <= k {
                            pairs.push(pair(i, at + d));
                        }
                    }
                }
                at += SCAN_CHUNK;
            }
            for (d, &b) in chunks.remainder().iter().enumerate() {
                if (a ^ b).count_ones() <= k {
                    pairs.push(pair(i, at + d));
                }
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

/// The pair of positions `i < j`, packed.
fn pair(i: usize, j: usize) -> Pair {
    (i as u64) << 32 | j as u64
}

/// Refuses a probed plan, naming the way to a plan that suits.
fn assert_unprobed(plan: &Plan) {
    assert!(
        plan.radius() == 0,
        "batch search cannot use the probed plan ({plan}): it groups each table by exact \
         prefix, so it needs a plan without probing; choose one with \
         Plan::choose(n, k, Budget::Unprobed) or Plan::new(blocks, k)"
    );
}

/// The search of one table.
struct TableSearch<'a> {
    plan: &'a Plan,
    t: usize,
    table: &'a Table,
    fingerprints: &'a [u64],
}

impl TableSearch<'_> {
    /// Fills `entries` with this table's packed keys, grouped by bucket within
    /// each input chunk, and
    /// returns the pairs this table reports.
    fn run(&self, entries: &mut [Entry]) -> Vec<Vec<Pair>> {
        let n = self.fingerprints.len();
        // Positions take the low bits; the key keeps as much of its prefix as
        // fits above them. A shortened prefix only makes runs coarser: leaves
        // still check that a pair shares the table's whole prefix.
        let position_bits = (usize::BITS - (n - 1).leading_zeros()).max(1);
        let keep = self.table.prefix_bits().min(64 - position_bits);
        let keep_mask = u64::MAX << (64 - keep);
        let pack = |fp: u64, i: usize| (self.table.permute(fp) & keep_mask) | i as u64;
        // About 256 entries per bucket, at most 2^16 buckets, never finer than the kept prefix.
        let bucket_bits = (usize::BITS - n.leading_zeros())
            .saturating_sub(8)
            .clamp(1, 16)
            .min(keep);
        let shift = 64 - bucket_bits;
        let buckets = 1usize << bucket_bits;
        let chunk_len = n.div_ceil(rayon::current_num_threads().max(1));

        // Each input chunk sorts its packed keys into buckets inside its own
        // region of `entries`; `starts[c][b]..starts[c][b + 1]` is bucket `b`
        // of chunk `c`.
        let starts: Vec<Vec<u32>> = self
            .fingerprints
            .par_chunks(chunk_len)
            .zip(entries.par_chunks_mut(chunk_len))
            .enumerate()
            .map(|(c, (chunk, region))| {
                let mut starts = vec![0u32; buckets + 1];
                for &fp in chunk {
                    starts[(self.table.permute(fp) >> shift) as usize + 1] += 1;
                }
                for b in 0..buckets {
                    starts[b + 1] += starts[b];
                }
                let mut next = starts.clone();
                for (i, &fp) in chunk.iter().enumerate() {
                    let entry = pack(fp, c * chunk_len + i);
                    let slot = &mut next[(entry >> shift) as usize];
                    region[*slot as usize] = entry;
                    *slot += 1;
                }
                starts
            })
            .collect();

        // Gather each bucket from every chunk, sort it, and search its runs of
        // equal (kept) prefix.
        let regions: Vec<&[Entry]> = entries.chunks(chunk_len).collect();
        (0..buckets)
            .into_par_iter()
            .with_min_len(64)
            .fold(
                || (Vec::new(), Vec::new(), Vec::new()),
                |(mut scratch, mut seen, mut pairs), b| {
                    scratch.clear();
                    for (region, starts) in regions.iter().zip(&starts) {
                        scratch
                            .extend_from_slice(&region[starts[b] as usize..starts[b + 1] as usize]);
                    }
                    if has_equal_prefixes(&scratch, keep_mask, &mut seen) {
                        self.search_bucket(&mut scratch, keep_mask, &mut pairs);
                    }
                    (scratch, seen, pairs)
                },
            )
            .map(|(_, _, pairs)| pairs)
            .filter(|pairs| !pairs.is_empty())
            .collect()
    }

    fn search_bucket(&self, bucket: &mut [Entry], keep_mask: u64, pairs: &mut Vec<Pair>) {
        if bucket.len() < 2 {
            return;
        }
        bucket.sort_unstable();
        let mut start = 0;
        for i in 1..=bucket.len() {
            if i < bucket.len() && (bucket[i] ^ bucket[i - 1]) & keep_mask == 0 {
                continue;
            }
            if i - start >= 2 {
                let mut items: Vec<(u64, u32)> = bucket[start..i]
                    .iter()
                    .map(|&e| {
                        let p = (e & !keep_mask) as usize;
                        (self.fingerprints[p], p as u32)
                    })
                    .collect();
                self.search_group(&mut items, &mut Vec::new(), pairs);
            }
            start = i;
        }
    }

    /// Reports the pairs within `items` (fingerprint, position) that are within
    /// `k`, share this table's prefix and no earlier table's, and agree on none
    /// of `exclusions`.
    fn search_group(
        &self,
        items: &mut [(u64, u32)],
        exclusions: &mut Vec<u64>,
        pairs: &mut Vec<Pair>,
    ) {
        let k = self.plan.k();
        let first = items[0].0;
        let varying = items.iter().fold(0u64, |acc, &(fp, _)| acc | (fp ^ first));
        // Every pair here agrees outside `varying`: when that covers an earlier
        // table's prefix or an excluded part, all of them are reported elsewhere.
        if !self.plan.first_table_sharing(self.t, varying)
            || exclusions.iter().any(|&m| varying & m == 0)
        {
            return;
        }
        if items.len() <= BRUTE_FORCE_RUN || varying.count_ones() <= k {
            for (n, &(a, i)) in items.iter().enumerate() {
                for &(b, j) in &items[n + 1..] {
                    if (a ^ b).count_ones() <= k {
                        self.report(a, i, b, j, exclusions, pairs);
                    }
                }
            }
            return;
        }
        let bits = varying.count_ones();
        if bits <= MAX_ENUMERATED_BITS && neighbourhood(bits, k) * 4 <= items.len() as u64 {
            self.search_neighbourhoods(items, varying, exclusions, pairs);
            return;
        }
        let parts = split_bits(varying, k + 1);
        if items.len() >= PARALLEL_GROUP {
            // A large group (a dense run): search its parts on all cores,
            // each on its own copy of the group.
            let found: Vec<Vec<Pair>> = (0..parts.len())
                .into_par_iter()
                .map(|j| {
                    let mut own_items = items.to_vec();
                    let mut own_exclusions = exclusions.clone();
                    own_exclusions.extend_from_slice(&parts[..j]);
                    let mut own_pairs = Vec::new();
                    self.search_part(
                        &mut own_items,
                        parts[j],
                        &mut own_exclusions,
                        &mut own_pairs,
                    );
                    own_pairs
                })
                .collect();
            pairs.extend(found.into_iter().flatten());
            return;
        }
        let depth = exclusions.len();
        for (j, &part) in parts.iter().enumerate() {
            if j > 0 {
                exclusions.push(parts[j - 1]);
            }
            self.search_part(items, part, exclusions, pairs);
        }
        exclusions.truncate(depth);
    }

    /// Reports the pair `(i, j)` of fingerprints `a`, `b` (already known to
    /// be within `k`) if this table and no exclusion claims it.
    #[inline]
    fn report(&self, a: u64, i: u32, b: u64, j: u32, exclusions: &[u64], pairs: &mut Vec<Pair>) {
        let diff = a ^ b;
        if self.table.shares_prefix(diff)
            && self.plan.first_table_sharing(self.t, diff)
            && !exclusions.iter().any(|&m| diff & m == 0)
        {
            pairs.push(u64::from(i.min(j)) << 32 | u64::from(i.max(j)));
        }
    }

    /// Searches a group that is dense in the few bits where it varies: each
    /// member's varying bits index a table of `2^bits` slots, and each
    /// occupied slot looks up its neighbours within `k` flips directly.
    fn search_neighbourhoods(
        &self,
        items: &[(u64, u32)],
        varying: u64,
        exclusions: &[u64],
        pairs: &mut Vec<Pair>,
    ) {
        let k = self.plan.k();
        let positions: Vec<u32> = (0..64).filter(|b| varying >> b & 1 == 1).collect();
        let code = |fp: u64| {
            positions
                .iter()
                .enumerate()
                .fold(0usize, |acc, (i, &b)| acc | ((fp >> b & 1) as usize) << i)
        };
        let slots = 1usize << positions.len();
        let mut starts = vec![0u32; slots + 1];
        for &(fp, _) in items {
            starts[code(fp) + 1] += 1;
        }
        for s in 0..slots {
            starts[s + 1] += starts[s];
        }
        let mut by_code = vec![(0u64, 0u32); items.len()];
        let mut next = starts.clone();
        for &item in items {
            let slot = &mut next[code(item.0)];
            by_code[*slot as usize] = item;
            *slot += 1;
        }
        let flips: Vec<usize> = (1..slots).filter(|f| f.count_ones() <= k).collect();
        let members = |s: usize| &by_code[starts[s] as usize..starts[s + 1] as usize];
        let found = (0..slots)
            .into_par_iter()
            .with_min_len(1024)
            .fold(Vec::new, |mut found, x| {
                let here = members(x);
                for (n, &(a, i)) in here.iter().enumerate() {
                    for &(b, j) in &here[n + 1..] {
                        self.report(a, i, b, j, exclusions, &mut found);
                    }
                }
                if !here.is_empty() {
                    for &f in &flips {
                        let y = x ^ f;
                        if y > x {
                            for &(a, i) in here {
                                for &(b, j) in members(y) {
                                    self.report(a, i, b, j, exclusions, &mut found);
                                }
                            }
                        }
                    }
                }
                found
            })
            .collect::<Vec<Vec<Pair>>>();
        for part in found {
            pairs.extend_from_slice(&part);
        }
    }

    /// Groups `items` by their bits in `part` and searches each group.
    fn search_part(
        &self,
        items: &mut [(u64, u32)],
        part: u64,
        exclusions: &mut Vec<u64>,
        pairs: &mut Vec<Pair>,
    ) {
        items.sort_unstable_by_key(|&(fp, _)| fp & part);
        for group in items.chunk_by_mut(|a, b| (a.0 ^ b.0) & part == 0) {
            if group.len() >= 2 {
                self.search_group(group, exclusions, pairs);
            }
        }
    }
}

/// Sorts `values` with a least-significant-digit radix sort on 16-bit
/// digits, skipping digits on which all values agree.
fn radix_sort(values: &mut Vec<u64>) {
    if values.len() < 4096 {
        values.sort_unstable();
        return;
    }
    let mut scratch = vec![0u64; values.len()];
    for shift in (0..64).step_by(16) {
        let digit = |v: u64| (v >> shift) as usize & 0xffff;
        let mut starts = vec![0usize; (1 << 16) + 1];
        for &v in values.iter() {
            starts[digit(v) + 1] += 1;
        }
        if starts.contains(&values.len()) {
            continue;
        }
        for d in 0..1 << 16 {
            starts[d + 1] += starts[d];
        }
        for &v in values.iter() {
            let slot = &mut starts[digit(v)];
            scratch[*slot] = v;
            *slot += 1;
        }
        std::mem::swap(values, &mut scratch);
    }
}

/// Number of `bits`-bit values within distance `k` of a given one.
fn neighbourhood(bits: u32, k: u32) -> u64 {
    let mut total = 0u64;
    let mut term = 1u64; // C(bits, i)
    for i in 0..=k.min(bits) {
        total += term;
        term = term * u64::from(bits - i) / u64::from(i + 1);
    }
    total
}

/// Whether two entries of `bucket` share their kept prefix: a linear-probing
/// hash set in `seen`, much cheaper than sorting a bucket that (as almost every
/// bucket of random fingerprints) holds no run at all.
fn has_equal_prefixes(bucket: &[Entry], keep_mask: u64, seen: &mut Vec<u64>) -> bool {
    if bucket.len() < 2 {
        return false;
    }
    let bits = (bucket.len() * 2).next_power_of_two().trailing_zeros();
    seen.clear();
    seen.resize(1 << bits, 0);
    let wrap = (1usize << bits) - 1;
    for &e in bucket {
        // Positions are masked off; the low bit marks an occupied slot.
        let key = (e & keep_mask) | 1;
        let mut slot = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize;
        loop {
            match seen[slot] {
                0 => {
                    seen[slot] = key;
                    break;
                }
                s if s == key => return true,
                _ => slot = (slot + 1) & wrap,
            }
        }
    }
    false
}

/// Splits the set bits of `mask` into `parts` masks of near-equal size, in bit order.
fn split_bits(mask: u64, parts: u32) -> Vec<u64> {
    let total = mask.count_ones();
    let mut out = Vec::with_capacity(parts as usize);
    let mut rest = mask;
    for p in 0..parts {
        let take = total / parts + u32::from(p < total % parts);
        let mut part = 0u64;
        for _ in 0..take {
            let low = rest & rest.wrapping_neg();
            part |= low;
            rest ^= low;
        }
        out.push(part);
    }
    out
}

/// Disjoint sets over `0..n` with path halving and union by size (4 bytes
/// per member and link).
struct UnionFind {
    parent: Vec<u32>,
    size: Vec<u32>,
}

impl UnionFind {
    fn new(n: u32) -> UnionFind {
        UnionFind {
            parent: (0..n).collect(),
            size: vec![1; n as usize],
        }
    }

    fn find(&mut self, mut x: u32) -> u32 {
        while self.parent[x as usize] != x {
            let grandparent = self.parent[self.parent[x as usize] as usize];
            self.parent[x as usize] = grandparent;
            x = grandparent;
        }
        x
    }

    fn union(&mut self, a: u32, b: u32) {
        let (mut a, mut b) = (self.find(a), self.find(b));
        if a == b {
            return;
        }
        if self.size[a as usize] < self.size[b as usize] {
            std::mem::swap(&mut a, &mut b);
        }
        self.parent[b as usize] = a;
        self.size[a as usize] += self.size[b as usize];
    }

    /// Components of two or more members, members ascending, ordered by first member.
    fn components(mut self) -> Vec<Vec<usize>> {
        let n = self.parent.len() as u32;
        let mut slot: Vec<u32> = vec![u32::MAX; n as usize];
        let mut out: Vec<Vec<usize>> = Vec::new();
        for x in 0..n {
            let root = self.find(x) as usize;
            if self.size[root] < 2 {
                continue;
            }
            if slot[root] == u32::MAX {
                slot[root] = out.len() as u32;
                out.push(Vec::with_capacity(self.size[root] as usize));
            }
            out[slot[root] as usize].push(x as usize);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_bits_partitions_the_mask() {
        let parts = split_bits(0b1011_0110, 3);
        assert_eq!(parts, vec![0b0000_0110, 0b0011_0000, 0b1000_0000]);
        assert_eq!(parts.iter().fold(0, |a, p| a | p), 0b1011_0110);
        assert_eq!(
            split_bits(u64::MAX, 4)
                .iter()
                .map(|p| p.count_ones())
                .collect::<Vec<_>>(),
            vec![16; 4]
        );
    }

    #[test]
    fn radix_sort_sorts() {
        let mut state = 99u64;
        for n in [0usize, 3, 5000, 100_000] {
            let mut v: Vec<u64> = (0..n)
                .map(|i| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                    // Some digits constant, some not, some duplicates.
                    if i % 7 == 0 {
                        42
                    } else {
                        state & 0xffff_0000_ffff_ffff
                    }
                })
                .collect();
            let mut expected = v.clone();
            expected.sort_unstable();
            radix_sort(&mut v);
            assert_eq!(v, expected);
        }
    }

    /// Every pair within `k`, by comparing all pairs one by one.
    fn brute_force(fps: &[u64], k: u32) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for i in 0..fps.len() {
            for j in i + 1..fps.len() {
                if (fps[i] ^ fps[j]).count_ones() <= k {
                    out.push((i, j));
                }
            }
        }
        out
    }

    #[test]
    fn the_search_is_a_scan_when_the_plans_work_is_larger() {
        // k = 16: 17 tables of 4-bit prefixes; every fingerprint meets about
        // n candidates, more than the scan's n / 2 comparisons.
        let wide = Plan::new(17, 16).unwrap();
        let cost = wide.cost(10_000);
        assert!(cost.expected_candidates * CANDIDATE_COST > 10_000.0);
        assert_eq!(choose_search(10_000, &wide), Search::Scan);
        // k = 3 at a million: 20 tables of 22-bit prefixes, far less work.
        let narrow = Plan::new(6, 3).unwrap();
        assert_eq!(choose_search(1_000_000, &narrow), Search::Tables);
        // A handful of fingerprints is always scanned.
        assert_eq!(choose_search(10, &narrow), Search::Scan);
    }

    #[test]
    fn find_all_equals_brute_force_at_every_k_and_either_search() {
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state ^ state >> 29
        };
        // Random fingerprints, with near copies (a few bits flipped) of some.
        let mut fps: Vec<u64> = Vec::new();
        while fps.len() < 3000 {
            let r = next();
            match r % 4 {
                0 if !fps.is_empty() => {
                    let base = fps[(r >> 8) as usize % fps.len()];
                    let flips = (r >> 40) % 20;
                    let mut fp = base;
                    for f in 0..flips {
                        fp ^= 1 << ((r >> (f % 8 * 3)) % 64);
                    }
                    fps.push(fp);
                }
                _ => fps.push(r),
            }
        }
        for k in [0, 3, 6, 12, 16, 32, 63] {
            let want = brute_force(&fps, k);
            let plan = Plan::choose(fps.len() as u64, k, crate::plan::Budget::Unprobed)
                .or_else(|_| Plan::new(k + 1, k))
                .unwrap();
            assert_eq!(find_all(&fps, &plan), want, "k = {k}, {plan}");
            let mut scanned: Vec<Pair> = scan(&fps, k).concat();
            let sorted = scanned.is_sorted();
            scanned.sort_unstable();
            assert!(sorted, "the scan's blocks come back in order");
            let scanned: Vec<(usize, usize)> = scanned
                .into_iter()
                .map(|p| ((p >> 32) as usize, (p & u64::from(u32::MAX)) as usize))
                .collect();
            assert_eq!(scanned, want, "scan, k = {k}");
        }
    }

    #[test]
    fn exact_duplicates_are_pairs() {
        let plan = Plan::new(4, 3).unwrap();
        assert_eq!(find_all(&[7, 7, 7], &plan), vec![(0, 1), (0, 2), (1, 2)]);
        assert_eq!(find_all(&[7], &plan), vec![]);
        assert_eq!(find_all(&[], &plan), vec![]);
    }

    #[test]
    fn clusters_join_chains_and_duplicates() {
        let plan = Plan::new(4, 2).unwrap();
        // 0 - 0b11 - 0b1111 is a chain at distance 2; u64::MAX stands alone; 5 and 5 are duplicates.
        let fps = [0, u64::MAX, 0b11, 1 << 40 | 5, 0b1111, 1 << 40 | 5];
        assert_eq!(clusters(&fps, &plan), vec![vec![0, 2, 4], vec![3, 5]]);
    }
}
