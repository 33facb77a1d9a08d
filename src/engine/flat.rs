//! A segment's flat tables (format version 5), searched where they are
//! mapped with the decoded copies' search ([`search_tables`]): no copy on
//! the heap and nothing decoded at the open (docs/ARCHITECTURE.md, "Flat
//! tables in the file").
//!
//! A flat table carries a CRC32 per 4 KiB chunk (docs/FORMAT.md, "Flat
//! table section"). Each chunk is checked once per process: the first
//! query that reads it checks it before the search (a pass over its probes'
//! directory entries and key ranges), and the prefault thread, or the
//! thread that wrote the segment, checks every chunk; once all have passed,
//! queries search without the pass. A chunk that fails is the query's
//! error, naming the file and the offset, and it is checked again by the
//! next query that reads it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::format::{FlatLayout, FlatTable, FormatError, SegmentReader};
use crate::plan::Plan;
use crate::search::Hit;

use super::decoded::{TableView, search_tables};

/// Queries whose chunks a first-pass search checks together
/// ([`FlatTables::search_many`]).
const CHECK_GROUP: usize = 8;

/// Chunks [`FlatTables::check_all_until`] checks between two questions
/// whether to stop (4 MiB).
const STOP_CHUNKS: usize = 1024;

/// Where a segment's flat tables are, and which of their chunks passed.
#[derive(Debug)]
pub(super) struct FlatTables {
    layouts: Vec<FlatLayout>,
    /// Per table, a bit per chunk that passed its CRC check.
    checked: Vec<Box<[AtomicU64]>>,
    /// Whether every chunk of every table passed.
    all_checked: AtomicBool,
}

impl FlatTables {
    /// The segment's flat tables, if its tables are flat (`None` if they
    /// are Rice-coded); an error for a segment that mixes both layouts or
    /// whose flat tables' footers are damaged.
    pub(super) fn open<D: AsRef<[u8]>>(
        tables: &SegmentReader<D>,
    ) -> Result<Option<FlatTables>, FormatError> {
        let mut layouts = Vec::with_capacity(tables.table_count());
        for t in 0..tables.table_count() {
            if let Some(flat) = tables.flat_table(t)? {
                layouts.push(flat);
            }
        }
        if layouts.is_empty() {
            return Ok(None);
        }
        if layouts.len() != tables.table_count() {
            return Err(FormatError::malformed(
                crate::format::FileKind::Segment,
                0,
                "a segment mixes flat and Rice-coded tables",
            ));
        }
        let checked = layouts
            .iter()
            .map(|t| {
                (0..t.chunk_count().div_ceil(64))
                    .map(|_| AtomicU64::new(0))
                    .collect()
            })
            .collect();
        Ok(Some(FlatTables {
            layouts: layouts.iter().map(FlatTable::layout).collect(),
            checked,
            all_checked: AtomicBool::new(false),
        }))
    }

    /// The tables in `file`, the segment's bytes (an error if it is
    /// shorter than at the open, which a mapping never is).
    fn tables<'a>(&self, file: &'a [u8]) -> Result<Vec<FlatTable<'a>>, FormatError> {
        self.layouts
            .iter()
            .map(|layout| FlatTable::reopen(file, layout))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                FormatError::malformed(
                    crate::format::FileKind::Segment,
                    0,
                    "the file is shorter than its flat tables",
                )
            })
    }

    /// Whether every chunk has passed its check.
    pub(super) fn all_checked(&self) -> bool {
        self.all_checked.load(Ordering::Acquire)
    }

    /// Whether chunk `i` of table `t` has passed its check.
    fn passed(&self, t: usize, i: usize) -> bool {
        self.checked
            .get(t)
            .and_then(|bits| bits.get(i / 64))
            .is_none_or(|w| w.load(Ordering::Relaxed) & (1 << (i % 64)) != 0)
    }

    /// Checks chunk `i` of `table`, table `t`, and records that it passed.
    fn check_one(&self, t: usize, table: &FlatTable<'_>, i: usize) -> Result<(), FormatError> {
        table.check_chunk(i)?;
        if let Some(w) = self.checked.get(t).and_then(|bits| bits.get(i / 64)) {
            w.fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
        Ok(())
    }

    /// Checks the chunks of `range` of table `t` that have not passed yet.
    fn check(
        &self,
        t: usize,
        table: &FlatTable<'_>,
        range: std::ops::Range<usize>,
    ) -> Result<(), FormatError> {
        for i in range {
            if !self.passed(t, i) {
                self.check_one(t, table, i)?;
            }
        }
        Ok(())
    }

    /// Adds to `wanted` the chunks of `range` of table `t` that have not
    /// passed yet.
    fn want(&self, wanted: &mut Vec<(usize, usize)>, t: usize, range: std::ops::Range<usize>) {
        wanted.extend(range.filter(|&i| !self.passed(t, i)).map(|i| (t, i)));
    }

    /// Checks the chunks of `wanted` (table, chunk), each once: all of
    /// them asked for first, then checked in order, so that their reads
    /// from memory overlap (a query's chunks lie in a dozen places).
    fn check_wanted(
        &self,
        tables: &[FlatTable<'_>],
        wanted: &mut Vec<(usize, usize)>,
    ) -> Result<(), FormatError> {
        wanted.sort_unstable();
        wanted.dedup();
        for &(t, i) in wanted.iter() {
            if let Some(table) = tables.get(t) {
                table.prefetch_chunk(i);
            }
        }
        for &(t, i) in wanted.iter() {
            if let Some(table) = tables.get(t) {
                self.check_one(t, table, i)?;
            }
        }
        wanted.clear();
        Ok(())
    }

    /// Checks every chunk of every table (those already checked are
    /// skipped); then queries search without checking. The directories
    /// go first: every query reads an entry of each, but only a few
    /// bytes of the keys.
    pub(super) fn check_all(&self, file: &[u8]) -> Result<(), FormatError> {
        self.check_all_until(file, || false).map(|_| ())
    }

    /// [`check_all`](Self::check_all), asking `stop` before each
    /// [`STOP_CHUNKS`] chunks: `Ok(false)` if it stopped there, the rest
    /// left unchecked (queries check what they read, as before any
    /// check).
    pub(super) fn check_all_until(
        &self,
        file: &[u8],
        mut stop: impl FnMut() -> bool,
    ) -> Result<bool, FormatError> {
        if self.all_checked() {
            return Ok(true);
        }
        let tables = self.tables(file)?;
        let dirs = tables
            .iter()
            .enumerate()
            .map(|(t, table)| (t, table.dir_chunks(0).start..table.chunk_count()));
        let all = tables
            .iter()
            .enumerate()
            .map(|(t, table)| (t, 0..table.chunk_count()));
        for (t, range) in dirs.chain(all) {
            let Some(table) = tables.get(t) else {
                continue;
            };
            for piece in range.step_by(STOP_CHUNKS) {
                if stop() {
                    return Ok(false);
                }
                self.check(
                    t,
                    table,
                    piece..(piece + STOP_CHUNKS).min(table.chunk_count()),
                )?;
            }
        }
        self.all_checked.store(true, Ordering::Release);
        Ok(true)
    }

    /// Records that every chunk of every table passed its check (by
    /// [`SegmentReader::verify`], which checks them all).
    pub(super) fn mark_all_checked(&self) {
        for bits in &self.checked {
            for w in bits.iter() {
                w.store(u64::MAX, Ordering::Relaxed);
            }
        }
        self.all_checked.store(true, Ordering::Release);
    }

    /// For each of `fps`, every fingerprint within `k` of it (`k` at most
    /// `plan`'s, the segment's), each once per query: `found(i, hit)`.
    /// Until every chunk has passed, the chunks the search reads are
    /// checked first.
    pub(super) fn search_many(
        &self,
        file: &[u8],
        plan: &Plan,
        fps: &[u64],
        k: u32,
        found: impl FnMut(usize, Hit),
    ) -> Result<(), FormatError> {
        let tables = self.tables(file)?;
        if !self.all_checked() {
            // The directory chunks of every probe first, then (their
            // entries now checked) the key chunks between the entries,
            // a few queries at a time.
            let mut wanted = Vec::new();
            for (group, keys) in fps
                .chunks(CHECK_GROUP)
                .flat_map(|g| [(g, false), (g, true)])
            {
                for &fp in group {
                    for (t, (table, layout)) in tables.iter().zip(plan.tables()).enumerate() {
                        let key = layout.permute(fp);
                        let bucket = |key: u64| (key >> (64 - table.bits())) as usize;
                        if plan.radius() == 0 {
                            let b = bucket(key);
                            let chunks = if keys {
                                table.key_chunks(table.entry(b), table.entry(b + 1))
                            } else {
                                table.dir_chunks(b)
                            };
                            self.want(&mut wanted, t, chunks);
                            continue;
                        }
                        // A probed plan's search reads, for each probe, the
                        // directory entries of its run of positions and the
                        // keys between them.
                        for (lo, hi) in
                            layout.probe_ranges_of_weights(key, plan.probe_weights(t, k))
                        {
                            let (first, last) = (bucket(lo), bucket(hi));
                            let chunks = if keys {
                                table.key_chunks(table.entry(first), table.entry(last + 1))
                            } else {
                                table.dir_chunks(first).start..table.dir_chunks(last).end
                            };
                            self.want(&mut wanted, t, chunks);
                        }
                    }
                }
                self.check_wanted(&tables, &mut wanted)?;
            }
        }
        let views: Vec<TableView<'_>> = tables
            .iter()
            .map(|table| TableView {
                dir: table.dir_bytes(),
                low: table.low_bytes(),
                bits: table.bits(),
                width: table.width(),
            })
            .collect();
        search_tables(plan, &views, fps, k, found);
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::format::{SegmentInfo, SegmentWriter};
    use crate::plan::Shape;

    /// A segment of `tables` flat tables of the same 20,000 keys.
    fn segment(tables: u32) -> Vec<u8> {
        let mut keys: Vec<u64> = (1..=20_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        keys.sort_unstable();
        let mut writer = SegmentWriter::new(SegmentInfo {
            index_id: 0,
            segment_id: 1,
            shape: Shape::Nested { outer: 4, inner: 4 },
            k: 3,
            table_count: tables,
            key_count: keys.len() as u64,
        })
        .unwrap();
        for _ in 0..tables {
            writer.push_flat_table(keys.iter().copied(), 12).unwrap();
        }
        writer.finish().unwrap()
    }

    /// The open's check of every chunk: a byte flipped in any table's keys
    /// fails it at that chunk's offset and leaves the segment unchecked (its
    /// queries check what they read); a stop leaves it unchecked too, and a
    /// later check goes on from there to the end.
    #[test]
    fn the_open_s_check_finds_a_damaged_chunk_in_any_table_and_stops_when_told() {
        let clean = segment(5);
        let reader = SegmentReader::new(&clean[..]).unwrap();
        for t in 0..5 {
            let mut bytes = clean.clone();
            let base = reader.table_offset(t).unwrap();
            bytes[base as usize + 5000] ^= 0x10;
            let reader = SegmentReader::new(&bytes[..]).unwrap();
            let flat = FlatTables::open(&reader).unwrap().unwrap();
            let error = flat.check_all_until(&bytes, || false).unwrap_err();
            assert_eq!(error.offset, base + 4096, "table {t}: its second chunk");
            assert!(!flat.all_checked(), "table {t}");
        }

        let flat = FlatTables::open(&reader).unwrap().unwrap();
        let mut asked = 0;
        let after_one = || {
            asked += 1;
            asked > 1
        };
        assert!(!flat.check_all_until(&clean, after_one).unwrap());
        assert!(!flat.all_checked());
        assert!(flat.check_all_until(&clean, || false).unwrap());
        assert!(flat.all_checked());
    }
}
