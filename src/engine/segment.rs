//! A live segment (its tables and doc map, mapped): opening one named by
//! the manifest, writing a new one, verifying one, probing its tables.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::format::{
    DEFAULT_BLOCK_LEN, DocEntry, DocMapReader, FileKind, Ranges, SegmentInfo, SegmentMeta,
    SegmentReader, SegmentWriter, TableLayout, TableReader, Tombstone,
};
use crate::plan::Plan;
use crate::search::{self, SortedTables};

use super::core::{Core, lock};
use super::decoded::DecodedTables;
use super::files::{
    corrupted, create_buffered, encode_error, foreign, io_error, named_file_error, sync_buffered,
};
use super::flat::FlatTables;
use super::fs::{FileSystem, Mapped, memory_limit};
use super::schedule::Point;

/// Keys per table block in a new segment of `plan` holding `key_count`
/// keys. A probe decodes its block from the start up to the probed prefix,
/// so short blocks (a larger block index: 16 bytes per block, and 13 bytes
/// of header and CRC per block) cut what each probe decodes:
/// - a probed plan, which probes many prefix values per query, always gets
///   them (docs/BENCHMARKS.md, "Probed plans");
/// - so does a segment of up to [`SHORT_BLOCKS_UP_TO`] keys, where
///   decoding, not the wait for memory, bounds a probe: 32-key blocks made
///   queries 1.2 times faster at 1 M and 10 M fingerprints, for 10 % more
///   table bytes, but only 1.03 times at 50 M (docs/BENCHMARKS.md, "Short
///   blocks for segments up to 16 M keys"), where larger segments keep
///   128-key blocks and their size.
fn block_len(plan: &Plan, key_count: u64) -> u32 {
    if plan.radius() > 0 || key_count <= SHORT_BLOCKS_UP_TO {
        SHORT_BLOCK_LEN
    } else {
        DEFAULT_BLOCK_LEN
    }
}

/// The directory bits of a new segment's flat table of `layout` holding
/// `key_count` keys, or `None` for a Rice-coded table: tables of 2^32 keys
/// or more (a flat directory counts in `u32`). A probed plan's flat tables
/// are searched as its decoded copies are, a table's probes walked as runs
/// of directory positions (docs/ARCHITECTURE.md, "Flat tables of probed
/// plans"). The directory takes the keys' top `log2(key_count) - 2` bits,
/// never more than the table's prefix (the keys of one bucket then share
/// it) nor 26, at least 8 (or the prefix): at most about a byte per key,
/// and a probe compares 4 to 8 keys (docs/ARCHITECTURE.md, "Flat tables in
/// the file"). An unprobed plan's directory has at most
/// [`UNPROBED_DIR_BITS`] bits, or `log2(key_count) - 6` where that is
/// more: every query reads an entry of each table's directory, and a small
/// one is mapped and checked by the first queries after an open
/// (docs/ARCHITECTURE.md, "The first queries on a 50 M segment pay for its
/// pages, not its search").
pub(super) fn flat_bits(layout: &crate::plan::Table, key_count: u64, probed: bool) -> Option<u32> {
    if key_count >= u64::from(u32::MAX) {
        return None;
    }
    let log2 = 63 - key_count.max(1).leading_zeros();
    let prefix = layout.prefix_bits();
    let most = if probed {
        26
    } else {
        UNPROBED_DIR_BITS.max(log2.saturating_sub(6)).min(26)
    };
    Some(
        log2.saturating_sub(2)
            .min(prefix)
            .clamp(8.min(prefix).max(1), most),
    )
}

/// The most directory bits of an unprobed plan's flat table (4 MiB of
/// directory), up to 2^26 keys: at 50 M fingerprints (prefixes of 25 and
/// 26 bits) a probe then compares about 48 keys instead of 6, as fast once
/// the pages are mapped, and the first 2,000 queries after an open took
/// half as long at p50 as with 23 bits (docs/BENCHMARKS.md, "The first
/// queries on a 50 M segment").
const UNPROBED_DIR_BITS: u32 = 20;

/// Keys per table block of a probed plan's segment, and of a segment of
/// at most [`SHORT_BLOCKS_UP_TO`] keys.
const SHORT_BLOCK_LEN: u32 = 32;

/// The largest segment (in keys per table) written with short blocks.
const SHORT_BLOCKS_UP_TO: u64 = 16 << 20;

/// A live segment: its tables and doc map, mapped.
#[derive(Debug)]
pub(super) struct Segment {
    pub(super) meta: SegmentMeta,
    pub(super) seg_path: PathBuf,
    pub(super) ids_path: PathBuf,
    /// The segment's own plan (its header's shape): the index's, or one
    /// with fewer tables for a small segment ([`Core::segment_plan`]).
    pub(super) plan: Plan,
    pub(super) tables: SegmentReader<Mapped>,
    /// Each table's place in the file and checked footer, from the open:
    /// a query reopens its tables from these without checking their
    /// footers again.
    layouts: Vec<TableLayout>,
    /// The same with what the guesses interpolate with
    /// ([`TableReader::guided`]), read by a table's first query rather than
    /// the open.
    guided: Vec<OnceLock<TableLayout>>,
    /// The tables decoded in memory, searched instead of the mapped ones,
    /// if the segment is small enough
    /// ([`Options::decoded_tables_up_to`](super::Options::decoded_tables_up_to)):
    /// set when the segment is written (once the index has queried), by
    /// the prefault thread after an open, or by the thread the first query
    /// starts ([`Core::note_query`]).
    pub(super) decoded: OnceLock<DecodedTables>,
    /// Its tables, if they are flat (format version 5): searched where
    /// they are mapped, never decoded.
    flat: Option<FlatTables>,
    /// Held while a thread decodes the tables, so that they are decoded
    /// once ([`Segment::decode_tables`]).
    decoding: Mutex<()>,
    /// The tables' mapping (also inside `tables`), for prefaulting.
    pub(super) tables_map: Mapped,
    pub(super) docs: DocMapReader<Mapped>,
    /// The doc map's mapping (also inside `docs`), for prefaulting.
    pub(super) docs_map: Mapped,
    /// Whether its files are expected to be in memory: prefaulted whole at
    /// the open or when written (the default), so a query loads its blocks
    /// itself. False for a segment too large to prefault
    /// ([`fits_in_memory`]): a query then first asks the kernel to read
    /// every block it needs, so that they come from the disk together
    /// ([`SortedTables::warm_keys`]).
    pub(super) in_memory: AtomicBool,
    /// For a segment out of memory, whether its block indexes have been
    /// read whole (by the open's prefault thread, or when it was written):
    /// a query then loads a table's block index entry as in memory rather
    /// than asking the kernel for its page first, a system call per table
    /// that would find it there ([`mark_indexes_read`](Self::mark_indexes_read)).
    indexes_read: AtomicBool,
    /// Whether its contents are known to be sound: it was written by this
    /// process (from a memtable, or merged from sound segments), or
    /// [`Segment::verify`] passed. A merge verifies an input that is not,
    /// so that it never copies damage into a file that hides it.
    pub(super) sound: AtomicBool,
}

impl Core {
    /// Writes the table file of segment `segment_id` in `plan`, streamed
    /// through a buffer and synced; its doc map file the caller has written
    /// and synced (its records' sequence numbers and timestamps span
    /// `ranges`). Then maps and opens the segment; the caller commits a
    /// manifest naming it. `fill(t, keys)` sets `keys` to table `t`'s
    /// sorted keys, `key_count` of them; one buffer serves every table.
    pub(super) fn write_segment(
        &self,
        segment_id: u64,
        level: u32,
        plan: &Plan,
        key_count: u64,
        fill: impl FnMut(usize, &mut Vec<u64>) -> Result<()>,
        ranges: Option<Ranges>,
    ) -> Result<Segment> {
        self.write_table_file(segment_id, plan, key_count, fill)?;
        self.open_written(segment_id, level, ranges)
    }

    /// The first half of [`write_segment`](Self::write_segment): writes
    /// and syncs the table file of segment `segment_id` in `plan`, which
    /// needs nothing of its doc map (a flush writes the two files at once,
    /// [`Core::write_memtable`]).
    pub(super) fn write_table_file(
        &self,
        segment_id: u64,
        plan: &Plan,
        key_count: u64,
        mut fill: impl FnMut(usize, &mut Vec<u64>) -> Result<()>,
    ) -> Result<()> {
        let seg_path = self.dir.join(FileKind::Segment.file_name(segment_id));
        let mut seg = SegmentWriter::with_writer(
            create_buffered(self.fs.as_ref(), &seg_path)?,
            SegmentInfo {
                index_id: self.index_id,
                segment_id,
                shape: plan.shape(),
                k: plan.k(),
                table_count: plan.tables().len() as u32,
                key_count,
            },
            block_len(plan, key_count),
        )
        .map_err(encode_error(&seg_path))?;
        let flat = self.writes_flat(key_count, plan.tables().len());
        let mut keys = Vec::new();
        for (t, layout) in plan.tables().iter().enumerate() {
            keys.clear();
            fill(t, &mut keys)?;
            match flat_bits(layout, key_count, plan.radius() > 0).filter(|_| flat) {
                Some(bits) => seg.push_flat_table(keys.iter().copied(), bits),
                None => seg.push_table(keys.iter().copied()),
            }
            .map_err(encode_error(&seg_path))?;
        }
        drop(keys);
        let seg_file = seg.finish().map_err(encode_error(&seg_path))?;
        sync_buffered(seg_file, &seg_path)
    }

    /// The second half of [`write_segment`](Self::write_segment): maps and
    /// opens segment `segment_id`, whose table file and doc map file are
    /// written and synced, at `level`.
    pub(super) fn open_written(
        &self,
        segment_id: u64,
        level: u32,
        ranges: Option<Ranges>,
    ) -> Result<Segment> {
        let seg_path = self.dir.join(FileKind::Segment.file_name(segment_id));
        let ids_path = self.dir.join(FileKind::DocMap.file_name(segment_id));
        let map = |path: &Path| self.fs.map(path).map_err(io_error(path, "map"));
        let tables = SegmentReader::new(map(&seg_path)?).map_err(|e| corrupted(&seg_path, &e))?;
        let docs = DocMapReader::new(map(&ids_path)?).map_err(|e| corrupted(&ids_path, &e))?;
        let meta = SegmentMeta {
            id: segment_id,
            level,
            key_count: tables.key_count(),
            doc_count: docs.len() as u64,
            tombstone_count: docs.tombstone_count() as u64,
            min_seq: ranges.map_or(u64::MAX, |r| r.min_seq),
            max_seq: ranges.map_or(0, |r| r.max_seq),
            min_timestamp: ranges.map_or(u64::MAX, |r| r.min_timestamp),
            max_timestamp: ranges.map_or(0, |r| r.max_timestamp),
            seg_file_len: tables.as_bytes().len() as u64,
            ids_file_len: docs.as_bytes().len() as u64,
            seg_footer_crc: tables.footer_crc(),
            ids_footer_crc: docs.footer_crc(),
        };
        let segment = Segment::open(&self.dir, &self.fs, meta, self.plan.k(), self.index_id)?;
        // Built from a memtable or from sound segments.
        segment.sound.store(true, Ordering::Release);
        // Just written, so in the page cache: map its pages now rather than
        // one fault at a time under queries, if it fits in memory with room
        // to spare (the rest of the index needs some too); otherwise only
        // its block indexes.
        let size = segment.meta.seg_file_len + segment.meta.ids_file_len;
        if fits_in_memory(size, 4, self.memory_budget) {
            segment.tables_map.prefault();
            segment.docs_map.prefault();
            if self.queried.load(Ordering::Relaxed) {
                segment.decode_tables(self)?;
            }
        } else {
            segment.set_out_of_memory();
            for (map, range) in segment.index_ranges() {
                map.read_range_until(range, || false);
            }
            segment.mark_indexes_read();
        }
        Ok(segment)
    }
}

impl Core {
    /// Whether a new segment of `key_count` keys in `tables` tables gets
    /// flat tables ([`Options::flat_tables`](super::Options::flat_tables)):
    /// not if it will not be expected in memory ([`fits_in_memory`], as
    /// [`Core::write_segment`] decides after writing it), as its queries
    /// then read ahead what they need, which the Rice-coded tables' staged
    /// search does and the flat search does not. A flat table takes at
    /// most about 8 bytes per key.
    pub(super) fn writes_flat(&self, key_count: u64, tables: usize) -> bool {
        let bytes = key_count.saturating_mul(8 * tables as u64);
        self.flat_tables && fits_in_memory(bytes, 4, self.memory_budget)
    }
}

/// See [`Segment::read_through`].
pub(super) struct ReadThrough(Vec<Arc<Segment>>);

impl Drop for ReadThrough {
    fn drop(&mut self) {
        for segment in &self.0 {
            segment.tables_map.advise_reads(true);
            segment.docs_map.advise_reads(true);
        }
    }
}

/// Whether `bytes` of segment files may be prefaulted whole: at most a
/// `share`-th of `budget` ([`Options::memory_budget`](super::Options::memory_budget)),
/// by default of the memory this process can fill ([`memory_limit`]), or
/// any size where that is unknown. Prefaulting more than fits would read
/// the files from the disk only to evict them again, competing with queries.
pub(super) fn fits_in_memory(bytes: u64, share: u64, budget: Option<u64>) -> bool {
    budget
        .or_else(memory_limit)
        .is_none_or(|limit| bytes <= limit / share.max(1))
}

impl Segment {
    /// Where its tables' and its doc map's block indexes lie, with the
    /// mapping each is in: what every query reads first, so what an open
    /// prefaults first, whatever the index's size.
    pub(super) fn index_ranges(&self) -> Vec<(Mapped, std::ops::Range<usize>)> {
        let tables = self
            .tables
            .index_ranges()
            .into_iter()
            .map(|r| (self.tables_map.clone(), file_range(r)));
        let docs = self
            .docs
            .index_ranges()
            .into_iter()
            .map(|range| (self.docs_map.clone(), range));
        tables.chain(docs).collect()
    }

    /// Marks the segment as not expected in memory
    /// ([`in_memory`](Self::in_memory)): its queries read their blocks
    /// ahead, and a page fault in its files reads that page only.
    pub(super) fn set_out_of_memory(&self) {
        self.in_memory.store(false, Ordering::Relaxed);
        self.tables_map.advise_reads(true);
        self.docs_map.advise_reads(true);
    }

    /// Notes that its block indexes ([`index_ranges`](Self::index_ranges))
    /// have been read whole: a query of a segment out of memory stops
    /// asking the kernel for a table's block index entry before loading it
    /// ([`SortedTables::warm_index`]). A page of them evicted since is read
    /// by the page fault of the search that loads it.
    pub(super) fn mark_indexes_read(&self) {
        self.indexes_read.store(true, Ordering::Relaxed);
    }

    /// For the guard's life, a merge reads the segments of `run` from start
    /// to end: those out of memory have their files read far ahead (a page
    /// at a time, they would take a disk read per page), then, when it
    /// drops, at random again for the queries that go on meanwhile.
    pub(super) fn read_through(run: &[Arc<Segment>]) -> ReadThrough {
        let out: Vec<Arc<Segment>> = run
            .iter()
            .filter(|s| !s.in_memory.load(Ordering::Relaxed))
            .cloned()
            .collect();
        for segment in &out {
            segment.tables_map.advise_reads(false);
            segment.docs_map.advise_reads(false);
        }
        ReadThrough(out)
    }

    /// Maps a published segment of an index searched at distance `k`,
    /// refusing files shorter than the manifest says before mapping them,
    /// and checking their footers and the segment's plan.
    pub(super) fn open(
        dir: &Path,
        fs: &Arc<dyn FileSystem>,
        meta: SegmentMeta,
        k: u32,
        index_id: u64,
    ) -> Result<Segment> {
        let seg_path = dir.join(FileKind::Segment.file_name(meta.id));
        let ids_path = dir.join(FileKind::DocMap.file_name(meta.id));
        let map = |path: &Path, expected_len: u64| -> Result<Mapped> {
            let len = fs.len(path).map_err(named_file_error(path, "stat"))?;
            if len != expected_len {
                return Err(Error::Corrupted {
                    path: path.to_path_buf(),
                    offset: len.min(expected_len),
                    reason: format!("the file is {len} bytes; the manifest says {expected_len}"),
                });
            }
            fs.map(path).map_err(io_error(path, "map"))
        };
        let tables_map = map(&seg_path, meta.seg_file_len)?;
        let tables =
            SegmentReader::new(tables_map.clone()).map_err(|e| corrupted(&seg_path, &e))?;
        let docs_map = map(&ids_path, meta.ids_file_len)?;
        let docs = DocMapReader::new(docs_map.clone()).map_err(|e| corrupted(&ids_path, &e))?;
        let mismatch = |path: &Path, what: &str| Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason: format!("{what} does not match the manifest"),
        };
        if tables.footer_crc() != meta.seg_footer_crc {
            return Err(mismatch(&seg_path, "the footer checksum"));
        }
        if docs.footer_crc() != meta.ids_footer_crc {
            return Err(mismatch(&ids_path, "the footer checksum"));
        }
        // The files' own headers (whose counts their readers checked against
        // the files' sizes) against the manifest's record: a count that
        // sizes an allocation is never taken from the manifest unchecked.
        let differs = |path: &Path, what: &str, file: u64, recorded: u64| Error::Corrupted {
            path: path.to_path_buf(),
            offset: 0,
            reason: format!("the file's {what} is {file}; the manifest records {recorded}"),
        };
        for (path, file) in [(&seg_path, tables.index_id()), (&ids_path, docs.index_id())] {
            if file != index_id {
                return Err(foreign(path, file, index_id));
            }
        }
        for (path, what, file, recorded) in [
            (&seg_path, "segment id", tables.segment_id(), meta.id),
            (&ids_path, "segment id", docs.segment_id(), meta.id),
            (&seg_path, "key count", tables.key_count(), meta.key_count),
            (&ids_path, "entry count", docs.len() as u64, meta.doc_count),
            (
                &ids_path,
                "tombstone count",
                docs.tombstone_count() as u64,
                meta.tombstone_count,
            ),
        ] {
            if file != recorded {
                return Err(differs(path, what, file, recorded));
            }
        }
        // Any plan of the index's k answers exactly; segments of one index
        // may differ in their number of tables.
        let info = tables.info();
        let plan = Plan::from_shape(info.shape, info.k)
            .ok()
            .filter(|plan| plan.k() == k && plan.tables().len() == tables.table_count())
            .ok_or_else(|| mismatch(&seg_path, "the plan"))?;
        let flat = FlatTables::open(&tables).map_err(|e| corrupted(&seg_path, &e))?;
        let layouts = if flat.is_some() {
            Vec::new()
        } else {
            (0..tables.table_count())
                .map(|t| tables.table(t).map(|table| table.layout()))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| corrupted(&seg_path, &e))?
        };
        Ok(Segment {
            meta,
            seg_path,
            ids_path,
            plan,
            tables,
            guided: layouts.iter().map(|_| OnceLock::new()).collect(),
            decoded: OnceLock::new(),
            flat,
            decoding: Mutex::new(()),
            layouts,
            in_memory: AtomicBool::new(true),
            indexes_read: AtomicBool::new(false),
            tables_map,
            docs,
            docs_map,
            sound: AtomicBool::new(false),
        })
    }

    /// Checks every checksum of both files, then that they agree: every
    /// table holds, under its permutation, exactly the distinct fingerprints
    /// of the doc map's entries, and the doc map's sequence numbers and
    /// timestamps span what the manifest records (queries order segments by
    /// them). Names the file that is wrong. Marks the segment sound.
    ///
    /// The key sets are compared by count and by a sum of a keyed hash of
    /// each key (keys drawn at random per call, so no file can be crafted to
    /// pass): O(1) memory, one pass over each table and the doc map.
    pub(super) fn verify(&self) -> Result<()> {
        self.tables
            .verify()
            .map_err(|e| corrupted(&self.seg_path, &e))?;
        self.docs
            .verify()
            .map_err(|e| corrupted(&self.ids_path, &e))?;
        let keys = SetHash::random_keys();
        let mut fingerprints = SetHash::new(keys);
        let mut last = None;
        let (mut seq, mut time) = ((u64::MAX, 0u64), (u64::MAX, 0u64));
        let mut span = |s: u64, t: u64| {
            seq = (seq.0.min(s), seq.1.max(s));
            time = (time.0.min(t), time.1.max(t));
        };
        for entry in self.docs.entries() {
            let e = entry.map_err(|e| corrupted(&self.ids_path, &e))?;
            if last != Some(e.fingerprint) {
                fingerprints.add(e.fingerprint);
                last = Some(e.fingerprint);
            }
            span(e.seq, e.timestamp);
        }
        for tombstone in self.docs.tombstones() {
            let t = tombstone.map_err(|e| corrupted(&self.ids_path, &e))?;
            span(t.seq, t.timestamp);
        }
        let recorded = (
            (self.meta.min_seq, self.meta.max_seq),
            (self.meta.min_timestamp, self.meta.max_timestamp),
        );
        if (seq, time) != recorded {
            return Err(Error::Corrupted {
                path: self.ids_path.clone(),
                offset: 0,
                reason: format!(
                    "its records span sequence numbers {}..={} and timestamps {}..={}; the manifest records {}..={} and {}..={}",
                    seq.0,
                    seq.1,
                    time.0,
                    time.1,
                    recorded.0.0,
                    recorded.0.1,
                    recorded.1.0,
                    recorded.1.1
                ),
            });
        }
        let mut tables = Vec::with_capacity(self.plan.tables().len());
        for (t, table) in self.plan.tables().iter().enumerate() {
            let reader = self
                .tables
                .keys(t)
                .map_err(|e| corrupted(&self.seg_path, &e))?;
            let mut held = SetHash::new(keys);
            for key in reader {
                held.add(table.unpermute(key.map_err(|e| corrupted(&self.seg_path, &e))?));
            }
            tables.push(held);
        }
        let Some(wrong) = tables.iter().position(|h| *h != fingerprints) else {
            if let Some(flat) = &self.flat {
                // Every chunk passed its check above (`tables.verify()`).
                flat.mark_all_checked();
            }
            self.sound.store(true, Ordering::Release);
            return Ok(());
        };
        if tables.iter().all(|h| *h == tables[0]) && tables.len() > 1 {
            // Every table agrees with the others and none with the doc map.
            return Err(Error::Corrupted {
                path: self.ids_path.clone(),
                offset: 0,
                reason: format!(
                    "its entries' {} distinct fingerprints are not the {} keys that all {} tables of its segment hold",
                    fingerprints.count,
                    tables[0].count,
                    tables.len()
                ),
            });
        }
        Err(Error::Corrupted {
            path: self.seg_path.clone(),
            offset: self.tables.table_offset(wrong).unwrap_or(0),
            reason: format!(
                "table {wrong} does not hold the doc map's {} distinct fingerprints under its permutation (it holds {} keys{})",
                fingerprints.count,
                tables[wrong].count,
                if tables.contains(&fingerprints) {
                    ", and other tables agree with the doc map"
                } else {
                    ""
                }
            ),
        })
    }

    /// Keeps a decoded copy of the tables ([`DecodedTables`]) if the copy
    /// holds at most [`Options::decoded_tables_up_to`](super::Options::decoded_tables_up_to)
    /// keys over all its tables and the segment's plan allows: queries then
    /// search it instead of the mapped blocks. The tables are read through
    /// their checked blocks; a damaged one is reported, naming the file.
    ///
    /// Once per segment, whichever threads ask (the prefault thread and the
    /// thread of the first query may both come to it): a thread that finds
    /// another decoding waits for it, then finds the copy made.
    ///
    /// A segment of flat tables gets no copy: its chunks are checked
    /// instead ([`FlatTables::check_all`]), once, with the same claim, so
    /// that queries stop checking the chunks they read.
    pub(super) fn decode_tables(&self, core: &Core) -> Result<()> {
        let key_count = self.meta.key_count;
        core.hooks.pause(Point::DecodeWanted);
        let _claim = lock(&self.decoding);
        if let Some(flat) = &self.flat {
            if flat.all_checked() {
                return Ok(());
            }
            core.hooks.pause(Point::DecodeStarted);
            return flat
                .check_all(self.tables.as_bytes())
                .map_err(|e| corrupted(&self.seg_path, &e));
        }
        if self.decoded.get().is_some() {
            return Ok(());
        }
        let Some(copy) = DecodedTables::plan_for(&self.plan, key_count, core.decoded_tables_up_to)
        else {
            return Ok(());
        };
        core.hooks.pause(Point::DecodeStarted);
        let decoded = DecodedTables::new(&self.plan, copy, key_count, |t| {
            Ok(self.tables.table(t)?.iter())
        })
        .map_err(|e| corrupted(&self.seg_path, &e))?;
        core.activity.decodes.fetch_add(1, Ordering::Relaxed);
        let _ = self.decoded.set(decoded);
        Ok(())
    }

    /// On the thread that opens the index, when the index fits in memory
    /// (`Index::open`): checks the chunks of the segment's flat tables
    /// ([`FlatTables::check_all_until`]), which maps their pages, so that
    /// the first queries neither check nor fault; `stop` is asked every
    /// 4 MiB. Returns false if it stopped (the rest is left to the prefault
    /// thread and the queries). A damaged chunk is left to the queries,
    /// which report it, as [`decode_tables`](Self::decode_tables) does.
    /// Nothing for a segment without flat tables.
    pub(super) fn check_at_open(&self, core: &Core, stop: impl FnMut() -> bool) -> bool {
        let Some(flat) = &self.flat else {
            return true;
        };
        let _claim = lock(&self.decoding);
        if flat.all_checked() {
            return true;
        }
        core.hooks.pause(Point::DecodeStarted);
        flat.check_all_until(self.tables.as_bytes(), stop)
            .unwrap_or(true)
    }

    /// On the thread that opens an index that fits in memory, once the
    /// flat tables are checked ([`check_at_open`](Self::check_at_open)):
    /// maps the doc map's pages, its block indexes first, so that the
    /// first queries that find a document take no page fault in it
    /// (docs/BENCHMARKS.md, "The open maps the doc maps too"); `stop` is
    /// asked every 16 MiB. Returns false if it stopped or the kernel
    /// failed (the rest is left to the prefault thread and the queries).
    /// Nothing is checked: a lookup checks each block's CRC on its first
    /// read, as before.
    pub(super) fn map_doc_map_at_open(&self, stop: impl Fn() -> bool + Copy) -> bool {
        let indexes = self.docs.index_ranges();
        indexes
            .into_iter()
            .chain(std::iter::once(0..self.docs_map.len()))
            .all(|range| self.docs_map.prefault_range_until(range, stop))
    }

    /// What is left for the prefault thread to map once the open has
    /// checked the flat tables and mapped the doc map: nothing of a
    /// segment of flat tables whose every chunk passed (the check read
    /// them whole), otherwise (Rice-coded tables, or a damaged chunk that
    /// stopped the check) the block indexes and then the whole file.
    pub(super) fn tables_left_after_open(&self) -> Vec<(Mapped, std::ops::Range<usize>)> {
        if self.flat.as_ref().is_some_and(FlatTables::all_checked) {
            return Vec::new();
        }
        let map = &self.tables_map;
        self.tables
            .index_ranges()
            .into_iter()
            .map(|r| (map.clone(), file_range(r)))
            .chain(std::iter::once((map.clone(), 0..map.len())))
            .collect()
    }

    /// Heap bytes of the decoded tables (0 without them).
    pub(super) fn decoded_bytes(&self) -> usize {
        self.decoded.get().map_or(0, DecodedTables::bytes)
    }

    /// Distinct fingerprints of this segment within `k` of `fp`, each once
    /// (the search of [`search::probe`] over this segment's tables, or of
    /// their decoded copy).
    ///
    /// In a segment out of memory, the doc map's entry block of each
    /// fingerprint found is asked for as soon as it is found
    /// ([`ask_for_docs`](Self::ask_for_docs)).
    pub(super) fn matching_fingerprints(&self, fp: u64, k: u32) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        let out_of_memory = !self.in_memory.load(Ordering::Relaxed);
        let mut found = |fingerprint: u64| {
            if out_of_memory {
                self.ask_for_docs(fingerprint);
            }
            out.push(fingerprint);
        };
        if let Some(flat) = &self.flat {
            flat.search_many(self.tables.as_bytes(), &self.plan, &[fp], k, |_, hit| {
                found(hit.fingerprint);
            })
            .map_err(|e| corrupted(&self.seg_path, &e))?;
            return Ok(out);
        }
        if let Some(decoded) = self.decoded.get() {
            decoded.search_many(&[fp], k, |_, hit| found(hit.fingerprint));
            return Ok(out);
        }
        search::probe(&self.plan, self, fp, k, |hit| found(hit.fingerprint))?;
        Ok(out)
    }

    /// Asks the kernel to read the doc map's entry block that a lookup of
    /// `fp` reads first ([`DocMapReader::fingerprint_block_span`]), without
    /// waiting: for a segment out of memory, whose query would otherwise
    /// learn the block's place only after the table search, then fault its
    /// pages in one after another. The search of the other tables goes on
    /// while it is read. The lookup reads the block through its checksum as
    /// ever.
    fn ask_for_docs(&self, fp: u64) {
        if let Some(span) = self.docs.fingerprint_block_span(fp) {
            self.docs_map.will_need(span);
        }
    }

    /// [`matching_fingerprints`](Self::matching_fingerprints) for each of
    /// `fps`, searched together ([`search::probe_many`]): `found(i, fp)` for
    /// each fingerprint `fp` within `k` of `fps[i]`.
    pub(super) fn matching_fingerprints_many(
        &self,
        fps: &[u64],
        k: u32,
        mut found: impl FnMut(usize, u64),
    ) -> Result<()> {
        let out_of_memory = !self.in_memory.load(Ordering::Relaxed);
        let mut found = |i: usize, fingerprint: u64| {
            if out_of_memory {
                self.ask_for_docs(fingerprint);
            }
            found(i, fingerprint);
        };
        if let Some(flat) = &self.flat {
            return flat
                .search_many(self.tables.as_bytes(), &self.plan, fps, k, |i, hit| {
                    found(i, hit.fingerprint);
                })
                .map_err(|e| corrupted(&self.seg_path, &e));
        }
        if let Some(decoded) = self.decoded.get() {
            decoded.search_many(fps, k, |i, hit| found(i, hit.fingerprint));
            return Ok(());
        }
        search::probe_many(&self.plan, self, fps, k, |i, hit| {
            found(i, hit.fingerprint);
        })
    }

    pub(super) fn by_id(&self, id: u64) -> Result<Option<DocEntry<'_>>> {
        self.docs
            .by_id(id)
            .map_err(|e| corrupted(&self.ids_path, &e))
    }

    /// Whether this segment's doc map also holds a tombstone of `entry`'s
    /// id that is newer than it (sequence numbers decide; docs/FORMAT.md,
    /// "Doc map file"). The engine never writes both for one id, but the
    /// format allows it.
    pub(super) fn deletes_here(&self, entry: &DocEntry<'_>) -> Result<bool> {
        if self.meta.tombstone_count == 0 {
            return Ok(false);
        }
        Ok(self.tombstone(entry.id)?.is_some_and(|t| t.seq > entry.seq))
    }

    pub(super) fn tombstone(&self, id: u64) -> Result<Option<Tombstone>> {
        self.docs
            .tombstone(id)
            .map_err(|e| corrupted(&self.ids_path, &e))
    }
}

/// A digest of a set of distinct `u64`s: their number and two sums of a
/// keyed hash. Two sets with equal digests are equal, but for a chance of
/// about 2^-128 that no file can aim at without the keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SetHash {
    pub(super) keys: (u64, u64),
    pub(super) count: u64,
    sums: (u64, u64),
}

impl SetHash {
    fn random_keys() -> (u64, u64) {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        (state.hash_one(1u64), state.hash_one(2u64))
    }

    pub(super) fn new(keys: (u64, u64)) -> SetHash {
        SetHash {
            keys,
            count: 0,
            sums: (0, 0),
        }
    }

    fn add(&mut self, x: u64) {
        let h = fmix64(x ^ self.keys.0);
        self.count += 1;
        self.sums.0 = self.sums.0.wrapping_add(h);
        self.sums.1 = self.sums.1.wrapping_add(fmix64(h ^ self.keys.1));
    }
}

/// MurmurHash3's 64-bit finaliser: a bijection that mixes every bit.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl SortedTables for Segment {
    type Error = Error;
    type Table<'a> = (crate::format::TableReader<'a>, &'a Segment);

    fn table(&self, t: usize) -> Result<Self::Table<'_>> {
        let file = self.tables.as_bytes();
        let reopened = self.guided.get(t).and_then(|cell| {
            let layout = match cell.get() {
                Some(layout) => layout,
                None => {
                    // A reader that cannot read its guide searches
                    // without it (below), and reports what it finds.
                    let guided = TableReader::reopen(file, self.layouts.get(t)?)?
                        .guided()
                        .ok()?;
                    cell.get_or_init(|| guided.layout())
                }
            };
            TableReader::reopen(file, layout)
        });
        let reader = match reopened {
            Some(reader) => reader,
            None => self
                .tables
                .table(t)
                .map_err(|e| corrupted(&self.seg_path, &e))?,
        };
        Ok((reader, self))
    }

    #[inline]
    fn keys_in(
        (reader, segment): &Self::Table<'_>,
        lo: u64,
        hi: u64,
        mut visit: impl FnMut(u64),
    ) -> Result<()> {
        for key in reader.range(lo, hi) {
            visit(key.map_err(|e| corrupted(&segment.seg_path, &e))?);
        }
        Ok(())
    }

    /// One [`Range`](crate::format::table::Range) for all the ranges, moved
    /// on from one to the next ([`seek`](crate::format::table::Range::seek)):
    /// a range that starts in the block where the previous one ended, or in
    /// the next, is decoded on from there, without another search of the
    /// block index or another check of the block's CRC.
    #[inline]
    fn keys_in_each(
        (reader, segment): &Self::Table<'_>,
        mut ranges: impl Iterator<Item = (u64, u64)>,
        mut visit: impl FnMut(u64),
    ) -> Result<()> {
        let Some((lo, hi)) = ranges.next() else {
            return Ok(());
        };
        let mut keys = reader.range(lo, hi);
        loop {
            for key in &mut keys {
                visit(key.map_err(|e| corrupted(&segment.seg_path, &e))?);
            }
            match ranges.next() {
                Some((lo, hi)) => keys.seek(lo, hi),
                None => return Ok(()),
            }
        }
    }

    /// In memory, or once an out-of-memory segment's block indexes have
    /// been read ([`Segment::mark_indexes_read`]), loads the block index
    /// entry; otherwise asks the kernel to read it, without waiting (the
    /// stage's reads then go to the disk together: the first queries after
    /// an open run before its prefault thread has read the block indexes).
    #[inline]
    fn warm_index((reader, segment): &Self::Table<'_>, lo: u64) {
        if segment.in_memory.load(Ordering::Relaxed) || segment.indexes_read.load(Ordering::Relaxed)
        {
            reader.warm_index(lo);
        } else if let Some(span) = reader.index_entry_span(lo) {
            segment.tables_map.will_need(file_range(span));
        }
    }

    /// In memory, loads the block index entries the search reads next;
    /// otherwise nothing (they are almost always on the page asked for by
    /// [`warm_index`](Self::warm_index)).
    #[inline]
    fn warm_near((reader, segment): &Self::Table<'_>, lo: u64) {
        if segment.in_memory.load(Ordering::Relaxed) {
            reader.warm_near(lo);
        }
    }

    /// As [`warm_index`](Self::warm_index), for the block.
    #[inline]
    fn warm_keys((reader, segment): &Self::Table<'_>, lo: u64) {
        if segment.in_memory.load(Ordering::Relaxed) {
            reader.warm_block(lo);
        } else if let Some(span) = reader.block_span(lo) {
            segment.tables_map.will_need(file_range(span));
        }
    }

    /// As [`warm_keys`](Self::warm_keys), in memory for the blocks the
    /// whole range is expected to span.
    #[inline]
    fn warm_run((reader, segment): &Self::Table<'_>, lo: u64, hi: u64) {
        if segment.in_memory.load(Ordering::Relaxed) {
            reader.warm_run(lo, hi);
        } else if let Some(span) = reader.block_span(lo) {
            segment.tables_map.will_need(file_range(span));
        }
    }
}

/// File offsets as a range of a mapping's bytes (past its end if they do
/// not fit a `usize`, which the mapping then clamps).
fn file_range(span: std::ops::Range<u64>) -> std::ops::Range<usize> {
    let at = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    at(span.start)..at(span.end)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn short_blocks_up_to_16_m_keys_and_for_probed_plans() {
        let flat = Plan::new(5, 3).unwrap();
        assert_eq!(block_len(&flat, 0), 32);
        assert_eq!(block_len(&flat, 16 << 20), 32);
        assert_eq!(block_len(&flat, (16 << 20) + 1), 128);
        let probed = Plan::probed(2, 1, 3).unwrap();
        assert_eq!(block_len(&probed, 1 << 40), 32);
    }

    /// An unprobed plan's flat directory stops at 20 bits from 2^23 keys
    /// to 2^26 (50 M fingerprints: 20 bits, not 23), then grows again a
    /// bit per doubling; a probed plan's keeps `log2 - 2` bits up to 26;
    /// a prefix shorter than either bounds both.
    #[test]
    fn unprobed_flat_directories_stop_at_20_bits_up_to_64_m_keys() {
        let ten = Plan::new(5, 3).unwrap();
        let four = Plan::new(4, 3).unwrap();
        let probed = Plan::probed(2, 1, 3).unwrap();
        let bits = |plan: &Plan, keys: u64| {
            let table = &plan.tables()[0];
            flat_bits(table, keys, plan.radius() > 0).unwrap()
        };
        assert!(ten.tables().iter().all(|t| t.prefix_bits() >= 25));
        for (keys, unprobed, probed_bits) in [
            (1_000, 8, 8),
            (1 << 22, 20, 20),
            ((1 << 23) - 1, 20, 20),
            (1 << 23, 20, 21),
            (50_000_000, 20, 23),
            ((1 << 26) + 1, 20, 24),
            (1 << 27, 21, 25),
            (1 << 30, 24, 26),
        ] {
            assert_eq!(bits(&ten, keys), unprobed, "{keys} keys, 10 tables");
            assert_eq!(bits(&probed, keys), probed_bits, "{keys} keys, probed");
            assert_eq!(bits(&four, keys), unprobed.min(16), "{keys} keys, 4 tables");
        }
        assert_eq!(
            flat_bits(&ten.tables()[0], u64::from(u32::MAX), false),
            None
        );
    }
}
