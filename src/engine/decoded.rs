//! Decoded copies of a small segment's tables, kept in memory and searched
//! instead of its mapped blocks (docs/ARCHITECTURE.md, "Small segments'
//! tables are searched decoded").
//!
//! A probe of a mapped table guesses its block, reads the block index,
//! checks the block's CRC and decodes the block from its start: about a
//! quarter of a microsecond even when every byte is in the cache, four
//! times a check per segment. A decoded table has a directory instead: for
//! each value of the keys' top `bits` bits, where its keys start, so a
//! probe reads two directory entries and then compares the keys between
//! them, each its low `64 - bits` bits (6 bytes when `bits >= 16`) with one
//! XOR and a popcount. The copy holds about as many bytes as the mapped
//! table (`examples/table_layout_study.rs`).
//!
//! A copy is made from a table as the segment's writer wrote it, read back
//! through its checked blocks, so it holds what the file holds; it lives on
//! the heap and is never written.

use super::keys::sort_keys;
use crate::format::FormatError;
use crate::format::{prefetch, prefetch_line, prefetch_line_to_l2, prefetch_to_l2};
use crate::plan::{CANDIDATE_BUDGET, Plan};
use crate::search::Hit;

/// Queries in a step of [`search_tables`]'s pipeline: while
/// the keys of one group are compared, those of the next are fetched, and
/// the directory entries of the one after.
const GROUP: usize = 8;

/// One permuted table, decoded: the bytes a [`TableView`] searches, on
/// the heap.
#[derive(Debug)]
struct Table {
    /// `dir[b]`, little-endian `u32`: the position of the first key whose
    /// top `bits` bits are at least `b`; `dir[2^bits]` is the key count.
    dir: Vec<u8>,
    /// Each key's low `64 - bits` bits, `width` bytes little-endian, in key
    /// order, then 8 zero bytes (so every key loads as one `u64`).
    low: Vec<u8>,
    bits: u32,
    width: usize,
}

impl Table {
    /// The table of `keys` (strictly ascending, as a table holds them),
    /// `count` of them, with a directory of `bits` bits.
    fn new(
        keys: impl Iterator<Item = Result<u64, FormatError>>,
        count: usize,
        bits: u32,
    ) -> Result<Table, FormatError> {
        let width = if bits >= 16 { 6 } else { 8 };
        let mut counts = vec![0u32; (1usize << bits) + 1];
        let mut low = Vec::with_capacity(count * width + 8);
        for key in keys {
            let key = key?;
            let b = (key >> (64 - bits)) as usize;
            counts[b + 1] += 1;
            low.extend_from_slice(&key.to_le_bytes()[..width]);
        }
        low.extend_from_slice(&[0; 8]);
        for b in 1..counts.len() {
            counts[b] += counts[b - 1];
        }
        let dir = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
        Ok(Table {
            dir,
            low,
            bits,
            width,
        })
    }

    fn view(&self) -> TableView<'_> {
        TableView {
            dir: &self.dir,
            low: &self.low,
            bits: self.bits,
            width: self.width,
        }
    }

    fn bytes(&self) -> usize {
        self.dir.len() + self.low.len()
    }
}

/// One permuted table in the layout [`search_tables`] searches, over
/// borrowed bytes: a decoded copy's, or a table mapped from a segment
/// written in this layout.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableView<'a> {
    /// `2^bits + 1` little-endian `u32`: entry `b` is the position of the
    /// first key whose top `bits` bits are at least `b`; the last is the
    /// key count.
    pub(crate) dir: &'a [u8],
    /// Each key's low `64 - bits` bits, `width` bytes little-endian, in key
    /// order, then at least `8 - width` bytes more (so every key loads as
    /// one `u64`). A key out of these bounds reads as 0 (never for a
    /// directory that is checked against them).
    pub(crate) low: &'a [u8],
    pub(crate) bits: u32,
    pub(crate) width: usize,
}

impl TableView<'_> {
    /// The low bits of every key: `64 - bits` of them.
    #[inline]
    fn low_mask(&self) -> u64 {
        u64::MAX >> self.bits
    }

    /// The directory position of `key`'s top bits.
    #[inline]
    fn bucket_of(&self, key: u64) -> usize {
        (key >> (64 - self.bits)) as usize
    }

    /// Directory entry `b`, 0 out of bounds.
    #[inline]
    fn entry(&self, b: usize) -> usize {
        let bytes = self
            .dir
            .get(b * 4..b * 4 + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .unwrap_or_default();
        u32::from_le_bytes(bytes) as usize
    }

    /// Asks for directory entry `b` ahead of its read.
    #[inline]
    fn prefetch_entry(&self, b: usize) {
        prefetch_line(self.dir, b * 4);
    }

    /// [`prefetch_entry`](Self::prefetch_entry) into the second-level
    /// cache: for the unprobed search of several groups of queries, which
    /// asks for the entries of a group's probes and the keys of the
    /// previous group's together, more lines than the first level's miss
    /// buffers hold (docs/BENCHMARKS.md,
    /// "The batched check: lines asked for into the second-level cache,
    /// walks streamed").
    #[inline]
    fn prefetch_entry_to_l2(&self, b: usize) {
        prefetch_line_to_l2(self.dir, b * 4);
    }

    /// Positions of the keys of directory position `b`.
    #[inline]
    fn range(&self, b: usize) -> (usize, usize) {
        (self.entry(b), self.entry(b + 1))
    }

    /// Asks for the keys at positions `lo..hi` ahead of their search.
    #[inline]
    fn prefetch_keys(&self, lo: usize, hi: usize) {
        if lo < hi {
            prefetch(self.low, lo * self.width..hi * self.width);
        }
    }

    /// [`prefetch_keys`](Self::prefetch_keys) into the second-level cache
    /// but for the first line: many lines of several probes or runs ahead
    /// (for the runs of a probed plan, with every line into the first
    /// level, 9 % slower at k = 6 and 10 M: docs/BENCHMARKS.md, "Probed
    /// plans at k = 6: runs compared eight keys at a time"; for the
    /// unprobed search of several groups of queries, "The batched check:
    /// lines asked for into the second-level cache, walks streamed").
    #[inline]
    fn prefetch_run(&self, lo: usize, hi: usize) {
        if lo < hi {
            prefetch_to_l2(self.low, lo * self.width..hi * self.width);
        }
    }

    /// The low bits of the key at position `i` (below the key count).
    #[inline]
    fn low(&self, i: usize) -> u64 {
        let at = i * self.width;
        let bytes = self
            .low
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .unwrap_or_default();
        u64::from_le_bytes(bytes) & self.low_mask()
    }
}

impl TableView<'_> {
    /// `hit(low, distance)` for each key at positions `lo..hi` (below the
    /// key count) whose low bits are within `k` of `want`'s, in order.
    #[inline(always)]
    fn scan(&self, lo: usize, hi: usize, want: u64, k: u32, mut hit: impl FnMut(u64, u32)) {
        match self.width {
            5 => self.scan_width::<5>(lo, hi, want, k, &mut hit),
            6 => self.scan_width::<6>(lo, hi, want, k, &mut hit),
            7 => self.scan_width::<7>(lo, hi, want, k, &mut hit),
            8 => self.scan_width::<8>(lo, hi, want, k, &mut hit),
            _ => self.scan_tail(lo, hi, want, k, &mut hit),
        }
    }

    /// [`scan`](Self::scan) of keys `W` bytes wide: eight keys at a time
    /// from one 64-byte window, first only asking whether any is within
    /// `k` (no branch per key; a probe of `k + 1` tables compares hundreds
    /// of keys, and few match), then reporting those that are.
    #[inline(always)]
    fn scan_width<const W: usize>(
        &self,
        lo: usize,
        hi: usize,
        want: u64,
        k: u32,
        hit: &mut impl FnMut(u64, u32),
    ) {
        let mask = self.low_mask();
        let word = |window: &[u8; 64], j: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&window[j * W..j * W + 8]);
            u64::from_le_bytes(bytes) & mask
        };
        let mut i = lo;
        while i + 8 <= hi {
            let Some(window) = self
                .low
                .get(i * W..i * W + 64)
                .and_then(|b| <&[u8; 64]>::try_from(b).ok())
            else {
                break;
            };
            let mut any = false;
            for j in 0..8 {
                any |= (word(window, j) ^ want).count_ones() <= k;
            }
            if any {
                for j in 0..8 {
                    let low = word(window, j);
                    let distance = (low ^ want).count_ones();
                    if distance <= k {
                        hit(low, distance);
                    }
                }
            }
            i += 8;
        }
        self.scan_tail(i, hi, want, k, hit);
    }

    /// [`scan`](Self::scan) one key at a time.
    #[inline(always)]
    fn scan_tail(&self, lo: usize, hi: usize, want: u64, k: u32, hit: &mut impl FnMut(u64, u32)) {
        for i in lo..hi {
            let low = self.low(i);
            let distance = (low ^ want).count_ones();
            if distance <= k {
                hit(low, distance);
            }
        }
    }
}

/// A segment's fingerprints in decoded tables of their own plan.
#[derive(Debug)]
pub(super) struct DecodedTables {
    plan: Plan,
    tables: Vec<Table>,
}

impl DecodedTables {
    /// The plan of the copy of a segment of `plan` holding `key_count`
    /// keys per table, if it gets one: at most `up_to` keys over the copy's
    /// tables.
    ///
    /// The copy has its own plan: for a plan that probes one prefix value
    /// per table, the `k + 1` tables of [`Plan::new`] when the segment has
    /// more and they give a probe at most [`CANDIDATE_BUDGET`] keys to
    /// compare (up to 4 M keys at k = 3: the segment plans switch to 10
    /// tables before that, for the mapped tables' sake, whose probes cost
    /// more), otherwise the segment's. A probed plan's copy is in its own
    /// plan, searched at many prefix values per table.
    pub(super) fn plan_for(plan: &Plan, key_count: u64, up_to: u64) -> Option<Plan> {
        if key_count > u64::from(u32::MAX) {
            return None;
        }
        if plan.radius() > 0 {
            let keys = key_count.saturating_mul(plan.tables().len() as u64);
            return (keys <= up_to).then(|| plan.clone());
        }
        let k = plan.k();
        let copy = Plan::new(k + 1, k)
            .ok()
            .filter(|small| {
                let prefix = small.tables().iter().map(|t| t.prefix_bits()).min();
                let per_probe = key_count as f64 / 2f64.powi(prefix.unwrap_or(0) as i32);
                small.tables().len() < plan.tables().len() && per_probe <= CANDIDATE_BUDGET
            })
            .unwrap_or_else(|| plan.clone());
        let keys = key_count.saturating_mul(copy.tables().len() as u64);
        (keys <= up_to).then_some(copy)
    }

    /// Decodes `key_count` keys per table into the tables of `copy` (from
    /// [`plan_for`](Self::plan_for)), from the segment's tables of `plan`:
    /// `tables(t)` yields the keys of its table `t` in ascending order. Of
    /// the segment's own plan, each table is copied; of another, the
    /// fingerprints of its first table are permuted and sorted anew.
    pub(super) fn new<I>(
        plan: &Plan,
        copy: Plan,
        key_count: u64,
        mut tables: impl FnMut(usize) -> Result<I, FormatError>,
    ) -> Result<DecodedTables, FormatError>
    where
        I: Iterator<Item = Result<u64, FormatError>>,
    {
        // About a byte of directory per key at most: the top
        // `log2(count) - 2` bits, never more than the table's prefix (the
        // keys of one bucket then share it), at least 8.
        let log2 = 63 - key_count.max(1).leading_zeros();
        let bits = |layout: &crate::plan::Table| {
            log2.saturating_sub(2)
                .min(layout.prefix_bits())
                .clamp(8.min(layout.prefix_bits()).max(1), 32)
        };
        let count = key_count as usize;
        let decoded = if copy == *plan {
            copy.tables()
                .iter()
                .enumerate()
                .map(|(t, layout)| Table::new(tables(t)?, count, bits(layout)))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            let first = plan.tables().first();
            let fingerprints = tables(0)?
                .map(|key| key.map(|key| first.map_or(key, |t| t.unpermute(key))))
                .collect::<Result<Vec<u64>, _>>()?;
            copy.tables()
                .iter()
                .map(|layout| {
                    let mut keys: Vec<u64> =
                        fingerprints.iter().map(|&fp| layout.permute(fp)).collect();
                    sort_keys(&mut keys);
                    Table::new(keys.into_iter().map(Ok), count, bits(layout))
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        Ok(DecodedTables {
            plan: copy,
            tables: decoded,
        })
    }

    /// Heap bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.tables.iter().map(Table::bytes).sum()
    }

    /// The tables as searched.
    fn views(&self) -> Vec<TableView<'_>> {
        self.tables.iter().map(Table::view).collect()
    }

    /// For each of `fps`, every fingerprint within `k` of it (`k` at most
    /// the plan's), each once per query: `found(i, hit)`, queries in order.
    /// The same hits as `search::probe_many` on the mapped tables.
    pub(super) fn search_many(&self, fps: &[u64], k: u32, found: impl FnMut(usize, Hit)) {
        search_tables(&self.plan, &self.views(), fps, k, found);
    }

    /// [`search_many`](Self::search_many), for whatever instructions the
    /// caller was compiled with.
    #[cfg(test)]
    fn search(&self, fps: &[u64], k: u32, found: impl FnMut(usize, Hit)) {
        search(&self.plan, &self.views(), fps, k, found, scan_run);
    }
}

/// For each of `fps`, every fingerprint within `k` of it (`k` at most the
/// plan's) in `tables`, the tables of `plan` in its order, each once per
/// query: `found(i, hit)`, queries in order.
pub(crate) fn search_tables(
    plan: &Plan,
    tables: &[TableView<'_>],
    fps: &[u64],
    k: u32,
    found: impl FnMut(usize, Hit),
) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        // Only a probed plan's runs are compared by `scan_avx512`.
        let avx512 = plan.radius() > 0
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vbmi")
            && has!("avx512vpopcntdq")
            && has!("popcnt");
        if avx512 || has!("popcnt") {
            // SAFETY: `search_avx512` requires the processor's AVX-512
            // instructions (foundation, byte and word, VBMI and the
            // 64-bit population count) and `popcnt`, `search_popcnt` its
            // `popcnt`; the one called has them (checked just above). One
            // of the crate's four `unsafe` blocks, with the memory map
            // (`engine/fs.rs`), the prefetch hint (`format/bytes.rs`) and
            // the scan of all pairs (`batch.rs`).
            unsafe {
                if avx512 {
                    search_avx512(plan, tables, fps, k, found);
                } else {
                    search_popcnt(plan, tables, fps, k, found);
                }
            }
            return;
        }
    }
    search(plan, tables, fps, k, found, scan_run);
}

/// [`search`] compiled with the processor's population count instruction.
/// Every key compared counts the bits of an XOR, and the baseline x86-64
/// target has no such instruction: its count takes a dozen (with it, 3–5 %
/// more checks per second in `check_bench` and 9–10 % more batched checks
/// over HTTP).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn search_popcnt(
    plan: &Plan,
    tables: &[TableView<'_>],
    fps: &[u64],
    k: u32,
    found: impl FnMut(usize, Hit),
) {
    search(plan, tables, fps, k, found, scan_run);
}

/// [`search`] compiled for AVX-512, a probed plan's runs compared eight
/// keys at a time ([`scan_avx512`]): at k = 6 and 10 M fingerprints the
/// default plan compares about 7,900 keys a query, and one at a time
/// (a load, a mask, an XOR, a population count, a compare and a branch
/// each) that was most of its time (docs/ARCHITECTURE.md, "A probed
/// plan's runs are compared eight keys at a time").
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt,avx512f,avx512bw,avx512vbmi,avx512vpopcntdq")]
fn search_avx512(
    plan: &Plan,
    tables: &[TableView<'_>],
    fps: &[u64],
    k: u32,
    found: impl FnMut(usize, Hit),
) {
    // A closure defined here is compiled for this function's instructions.
    let scan = |width: usize,
                keys: &[u8],
                count: usize,
                want: u64,
                mask: u64,
                left: u32,
                each: &mut dyn FnMut(u64)| match width {
        5 => scan_avx512::<5>(keys, count, want, mask, left, each),
        6 => scan_avx512::<6>(keys, count, want, mask, left, each),
        7 => scan_avx512::<7>(keys, count, want, mask, left, each),
        _ => scan_avx512::<8>(keys, count, want, mask, left, each),
    };
    search(plan, tables, fps, k, found, scan);
}

/// [`search_tables`], for whatever instructions the caller was compiled
/// with; a probed plan's runs compared by `scan` (see [`scan_run`]).
#[inline(always)]
fn search(
    plan: &Plan,
    tables: &[TableView<'_>],
    fps: &[u64],
    k: u32,
    mut found: impl FnMut(usize, Hit),
    scan: impl FnMut(usize, &[u8], usize, u64, u64, u32, &mut dyn FnMut(u64)),
) {
    if plan.radius() > 0 {
        search_probed(plan, tables, fps, k, found, scan);
        return;
    }
    let layouts = plan.tables();
    let per_query = tables.len();
    let groups = fps.len().div_ceil(GROUP);
    // With several groups, each step asks for more lines than the first
    // level's miss buffers hold: they are asked for into the second level
    // (but a probe's first key line). One group (a single query's search)
    // asks for its lines into the first level, as it always did.
    let many = groups > 1;
    // Three groups in flight, by group number modulo 3: each query's
    // permuted key and directory position per table, then its range.
    let slots = GROUP.min(fps.len()) * per_query;
    let mut ring = vec![Probe::default(); 3 * slots];
    let group = |g: usize| {
        fps.get(g * GROUP..fps.len().min((g + 1) * GROUP))
            .unwrap_or_default()
    };
    for step in 0..groups + 2 {
        // The directory entries of group `step`...
        if step < groups {
            let probes = &mut ring[(step % 3) * slots..][..slots];
            for (j, &fp) in group(step).iter().enumerate() {
                for (t, (table, layout)) in tables.iter().zip(layouts).enumerate() {
                    let key = layout.permute(fp);
                    let bucket = table.bucket_of(key);
                    if many {
                        table.prefetch_entry_to_l2(bucket);
                    } else {
                        table.prefetch_entry(bucket);
                    }
                    probes[j * per_query + t] = Probe {
                        key,
                        lo: bucket,
                        hi: 0,
                    };
                }
            }
        }
        // ...the keys of group `step - 1`, whose entries have arrived...
        if let Some(g) = step.checked_sub(1).filter(|&g| g < groups) {
            let probes = &mut ring[(g % 3) * slots..][..slots];
            for (j, _) in group(g).iter().enumerate() {
                for (t, table) in tables.iter().enumerate() {
                    let probe = &mut probes[j * per_query + t];
                    let (lo, hi) = table.range(probe.lo);
                    (probe.lo, probe.hi) = (lo, hi);
                    if many {
                        table.prefetch_run(lo, hi);
                    } else {
                        table.prefetch_keys(lo, hi);
                    }
                }
            }
        }
        // ...and the search of group `step - 2`, whose keys have.
        if let Some(g) = step.checked_sub(2).filter(|&g| g < groups) {
            let probes = &ring[(g % 3) * slots..][..slots];
            for (j, &fp) in group(g).iter().enumerate() {
                for (t, (table, layout)) in tables.iter().zip(layouts).enumerate() {
                    let Probe { key, lo, hi } = probes[j * per_query + t];
                    let mask = table.low_mask();
                    // The top bits are the query's: the whole key's
                    // distance is the low bits'.
                    table.scan(lo, hi, key & mask, k, |low, distance| {
                        let fingerprint = layout.unpermute((key & !mask) | low);
                        // A bucket may hold keys of other prefixes (a
                        // directory shorter than the prefix): the search
                        // rule checks it, and reports a match in one table
                        // only.
                        if plan.reports(t, fingerprint ^ fp, k) {
                            found(
                                g * GROUP + j,
                                Hit {
                                    distance,
                                    fingerprint,
                                },
                            );
                        }
                    });
                }
            }
        }
    }
}

/// Runs of directory positions [`search_probed`] has in flight between
/// its stages: the directory entries of one are fetched while the keys of
/// the one `AHEAD` behind are, and the keys of the one behind that are
/// compared.
const AHEAD: usize = 8;

/// Runs [`search_probed`] lists at a time (more when one query has more),
/// so that what it holds stays bounded whatever the batch.
const RUNS: usize = 1024;

/// [`search`] for a probed plan: each query looks at many prefix values
/// per table ([`Plan::probe_weights`]). A table's probes are sorted and
/// turned into runs of directory positions, each position once (probes
/// whose prefixes share their top `bits` bits, when the directory is
/// shorter than the prefix, fall in one; adjacent ones join): the table's
/// directory and keys are then walked forward once, each key compared
/// once per query. The runs of all the queries go through the stages of
/// [`search`]'s pipeline, [`AHEAD`] runs apart instead of a group of
/// queries: directory entries asked for, then read and the keys between
/// them asked for, then compared.
#[inline(always)]
fn search_probed(
    plan: &Plan,
    tables: &[TableView<'_>],
    fps: &[u64],
    k: u32,
    mut found: impl FnMut(usize, Hit),
    mut scan: impl FnMut(usize, &[u8], usize, u64, u64, u32, &mut dyn FnMut(u64)),
) {
    let layouts = plan.tables();
    let mut runs: Vec<Run> = Vec::new();
    let mut next_query = 0;
    while next_query < fps.len() {
        // The runs of the next queries, in query order, each table's in
        // ascending order.
        runs.clear();
        while next_query < fps.len() && runs.len() < RUNS {
            let fp = fps[next_query];
            for (t, (table, layout)) in tables.iter().zip(layouts).enumerate() {
                let key = layout.permute(fp);
                let start = runs.len();
                runs.extend(
                    layout
                        .probe_ranges_of_weights(key, plan.probe_weights(t, k))
                        .map(|(lo, hi)| Run {
                            query: next_query,
                            table: t,
                            key,
                            first: table.bucket_of(lo),
                            last: table.bucket_of(hi),
                            lo: 0,
                            hi: 0,
                        }),
                );
                let added = &mut runs[start..];
                added.sort_unstable_by_key(|run| run.first);
                // Overlapping or adjacent runs join: each position once.
                let mut kept = 0;
                for i in 1..added.len() {
                    if added[i].first <= added[kept].last + 1 {
                        added[kept].last = added[kept].last.max(added[i].last);
                    } else {
                        kept += 1;
                        added[kept] = added[i];
                    }
                }
                let merged = (kept + 1).min(added.len());
                runs.truncate(start + merged);
            }
            next_query += 1;
        }
        for step in 0..runs.len() + 2 * AHEAD {
            // The directory entries of run `step`...
            if let Some(run) = runs.get(step) {
                let table = &tables[run.table];
                table.prefetch_entry(run.first);
                table.prefetch_entry(run.last + 1);
            }
            // ...the keys of run `step - AHEAD`...
            if let Some(run) = step.checked_sub(AHEAD).and_then(|i| runs.get_mut(i)) {
                let table = &tables[run.table];
                (run.lo, run.hi) = (table.entry(run.first), table.entry(run.last + 1));
                table.prefetch_run(run.lo, run.hi);
            }
            // ...and the comparisons of run `step - 2 * AHEAD`.
            if let Some(run) = step.checked_sub(2 * AHEAD).and_then(|i| runs.get(i)) {
                let (table, layout) = (&tables[run.table], &layouts[run.table]);
                let fp = fps[run.query];
                let mask = table.low_mask();
                let want = run.key & mask;
                let shift = 64 - table.bits;
                // Position by position (one unless runs joined), each
                // with its keys' top bits.
                let mut lo = run.lo;
                for b in run.first..=run.last {
                    let hi = if b == run.last {
                        run.hi
                    } else {
                        table.entry(b + 1)
                    };
                    let top = (b as u64) << shift;
                    let top_distance = (top ^ (run.key & !mask)).count_ones();
                    if let Some(left) = k.checked_sub(top_distance) {
                        let mut each = |low: u64| {
                            let fingerprint = layout.unpermute(top | low);
                            // Keys of a position hold prefixes the probes
                            // did not ask for when the directory is
                            // shorter than the prefix: the search rule
                            // checks them, and reports a match in one
                            // table only.
                            if plan.reports(run.table, fingerprint ^ fp, k) {
                                found(
                                    run.query,
                                    Hit {
                                        distance: (fingerprint ^ fp).count_ones(),
                                        fingerprint,
                                    },
                                );
                            }
                        };
                        // The run's keys and the bytes after them (a scan
                        // that loads several keys at once reads some of
                        // those, and never reports them).
                        if lo <= hi && hi * table.width <= table.low.len() {
                            let keys = table.low.get(lo * table.width..).unwrap_or_default();
                            scan(table.width, keys, hi - lo, want, mask, left, &mut each);
                        }
                    }
                    lo = hi;
                }
            }
        }
    }
}

/// Calls `each` with the low bits of every key of the `count` keys at the
/// start of `keys` (`width` bytes each, little-endian, 5 to 8; the bits of
/// `mask`) within `left` bits of `want`, in order: the scan of
/// [`search_probed`] for any processor (`scan_avx512` compares eight keys
/// at a time where the processor can).
#[inline(always)]
fn scan_run(
    width: usize,
    keys: &[u8],
    count: usize,
    want: u64,
    mask: u64,
    left: u32,
    each: &mut dyn FnMut(u64),
) {
    let keys = keys.get(..count * width).unwrap_or_default();
    // 6 or 8 bytes in a heap copy; a flat table's width is its low bits'
    // bytes, 5 to 8 (its reader refuses any other, `flat_width`).
    match width {
        5 => scan::<5>(keys, want, mask, left, each),
        6 => scan::<6>(keys, want, mask, left, each),
        7 => scan::<7>(keys, want, mask, left, each),
        _ => scan::<8>(keys, want, mask, left, each),
    }
}

/// Calls `each` with the low bits of every key of `keys` (`W` bytes
/// each, little-endian; the bits of `mask`) within `left` bits of `want`:
/// one load, XOR and population count per key, with no bounds check.
#[inline(always)]
fn scan<const W: usize>(keys: &[u8], want: u64, mask: u64, left: u32, each: &mut dyn FnMut(u64)) {
    for key in keys.chunks_exact(W) {
        let mut bytes = [0u8; 8];
        bytes[..W].copy_from_slice(key);
        let low = u64::from_le_bytes(bytes) & mask;
        if (low ^ want).count_ones() <= left {
            each(low);
        }
    }
}

/// The byte of a 64-byte load that byte `i` of lane `j` of
/// [`scan_avx512`]'s keys takes, packed eight to a lane: key `j`'s byte
/// `i` (its last byte again past its `W`, which `mask` clears).
#[cfg(target_arch = "x86_64")]
const fn lane_bytes<const W: usize>(j: usize) -> i64 {
    let mut lane = 0u64;
    let mut i = 0;
    while i < 8 {
        let byte = j * W + if i < W { i } else { W - 1 };
        lane |= (byte as u64) << (8 * i);
        i += 1;
    }
    lane as i64
}

/// [`scan_run`] eight keys at a time: 64 bytes loaded (copied first when
/// fewer are left), the keys moved into 64-bit lanes by one byte
/// permutation, masked, XORed with `want`, their bits counted and compared
/// with `left` at once; `each` is called for the lanes that pass, in
/// order. The bytes after the run's keys are read but never reported.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt,avx512f,avx512bw,avx512vbmi,avx512vpopcntdq")]
fn scan_avx512<const W: usize>(
    keys: &[u8],
    count: usize,
    want: u64,
    mask: u64,
    left: u32,
    each: &mut dyn FnMut(u64),
) {
    use std::arch::x86_64::{
        _mm512_and_si512, _mm512_cmple_epu64_mask, _mm512_permutexvar_epi8, _mm512_popcnt_epi64,
        _mm512_set_epi64, _mm512_set1_epi64, _mm512_xor_si512,
    };
    let lanes = _mm512_set_epi64(
        lane_bytes::<W>(7),
        lane_bytes::<W>(6),
        lane_bytes::<W>(5),
        lane_bytes::<W>(4),
        lane_bytes::<W>(3),
        lane_bytes::<W>(2),
        lane_bytes::<W>(1),
        lane_bytes::<W>(0),
    );
    let masks = _mm512_set1_epi64(mask as i64);
    let wants = _mm512_set1_epi64(want as i64);
    let lefts = _mm512_set1_epi64(i64::from(left));
    // Never past the keys there are.
    let count = count.min(keys.len() / W);
    let mut tail = [0u8; 64];
    let mut first = 0;
    while first < count {
        let at = first * W;
        let block: &[u8; 64] = match keys.get(at..at + 64).and_then(|b| b.try_into().ok()) {
            Some(block) => block,
            None => {
                let rest = keys.get(at..).unwrap_or_default();
                let (head, after) = tail.split_at_mut(rest.len());
                head.copy_from_slice(rest);
                after.fill(0);
                &tail
            }
        };
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&block[i * 8..i * 8 + 8]);
            i64::from_le_bytes(bytes)
        };
        let bytes = _mm512_set_epi64(
            word(7),
            word(6),
            word(5),
            word(4),
            word(3),
            word(2),
            word(1),
            word(0),
        );
        let lows = _mm512_and_si512(_mm512_permutexvar_epi8(lanes, bytes), masks);
        let distances = _mm512_popcnt_epi64(_mm512_xor_si512(lows, wants));
        let mut passed = _mm512_cmple_epu64_mask(distances, lefts);
        let left_in_run = count - first;
        if left_in_run < 8 {
            passed &= (1u8 << left_in_run) - 1;
        }
        while passed != 0 {
            let j = passed.trailing_zeros() as usize;
            let mut bytes = [0u8; 8];
            bytes[..W].copy_from_slice(&block[j * W..j * W + W]);
            each(u64::from_le_bytes(bytes) & mask);
            passed &= passed - 1;
        }
        first += 8;
    }
}

/// A run of directory positions `first..=last` of one table that a query
/// of [`search_probed`] looks at, and the positions of its keys once read.
#[derive(Debug, Clone, Copy)]
struct Run {
    query: usize,
    table: usize,
    /// The query, permuted for the table.
    key: u64,
    first: usize,
    last: usize,
    lo: usize,
    hi: usize,
}

/// One table's probe of one query in [`search_tables`]: the
/// permuted query, and first its directory position, then its range.
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    key: u64,
    lo: usize,
    hi: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FileKind;

    fn mix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The copy in `copy` of a segment of `plan` holding `fps`.
    fn decoded(plan: &Plan, copy: &Plan, fps: &[u64]) -> DecodedTables {
        let mut distinct = fps.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        DecodedTables::new(plan, copy.clone(), distinct.len() as u64, |t| {
            let layout = &plan.tables()[t];
            let mut keys: Vec<u64> = distinct.iter().map(|&fp| layout.permute(fp)).collect();
            keys.sort_unstable();
            Ok(keys.into_iter().map(Ok))
        })
        .expect("decode")
    }

    /// Both the dispatched search of `queries` at distance `k` and the one
    /// for any processor report hits in query order, each at its distance,
    /// and for each query exactly the fingerprints of `distinct` (sorted)
    /// within `k` of it.
    fn search_like_a_scan(
        tables: &DecodedTables,
        queries: &[u64],
        distinct: &[u64],
        k: u32,
        what: &str,
    ) {
        for generic in [false, true] {
            let mut found = vec![Vec::new(); queries.len()];
            let mut last = 0;
            let mut push = |i: usize, hit: Hit| {
                assert!(i >= last, "{what}: queries in order");
                last = i;
                assert_eq!(hit.distance, (hit.fingerprint ^ queries[i]).count_ones());
                found[i].push(hit.fingerprint);
            };
            if generic {
                tables.search(queries, k, &mut push);
            } else {
                tables.search_many(queries, k, &mut push);
            }
            for (i, &q) in queries.iter().enumerate() {
                let mut got = found[i].clone();
                got.sort_unstable();
                let want: Vec<u64> = distinct
                    .iter()
                    .copied()
                    .filter(|&fp| (fp ^ q).count_ones() <= k)
                    .collect();
                assert_eq!(
                    got, want,
                    "{what}, k = {k}, query {i} {q:#x} (generic: {generic})"
                );
            }
        }
    }

    /// Every search, for every `k` up to the plan's, finds what a scan of
    /// all fingerprints finds, each once, at the right distance: with
    /// directories of 8 to 20 bits (keys of 8 and 6 bytes), shorter than
    /// the prefix or as long, and queries near stored fingerprints, on
    /// them, and at random.
    #[test]
    fn searches_find_what_a_scan_finds() {
        let new = |m, k| Plan::new(m, k).expect("plan");
        for (plan, copy, n) in [
            (new(4, 3), new(4, 3), 0),
            (new(4, 3), new(4, 3), 1),
            (new(4, 3), new(4, 3), 700),
            (new(4, 3), new(4, 3), 300_000),
            (new(4, 3), new(4, 3), 1_100_000),
            (new(5, 3), new(5, 3), 3_000),
            (new(5, 3), new(5, 3), 2_000_000),
            // Copies in another plan than the segment's.
            (new(5, 3), new(4, 3), 200_000),
            (new(6, 3), new(4, 3), 2_000),
            (new(7, 5), new(7, 5), 5_000),
            (new(8, 5), new(6, 5), 5_000),
            (Plan::nested(4, 4, 3).expect("plan"), new(4, 3), 20_000),
        ] {
            // Clusters, so that most queries have several matches.
            let fps: Vec<u64> = (0..n as u64)
                .map(|i| mix(i / 4) ^ (1 << (mix(i) % 64)) ^ (mix(i ^ 7) & 0x101))
                .collect();
            let tables = decoded(&plan, &copy, &fps);
            let mut distinct = fps.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let queries: Vec<u64> = (0..300u64)
                .map(|i| match i % 3 {
                    0 if n > 0 => fps[(mix(i) % n as u64) as usize] ^ (1 << (i % 64)),
                    1 if n > 0 => fps[(mix(i) % n as u64) as usize],
                    _ => mix(i ^ 0xabc),
                })
                .collect();
            for k in 0..=plan.k() {
                search_like_a_scan(
                    &tables,
                    &queries,
                    &distinct,
                    k,
                    &format!("{plan} copied in {copy}, {n} fingerprints"),
                );
            }
        }
    }

    /// A table's scan of a run of keys, for every key width a flat table
    /// has (5 to 8 bytes), finds each key within `k` once, in order, at
    /// its distance: runs shorter than the eight keys compared at once,
    /// longer, starting anywhere, ending at the last key (whose window
    /// runs past the bytes), and matches at every place of a window.
    #[test]
    fn scans_of_every_key_width_find_each_key_within_k() {
        for width in 5..=8usize {
            let bits = 64 - 8 * width as u32 + 2;
            let mask = u64::MAX >> bits;
            let want = mix(width as u64) & mask;
            // Every third key within 0 to 4 bits of `want`, the others at random.
            let keys: Vec<u64> = (0..300u64)
                .map(|i| match i % 3 {
                    0 => want ^ (mix(i) & (mix(i ^ 1) & mix(i ^ 2) & mix(i ^ 3) & mask)),
                    _ => mix(i ^ 0x55) & mask,
                })
                .collect();
            let mut low: Vec<u8> = keys
                .iter()
                .flat_map(|key| key.to_le_bytes()[..width].to_vec())
                .collect();
            low.extend_from_slice(&[0; 8]);
            let view = TableView {
                dir: &[],
                low: &low,
                bits,
                width,
            };
            for (lo, hi) in [
                (0, 0),
                (0, 7),
                (3, 11),
                (0, 8),
                (5, 300),
                (0, 300),
                (290, 300),
            ] {
                for k in 0..=4 {
                    let mut got = Vec::new();
                    view.scan(lo, hi, want, k, |key, d| got.push((key, d)));
                    let expected: Vec<(u64, u32)> = keys[lo..hi]
                        .iter()
                        .map(|&key| (key, (key ^ want).count_ones()))
                        .filter(|&(_, d)| d <= k)
                        .collect();
                    assert_eq!(got, expected, "width {width}, keys {lo}..{hi}, k = {k}");
                }
            }
        }
    }

    /// A probed plan's copy, searched at every distance up to its k,
    /// finds what a scan finds, each once: the probes of one table sorted
    /// and walked forward once, adjacent ones (prefixes a lowest bit
    /// apart) joined, several in one directory position (a directory
    /// shorter than the prefix: 8 to 12 bits under 16- to 32-bit
    /// prefixes) taken once, and as long as the prefix (each probe one
    /// position); with stored fingerprints at the directory's edges
    /// (every prefix bit clear or set, so that the first and last
    /// positions hold keys) and queries there, whose probes reach both
    /// ends; and differing bits packed into one block or spread over all.
    #[test]
    fn probed_copies_find_what_a_scan_finds() {
        let probed = |m, r, k| Plan::probed(m, r, k).expect("plan");
        for (plan, n) in [
            (probed(4, 1, 6), 0),
            (probed(4, 1, 6), 1),
            (probed(4, 1, 6), 3_000),
            (probed(4, 1, 6), 300_000),
            (probed(3, 2, 6), 5_000),
            (probed(3, 2, 6), 100_000),
            (probed(2, 1, 3), 4_000),
            (probed(3, 1, 4), 20_000),
            (probed(5, 2, 8), 5_000),
        ] {
            let k = plan.k();
            // Clusters (several matches per query), and fingerprints whose
            // blocks are all clear or all set, a few bits from either.
            let mut fps: Vec<u64> = (0..n as u64)
                .map(|i| mix(i / 4) ^ (1 << (mix(i) % 64)) ^ (mix(i ^ 7) & 0x101))
                .collect();
            if n > 0 {
                for i in 0..64u64 {
                    let near = (1u64 << (i % 64)) | (1u64 << ((i * 7) % 64));
                    fps.extend([near, !near, 0, u64::MAX, near & 0xffff, !(near & 0xffff)]);
                }
            }
            let tables = decoded(&plan, &plan, &fps);
            let mut distinct = fps.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let mut queries: Vec<u64> = vec![0, u64::MAX, 1, u64::MAX - 1, 0xffff, !0xffff];
            for i in 0..240u64 {
                let q = match i % 4 {
                    0 | 1 if !distinct.is_empty() => {
                        let base = distinct[(mix(i) % distinct.len() as u64) as usize];
                        // `d` bits flipped, packed from one bit on or
                        // spread every 64 / d bits.
                        let d = (i / 4) as u32 % (k + 2);
                        let start = (mix(i ^ 3) % 64) as u32;
                        (0..d).fold(base, |q, j| {
                            let bit = if i % 4 == 0 {
                                (start + j) % 64
                            } else {
                                (start + j * 64 / d.max(1)) % 64
                            };
                            q ^ (1 << bit)
                        })
                    }
                    2 => mix(i ^ 0xabc) & (u64::MAX >> (mix(i) % 64)),
                    _ => mix(i ^ 0xdef),
                };
                queries.push(q);
            }
            for d in 0..=k {
                search_like_a_scan(
                    &tables,
                    &queries,
                    &distinct,
                    d,
                    &format!("{plan}, {n} fingerprints"),
                );
            }
        }
    }

    /// The run scan that compares eight keys at a time reports what the
    /// one that compares one at a time does, in the same order: keys of
    /// every width (5 to 8 bytes), runs of 0 to 40 keys (whole loads,
    /// a partial last one, and runs too near the end of the bytes for a
    /// 64-byte load), every `left` from 0 to 8, keys at every distance
    /// from `want` in every lane, and keys after the run that would pass
    /// (never reported).
    #[test]
    fn runs_compared_eight_at_a_time_pass_the_keys_one_at_a_time_does() {
        #[cfg(target_arch = "x86_64")]
        if !(std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vbmi")
            && std::arch::is_x86_feature_detected!("avx512vpopcntdq")
            && std::arch::is_x86_feature_detected!("popcnt"))
        {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        #[cfg(target_arch = "x86_64")]
        for width in 5..=8usize {
            for count in 0..=40usize {
                for seed in 0..6u64 {
                    // Keys of `64 - bits` bits, the most and fewer that
                    // take `width` bytes.
                    let low_bits = 8 * width as u64 - seed % 4;
                    let mask = u64::MAX >> (64 - low_bits);
                    let want = mix(seed ^ (width as u64) << 8) & mask;
                    // Each key `want` with 0 to 9 bits flipped, then 16
                    // keys equal to `want` after the run.
                    let keys: Vec<u64> = (0..count as u64)
                        .map(|i| {
                            let flips = (mix(i ^ seed << 20) % 10) as u32;
                            (0..flips).fold(want, |key, f| {
                                key ^ (1 << (mix(i * 64 + u64::from(f) + seed) % low_bits))
                            })
                        })
                        .chain(std::iter::repeat_n(want, 16))
                        .collect();
                    let mut bytes: Vec<u8> = keys
                        .iter()
                        .flat_map(|key| key.to_le_bytes()[..width].to_vec())
                        .collect();
                    // As many bytes after the run as a table may have: all
                    // of the 16 keys, or none (the bytes end with the run).
                    for after in [16 * width, 0] {
                        bytes.truncate(count * width + after);
                        for left in 0..=8u32 {
                            let mut one = Vec::new();
                            scan_run(width, &bytes, count, want, mask, left, &mut |low| {
                                one.push(low)
                            });
                            let mut eight = Vec::new();
                            let mut each = |low| eight.push(low);
                            // SAFETY: the processor has these instructions
                            // (checked above).
                            unsafe {
                                match width {
                                    5 => {
                                        scan_avx512::<5>(&bytes, count, want, mask, left, &mut each)
                                    }
                                    6 => {
                                        scan_avx512::<6>(&bytes, count, want, mask, left, &mut each)
                                    }
                                    7 => {
                                        scan_avx512::<7>(&bytes, count, want, mask, left, &mut each)
                                    }
                                    _ => {
                                        scan_avx512::<8>(&bytes, count, want, mask, left, &mut each)
                                    }
                                }
                            }
                            assert_eq!(
                                eight, one,
                                "width {width}, {count} keys, left {left}, {after} bytes after"
                            );
                            let expected = keys[..count]
                                .iter()
                                .filter(|&&key| (key ^ want).count_ones() <= left)
                                .count();
                            assert_eq!(one.len(), expected);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn copies_take_k_plus_1_tables_while_probes_stay_short() {
        let new = |m, k| Plan::new(m, k).expect("plan");
        let (four, ten) = (new(4, 3), new(5, 3));
        // 4 tables of 16-bit prefixes: up to 64 keys per probe, 4 M keys.
        assert_eq!(
            DecodedTables::plan_for(&ten, 1 << 20, u64::MAX),
            Some(four.clone())
        );
        assert_eq!(
            DecodedTables::plan_for(&ten, 4 << 20, u64::MAX),
            Some(four.clone())
        );
        assert_eq!(
            DecodedTables::plan_for(&ten, (4 << 20) + 1, u64::MAX),
            Some(ten.clone())
        );
        assert_eq!(
            DecodedTables::plan_for(&four, 1 << 20, u64::MAX),
            Some(four.clone())
        );
        // The limit counts the copy's keys over its tables.
        assert_eq!(
            DecodedTables::plan_for(&ten, 1 << 20, 4 << 20),
            Some(four.clone())
        );
        assert_eq!(DecodedTables::plan_for(&ten, (1 << 20) + 1, 4 << 20), None);
        assert_eq!(DecodedTables::plan_for(&four, 10, 0), None);
        // A probed plan's copy is in its own plan, within the limit.
        let probed = Plan::probed(4, 1, 6).expect("plan");
        assert_eq!(
            DecodedTables::plan_for(&probed, 4 << 20, 16 << 20),
            Some(probed.clone())
        );
        assert_eq!(
            DecodedTables::plan_for(&probed, (4 << 20) + 1, 16 << 20),
            None
        );
    }

    #[test]
    fn a_damaged_table_is_not_decoded() {
        let plan = Plan::new(4, 3).expect("plan");
        let err = DecodedTables::new(&plan, plan.clone(), 2, |t| {
            let keys: Vec<Result<u64, FormatError>> = if t == 2 {
                vec![
                    Ok(1),
                    Err(FormatError::malformed(FileKind::Segment, 40, "bad")),
                ]
            } else {
                vec![Ok(1), Ok(2)]
            };
            Ok(keys.into_iter())
        })
        .expect_err("a key failed to decode");
        assert!(err.to_string().contains("bad"), "{err}");
    }
}
