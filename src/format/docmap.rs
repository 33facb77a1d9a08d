//! Doc map files: the documents of one segment (fingerprint, id, sequence
//! number, timestamp, optional name) sorted by fingerprint, an index sorted by
//! id, and the segment's tombstones.
//!
//! Every record carries its own CRC32 (an entry's also covers its name), and
//! every lookup checks the records it returns and the records that bound a
//! binary search, so a damaged record is reported, never silently used or
//! skipped. See docs/FORMAT.md#doc-map-file.

use std::io::Write;
use std::ops::Range;

use super::bytes::{check_crc, crc32, to_u64, to_usize, u32_at, u64_at};
use super::container::{Container, ContainerWriter};
use super::{EncodeError, FileKind, FormatError, FormatErrorKind, MAX_NAME_LEN};

const FILE: FileKind = FileKind::DocMap;
/// Magic, version, segment id, entry count, tombstone count, index id, CRC.
const HEADER_LEN: usize = 48;
const ENTRY_LEN: usize = 48;
const ID_LEN: usize = 16;
const TOMBSTONE_LEN: usize = 28;
const SECTIONS: usize = 4;
/// The name length that means "no name".
const NO_NAME: u32 = u32::MAX;

/// One document of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DocEntry<'a> {
    /// The document's fingerprint (not permuted).
    pub fingerprint: u64,
    /// The document id.
    pub id: u64,
    /// The write's sequence number: across segments, the highest wins.
    pub seq: u64,
    /// Insert time, milliseconds since the Unix epoch (for retention).
    pub timestamp: u64,
    /// The optional name (a URL or path), at most [`MAX_NAME_LEN`] bytes.
    pub name: Option<&'a str>,
}

/// A delete that must hide the id in older segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tombstone {
    /// The deleted document id.
    pub id: u64,
    /// The delete's sequence number.
    pub seq: u64,
    /// Delete time, milliseconds since the Unix epoch.
    pub timestamp: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct PendingEntry {
    fingerprint: u64,
    id: u64,
    seq: u64,
    timestamp: u64,
    name_start: usize,
    name_len: u32,
}

/// Collects a segment's documents and tombstones in any order; sorts and
/// encodes them in [`finish`](Self::finish).
///
/// An id may appear at most once among the entries and at most once among
/// the tombstones (the engine resolves upserts before writing a segment).
#[derive(Debug, Default)]
pub struct DocMapWriter {
    index_id: u64,
    segment_id: u64,
    entries: Vec<PendingEntry>,
    names: Vec<u8>,
    tombstones: Vec<Tombstone>,
    /// Smallest and largest sequence number and timestamp pushed so far.
    ranges: Option<Ranges>,
}

/// The sequence numbers and timestamps of a doc map's entries and
/// tombstones: the smallest and largest of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    /// Smallest sequence number.
    pub min_seq: u64,
    /// Largest sequence number.
    pub max_seq: u64,
    /// Earliest timestamp.
    pub min_timestamp: u64,
    /// Latest timestamp.
    pub max_timestamp: u64,
}

impl Ranges {
    fn include(ranges: &mut Option<Ranges>, seq: u64, timestamp: u64) {
        let r = ranges.get_or_insert(Ranges {
            min_seq: seq,
            max_seq: seq,
            min_timestamp: timestamp,
            max_timestamp: timestamp,
        });
        r.min_seq = r.min_seq.min(seq);
        r.max_seq = r.max_seq.max(seq);
        r.min_timestamp = r.min_timestamp.min(timestamp);
        r.max_timestamp = r.max_timestamp.max(timestamp);
    }
}

impl DocMapWriter {
    /// A writer for the doc map of segment `segment_id` of index `index_id`.
    pub fn new(index_id: u64, segment_id: u64) -> Self {
        DocMapWriter {
            index_id,
            segment_id,
            ..DocMapWriter::default()
        }
    }

    /// Adds a document (its name is copied).
    pub fn push(&mut self, entry: DocEntry<'_>) -> Result<(), EncodeError> {
        let name_len = match entry.name {
            Some(name) if name.len() > MAX_NAME_LEN => {
                return Err(EncodeError::NameTooLong {
                    id: entry.id,
                    len: name.len(),
                });
            }
            Some(name) => name.len() as u32,
            None => NO_NAME,
        };
        Ranges::include(&mut self.ranges, entry.seq, entry.timestamp);
        let name_start = self.names.len();
        self.names
            .extend_from_slice(entry.name.unwrap_or_default().as_bytes());
        self.entries.push(PendingEntry {
            fingerprint: entry.fingerprint,
            id: entry.id,
            seq: entry.seq,
            timestamp: entry.timestamp,
            name_start,
            name_len,
        });
        Ok(())
    }

    /// Adds a tombstone.
    pub fn push_tombstone(&mut self, tombstone: Tombstone) {
        Ranges::include(&mut self.ranges, tombstone.seq, tombstone.timestamp);
        self.tombstones.push(tombstone);
    }

    /// The sequence numbers and timestamps pushed so far (`None` before the
    /// first entry or tombstone).
    pub fn ranges(&self) -> Option<Ranges> {
        self.ranges
    }

    /// Documents added so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no document was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Encodes into a new `Vec<u8>`.
    pub fn finish(self) -> Result<Vec<u8>, EncodeError> {
        self.finish_into(Vec::new())
    }

    /// Encodes into `out`.
    pub fn finish_into<W: Write>(mut self, out: W) -> Result<W, EncodeError> {
        if u32::try_from(self.entries.len()).is_err() {
            return Err(EncodeError::Invalid(
                "a doc map holds at most 2^32 - 1 documents",
            ));
        }
        crate::radix::sort_by_top_bits(
            &mut self.entries,
            |e| e.fingerprint,
            |e| (e.fingerprint, e.id),
        );
        // (id, position) pairs sorted directly: sorting positions by a key
        // looked up in `entries` would miss the cache on every comparison.
        let mut by_id: Vec<(u64, u32)> = self
            .entries
            .iter()
            .zip(0u32..)
            .map(|(e, position)| (e.id, position))
            .collect();
        by_id.sort_unstable();
        self.tombstones.sort_unstable();
        let mut w = SortedDocMapWriter::new(
            out,
            self.index_id,
            self.segment_id,
            to_u64(self.entries.len()),
            to_u64(self.tombstones.len()),
        )?;
        for e in &self.entries {
            let name = match e.name_len {
                NO_NAME => None,
                len => Some(
                    self.names
                        .get(e.name_start..e.name_start + len as usize)
                        .unwrap_or_default(),
                ),
            };
            w.push_raw(e.fingerprint, e.id, e.seq, e.timestamp, name)?;
        }
        for &(id, position) in &by_id {
            w.push_id(id, position)?;
        }
        for &t in &self.tombstones {
            w.push_tombstone(t)?;
        }
        w.finish()
    }
}

/// A 64-bit hash of an (id, position) pair: the sum over the entries equals
/// the sum over the id index exactly when both hold the same pairs, barring
/// a collision (about 2^-64 for pairs that differ), which checks the index
/// without looking up each record's entry. The id is mixed before the
/// position joins it, so no linear relation between ids and positions can
/// make two different pairs hash alike.
fn pair_hash(id: u64, position: u32) -> u64 {
    mix(mix(id ^ 0x9e37_79b9_7f4a_7c15) ^ u64::from(position))
}

/// splitmix64's finaliser: a bijection on `u64` that spreads every bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which section a [`SortedDocMapWriter`] is writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Entries,
    Ids,
    Tombstones,
}

/// Writes a doc map whose records arrive in file order, straight to `out`:
/// the entries sorted by (fingerprint, id), then the id index sorted by id,
/// then the tombstones sorted by id, with the counts declared up front. Only
/// the names (written last) are held. A merge of sorted doc maps uses it to
/// avoid collecting and re-sorting every record; [`DocMapWriter`] uses it
/// after sorting.
///
/// Every push checks the order and the counts, and `finish` checks that the
/// id index maps each id to the entry with that id (through a sum of pair
/// hashes), so a finished file is well formed.
#[derive(Debug)]
pub struct SortedDocMapWriter<W: Write> {
    container: ContainerWriter<W>,
    entry_count: u64,
    tombstone_count: u64,
    /// Sums of [`pair_hash`] over the (id, position) pairs of the entries
    /// and of the id index records: equal when the index is consistent.
    entry_pairs: u64,
    id_pairs: u64,
    names: Vec<u8>,
    phase: Phase,
    /// The previous record's sort key in the current section.
    last: Option<(u64, u64)>,
    /// Records written in the current section.
    written: u64,
    ranges: Option<Ranges>,
    record: Vec<u8>,
}

impl<W: Write> SortedDocMapWriter<W> {
    /// Writes the header of a doc map of `entry_count` documents and
    /// `tombstone_count` tombstones for segment `segment_id` of index
    /// `index_id`.
    pub fn new(
        out: W,
        index_id: u64,
        segment_id: u64,
        entry_count: u64,
        tombstone_count: u64,
    ) -> Result<Self, EncodeError> {
        if u32::try_from(entry_count).is_err() {
            return Err(EncodeError::Invalid(
                "a doc map holds at most 2^32 - 1 documents",
            ));
        }
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(&FILE.magic());
        header.extend_from_slice(&super::FORMAT_VERSION.to_le_bytes());
        header.extend_from_slice(&segment_id.to_le_bytes());
        header.extend_from_slice(&entry_count.to_le_bytes());
        header.extend_from_slice(&tombstone_count.to_le_bytes());
        header.extend_from_slice(&index_id.to_le_bytes());
        Ok(SortedDocMapWriter {
            container: ContainerWriter::new(out, FILE, &header)?,
            entry_count,
            tombstone_count,
            entry_pairs: 0,
            id_pairs: 0,
            names: Vec::new(),
            phase: Phase::Entries,
            last: None,
            written: 0,
            ranges: None,
            record: Vec::with_capacity(ENTRY_LEN),
        })
    }

    /// Records section `phase` must hold.
    fn declared(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Entries | Phase::Ids => self.entry_count,
            Phase::Tombstones => self.tombstone_count,
        }
    }

    /// Moves on to section `phase`, closing the ones before it (each must
    /// hold exactly its declared number of records).
    fn advance(&mut self, phase: Phase) -> Result<(), EncodeError> {
        while self.phase < phase {
            if self.written != self.declared(self.phase) {
                return Err(EncodeError::Invalid(
                    "a doc map section got fewer records than declared",
                ));
            }
            self.container.end_section();
            self.phase = match self.phase {
                Phase::Entries => Phase::Ids,
                Phase::Ids | Phase::Tombstones => Phase::Tombstones,
            };
            self.last = None;
            self.written = 0;
        }
        if self.phase != phase {
            return Err(EncodeError::Invalid(
                "doc map records pushed after a later section",
            ));
        }
        Ok(())
    }

    /// [`advance`](Self::advance)s to `phase` to write one more record.
    fn enter(&mut self, phase: Phase) -> Result<(), EncodeError> {
        self.advance(phase)?;
        if self.written >= self.declared(phase) {
            return Err(EncodeError::Invalid(
                "a doc map section got more records than declared",
            ));
        }
        Ok(())
    }

    /// Checks that `key` follows the previous record's key.
    fn check_order(&mut self, key: (u64, u64), id: u64) -> Result<(), EncodeError> {
        match self.last {
            Some(last) if last == key => return Err(EncodeError::DuplicateId { id }),
            Some(last) if last > key => {
                return Err(EncodeError::Invalid("doc map records out of order"));
            }
            _ => {}
        }
        self.last = Some(key);
        Ok(())
    }

    /// Writes the next entry (in (fingerprint, id) order) and returns its
    /// position.
    pub fn push(&mut self, entry: DocEntry<'_>) -> Result<u32, EncodeError> {
        self.push_raw(
            entry.fingerprint,
            entry.id,
            entry.seq,
            entry.timestamp,
            entry.name.map(str::as_bytes),
        )
    }

    fn push_raw(
        &mut self,
        fingerprint: u64,
        id: u64,
        seq: u64,
        timestamp: u64,
        name: Option<&[u8]>,
    ) -> Result<u32, EncodeError> {
        self.enter(Phase::Entries)?;
        let name_len = match name {
            Some(name) if name.len() > MAX_NAME_LEN => {
                return Err(EncodeError::NameTooLong {
                    id,
                    len: name.len(),
                });
            }
            Some(name) => name.len() as u32,
            None => NO_NAME,
        };
        self.check_order((fingerprint, id), id)?;
        Ranges::include(&mut self.ranges, seq, timestamp);
        let name = name.unwrap_or_default();
        let record = &mut self.record;
        record.clear();
        record.extend_from_slice(&fingerprint.to_le_bytes());
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(&timestamp.to_le_bytes());
        record.extend_from_slice(&to_u64(self.names.len()).to_le_bytes());
        record.extend_from_slice(&name_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(record);
        crc.update(name);
        record.extend_from_slice(&crc.finalize().to_le_bytes());
        self.container.sink().write_all(record)?;
        self.names.extend_from_slice(name);
        let position = self.written as u32;
        self.entry_pairs = self.entry_pairs.wrapping_add(pair_hash(id, position));
        self.written += 1;
        Ok(position)
    }

    /// Writes the next id index record (in id order): document `id` is the
    /// entry at `position`. Every entry must have been pushed.
    pub fn push_id(&mut self, id: u64, position: u32) -> Result<(), EncodeError> {
        self.enter(Phase::Ids)?;
        self.check_order((id, 0), id)?;
        if u64::from(position) >= self.entry_count {
            return Err(EncodeError::Invalid(
                "a doc map id index record names a position past the entries",
            ));
        }
        self.id_pairs = self.id_pairs.wrapping_add(pair_hash(id, position));
        let record = &mut self.record;
        record.clear();
        record.extend_from_slice(&id.to_le_bytes());
        record.extend_from_slice(&position.to_le_bytes());
        let crc = crc32(record);
        record.extend_from_slice(&crc.to_le_bytes());
        self.container.sink().write_all(record)?;
        self.written += 1;
        Ok(())
    }

    /// Writes the next tombstone (in id order). Every entry and id index
    /// record must have been pushed.
    pub fn push_tombstone(&mut self, tombstone: Tombstone) -> Result<(), EncodeError> {
        self.enter(Phase::Tombstones)?;
        self.check_order((tombstone.id, 0), tombstone.id)?;
        Ranges::include(&mut self.ranges, tombstone.seq, tombstone.timestamp);
        let record = &mut self.record;
        record.clear();
        record.extend_from_slice(&tombstone.id.to_le_bytes());
        record.extend_from_slice(&tombstone.seq.to_le_bytes());
        record.extend_from_slice(&tombstone.timestamp.to_le_bytes());
        let crc = crc32(record);
        record.extend_from_slice(&crc.to_le_bytes());
        self.container.sink().write_all(record)?;
        self.written += 1;
        Ok(())
    }

    /// The sequence numbers and timestamps pushed so far (`None` before the
    /// first entry or tombstone).
    pub fn ranges(&self) -> Option<Ranges> {
        self.ranges
    }

    /// Writes the names, the directory and the footer; every declared record
    /// must have been pushed.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        self.advance(Phase::Tombstones)?;
        if self.id_pairs != self.entry_pairs {
            return Err(EncodeError::Invalid(
                "a doc map id index does not map its ids to their entries",
            ));
        }
        if self.written != self.tombstone_count {
            return Err(EncodeError::Invalid(
                "a doc map section got fewer records than declared",
            ));
        }
        self.container.end_section();
        self.container.sink().write_all(&self.names)?;
        self.container.end_section();
        Ok(self.container.finish()?)
    }
}

/// Where the sections are; offsets only, so the reader can own its bytes.
#[derive(Debug, Clone)]
struct Layout {
    entries: Range<usize>,
    ids: Range<usize>,
    tombstones: Range<usize>,
    names: Range<usize>,
    entry_count: usize,
    tombstone_count: usize,
}

/// The sections of a doc map, borrowed; all lookups work on this.
#[derive(Debug, Clone, Copy)]
struct View<'a> {
    entries: &'a [u8],
    entries_at: u64,
    ids: &'a [u8],
    ids_at: u64,
    tombstones: &'a [u8],
    tombstones_at: u64,
    names: &'a [u8],
    entry_count: usize,
    tombstone_count: usize,
}

fn record(section: &[u8], len: usize, i: usize) -> Option<&[u8]> {
    let start = i.checked_mul(len)?;
    section.get(start..start.checked_add(len)?)
}

/// Index of the first of `count` sorted records whose key is `>= key`.
fn lower_bound(count: usize, key: u64, key_of: impl Fn(usize) -> Option<u64>) -> usize {
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // An unreadable key cannot happen after the open checks; treating it
        // as "smaller" keeps the search finite, and the bounds are checked.
        if key_of(mid).is_none_or(|k| k < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl<'a> View<'a> {
    fn at(&self, section_at: u64, len: usize, i: usize) -> u64 {
        section_at + to_u64(i.saturating_mul(len))
    }

    fn malformed(&self, section_at: u64, len: usize, i: usize, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.at(section_at, len, i), what)
    }

    fn entry_fingerprint(&self, i: usize) -> Option<u64> {
        u64_at(record(self.entries, ENTRY_LEN, i)?, 0)
    }

    /// Entry `i`, its CRC and its name checked.
    fn entry(&self, i: usize) -> Result<DocEntry<'a>, FormatError> {
        let rec = record(self.entries, ENTRY_LEN, i).ok_or_else(|| {
            self.malformed(self.entries_at, ENTRY_LEN, i, "no such doc map entry")
        })?;
        let field = |at| u64_at(rec, at).unwrap_or_default();
        let name_offset = field(32);
        let name_len = u32_at(rec, 40).unwrap_or_default();
        let stored = u32_at(rec, 44).unwrap_or_default();
        let name_bytes = match name_len {
            NO_NAME => Some(&[][..]),
            len => to_usize(name_offset)
                .and_then(|start| self.names.get(start..start.checked_add(len as usize)?)),
        };
        let Some(name_bytes) = name_bytes else {
            return Err(self.malformed(
                self.entries_at,
                ENTRY_LEN,
                i,
                "a document's name lies outside the names section",
            ));
        };
        let mut crc = crc32fast::Hasher::new();
        crc.update(rec.get(..44).unwrap_or_default());
        crc.update(name_bytes);
        let computed = crc.finalize();
        if computed != stored {
            return Err(FormatError::new(
                FILE,
                self.at(self.entries_at, ENTRY_LEN, i),
                FormatErrorKind::ChecksumMismatch {
                    expected: stored,
                    got: computed,
                },
            ));
        }
        let name = match name_len {
            NO_NAME => None,
            _ => Some(std::str::from_utf8(name_bytes).map_err(|_| {
                self.malformed(
                    self.entries_at,
                    ENTRY_LEN,
                    i,
                    "a document's name is not UTF-8",
                )
            })?),
        };
        Ok(DocEntry {
            fingerprint: field(0),
            id: field(8),
            seq: field(16),
            timestamp: field(24),
            name,
        })
    }

    /// Id index record `i`: (id, entry position), its CRC checked.
    fn id_record(&self, i: usize) -> Result<(u64, usize), FormatError> {
        let rec = record(self.ids, ID_LEN, i)
            .ok_or_else(|| self.malformed(self.ids_at, ID_LEN, i, "no such id index record"))?;
        let covered = rec.get(..12).unwrap_or_default();
        check_crc(
            FILE,
            self.at(self.ids_at, ID_LEN, i),
            covered,
            u32_at(rec, 12).unwrap_or_default(),
        )?;
        let id = u64_at(rec, 0).unwrap_or_default();
        let position = u32_at(rec, 8).unwrap_or_default() as usize;
        Ok((id, position))
    }

    fn tombstone(&self, i: usize) -> Result<Tombstone, FormatError> {
        let rec = record(self.tombstones, TOMBSTONE_LEN, i).ok_or_else(|| {
            self.malformed(self.tombstones_at, TOMBSTONE_LEN, i, "no such tombstone")
        })?;
        let covered = rec.get(..24).unwrap_or_default();
        check_crc(
            FILE,
            self.at(self.tombstones_at, TOMBSTONE_LEN, i),
            covered,
            u32_at(rec, 24).unwrap_or_default(),
        )?;
        let field = |at| u64_at(rec, at).unwrap_or_default();
        Ok(Tombstone {
            id: field(0),
            seq: field(8),
            timestamp: field(16),
        })
    }

    fn by_id(&self, id: u64) -> Result<Option<DocEntry<'a>>, FormatError> {
        let n = self.entry_count;
        let p = lower_bound(n, id, |i| u64_at(record(self.ids, ID_LEN, i)?, 0));
        // The records either side of the boundary decide the answer; with
        // both checked, the (sorted, as written) index cannot mislead it.
        if p > 0 {
            let (below, _) = self.id_record(p - 1)?;
            if below >= id {
                return Err(self.malformed(
                    self.ids_at,
                    ID_LEN,
                    p - 1,
                    "the id index is not sorted",
                ));
            }
        }
        if p == n {
            return Ok(None);
        }
        let (found, position) = self.id_record(p)?;
        if found != id {
            return Ok(None);
        }
        let entry = self.entry(position)?;
        if entry.id != id {
            return Err(self.malformed(
                self.ids_at,
                ID_LEN,
                p,
                "the id index points to an entry with another id",
            ));
        }
        Ok(Some(entry))
    }

    fn find_tombstone(&self, id: u64) -> Result<Option<Tombstone>, FormatError> {
        let n = self.tombstone_count;
        let p = lower_bound(n, id, |i| {
            u64_at(record(self.tombstones, TOMBSTONE_LEN, i)?, 0)
        });
        if p > 0 && self.tombstone(p - 1)?.id >= id {
            return Err(self.malformed(
                self.tombstones_at,
                TOMBSTONE_LEN,
                p - 1,
                "the tombstones are not sorted by id",
            ));
        }
        if p == n {
            return Ok(None);
        }
        let t = self.tombstone(p)?;
        Ok((t.id == id).then_some(t))
    }
}

/// A doc map file, checked cheaply when opened (header, footer, directory,
/// section sizes); records are checked as they are read, and all at once by
/// [`verify`](Self::verify).
#[derive(Debug, Clone)]
pub struct DocMapReader<D> {
    data: D,
    container: Container,
    layout: Layout,
    index_id: u64,
    segment_id: u64,
}

impl<D: AsRef<[u8]>> DocMapReader<D> {
    /// Opens a doc map. Costs O(1).
    pub fn new(data: D) -> Result<Self, FormatError> {
        let bytes = data.as_ref();
        let (container, header) = Container::open(bytes, FILE, HEADER_LEN)?;
        let field = |at| u64_at(header, at).unwrap_or_default();
        let segment_id = field(12);
        let (entry_count, tombstone_count) = (field(20), field(28));
        let index_id = field(36);
        if container.section_count() != SECTIONS {
            return Err(FormatError::malformed(
                FILE,
                0,
                "a doc map must have exactly 4 sections",
            ));
        }
        let mut ranges = Vec::with_capacity(SECTIONS);
        for i in 0..SECTIONS {
            let s = container.section(bytes, i)?;
            let start = to_usize(s.offset).unwrap_or_default();
            ranges.push((start..start + s.bytes.len(), s.offset));
        }
        let section = |i: usize| ranges.get(i).cloned().unwrap_or((0..0, 0));
        let (entries, entries_at) = section(0);
        let (ids, ids_at) = section(1);
        let (tombstones, tombstones_at) = section(2);
        let (names, _) = section(3);
        let sized = |range: &Range<usize>, count: u64, len: usize| {
            count
                .checked_mul(to_u64(len))
                .is_some_and(|n| n == to_u64(range.len()))
        };
        if entry_count > u64::from(u32::MAX) || !sized(&entries, entry_count, ENTRY_LEN) {
            return Err(FormatError::malformed(
                FILE,
                entries_at,
                "the entries section's size does not match the entry count",
            ));
        }
        if !sized(&ids, entry_count, ID_LEN) {
            return Err(FormatError::malformed(
                FILE,
                ids_at,
                "the id index's size does not match the entry count",
            ));
        }
        if !sized(&tombstones, tombstone_count, TOMBSTONE_LEN) {
            return Err(FormatError::malformed(
                FILE,
                tombstones_at,
                "the tombstones section's size does not match the tombstone count",
            ));
        }
        let layout = Layout {
            entries,
            ids,
            tombstones,
            names,
            entry_count: to_usize(entry_count).unwrap_or_default(),
            tombstone_count: to_usize(tombstone_count).unwrap_or_default(),
        };
        Ok(DocMapReader {
            data,
            container,
            layout,
            index_id,
            segment_id,
        })
    }

    fn view(&self) -> View<'_> {
        let bytes = self.data.as_ref();
        let l = &self.layout;
        let get = |r: &Range<usize>| bytes.get(r.clone()).unwrap_or_default();
        View {
            entries: get(&l.entries),
            entries_at: to_u64(l.entries.start),
            ids: get(&l.ids),
            ids_at: to_u64(l.ids.start),
            tombstones: get(&l.tombstones),
            tombstones_at: to_u64(l.tombstones.start),
            names: get(&l.names),
            entry_count: l.entry_count,
            tombstone_count: l.tombstone_count,
        }
    }

    /// The index this doc map belongs to.
    pub fn index_id(&self) -> u64 {
        self.index_id
    }

    /// The segment this doc map belongs to.
    pub fn segment_id(&self) -> u64 {
        self.segment_id
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.layout.entry_count
    }

    /// Whether there are no documents.
    pub fn is_empty(&self) -> bool {
        self.layout.entry_count == 0
    }

    /// Number of tombstones.
    pub fn tombstone_count(&self) -> usize {
        self.layout.tombstone_count
    }

    /// The footer's CRC32, which identifies the file's contents.
    pub fn footer_crc(&self) -> u32 {
        self.container.footer_crc()
    }

    /// The documents with fingerprint `fp`, by increasing id.
    pub fn by_fingerprint(&self, fp: u64) -> ByFingerprint<'_> {
        let view = self.view();
        let pos = lower_bound(view.entry_count, fp, |i| view.entry_fingerprint(i));
        ByFingerprint {
            view,
            fp,
            pos,
            started: false,
            done: false,
        }
    }

    /// The document with id `id`, if this segment holds it.
    pub fn by_id(&self, id: u64) -> Result<Option<DocEntry<'_>>, FormatError> {
        self.view().by_id(id)
    }

    /// The tombstone for `id`, if this segment holds one.
    pub fn tombstone(&self, id: u64) -> Result<Option<Tombstone>, FormatError> {
        self.view().find_tombstone(id)
    }

    /// Every document, by (fingerprint, id).
    pub fn entries(&self) -> Entries<'_> {
        Entries {
            view: self.view(),
            pos: 0,
            done: false,
        }
    }

    /// The id index, by id: each document's id and the position of its
    /// entry in [`entries`](Self::entries) order, each record's CRC checked
    /// (a position past the last entry is reported as an error).
    pub fn ids(&self) -> impl Iterator<Item = Result<(u64, usize), FormatError>> + '_ {
        let view = self.view();
        let len = self.len();
        (0..len).map(move |i| {
            let (id, position) = view.id_record(i)?;
            if position >= len {
                return Err(view.malformed(view.ids_at, ID_LEN, i, "entry position out of range"));
            }
            Ok((id, position))
        })
    }

    /// Every tombstone, by id.
    pub fn tombstones(&self) -> Tombstones<'_> {
        Tombstones {
            view: self.view(),
            pos: 0,
            done: false,
        }
    }

    /// Checks everything: every section's CRC and every record's, the sort
    /// orders, that the id index maps each id to its entry, and that names
    /// are UTF-8 and exactly fill the names section.
    pub fn verify(&self) -> Result<(), FormatError> {
        let bytes = self.data.as_ref();
        self.container.verify_sections(bytes)?;
        let v = self.view();
        let mut prev: Option<(u64, u64)> = None;
        let mut name_end = 0u64;
        for i in 0..v.entry_count {
            let e = v.entry(i)?;
            let key = (e.fingerprint, e.id);
            if prev.is_some_and(|p| p >= key) {
                return Err(v.malformed(
                    v.entries_at,
                    ENTRY_LEN,
                    i,
                    "entries are not sorted by (fingerprint, id)",
                ));
            }
            prev = Some(key);
            let rec = record(v.entries, ENTRY_LEN, i).unwrap_or_default();
            if u64_at(rec, 32) != Some(name_end) {
                return Err(v.malformed(
                    v.entries_at,
                    ENTRY_LEN,
                    i,
                    "names do not follow each other in entry order",
                ));
            }
            name_end += to_u64(e.name.map_or(0, str::len));
        }
        if name_end != to_u64(v.names.len()) {
            return Err(FormatError::malformed(
                FILE,
                to_u64(self.layout.names.start),
                "the names section holds bytes no entry uses",
            ));
        }
        let mut prev_id: Option<u64> = None;
        for i in 0..v.entry_count {
            let (id, position) = v.id_record(i)?;
            if prev_id.is_some_and(|p| p >= id) {
                return Err(v.malformed(v.ids_at, ID_LEN, i, "the id index is not sorted"));
            }
            prev_id = Some(id);
            if position >= v.entry_count || v.entry(position)?.id != id {
                return Err(v.malformed(
                    v.ids_at,
                    ID_LEN,
                    i,
                    "the id index points to an entry with another id",
                ));
            }
        }
        let mut prev_id: Option<u64> = None;
        for i in 0..v.tombstone_count {
            let t = v.tombstone(i)?;
            if prev_id.is_some_and(|p| p >= t.id) {
                return Err(v.malformed(
                    v.tombstones_at,
                    TOMBSTONE_LEN,
                    i,
                    "the tombstones are not sorted by id",
                ));
            }
            prev_id = Some(t.id);
        }
        Ok(())
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// Gives the bytes back.
    pub fn into_inner(self) -> D {
        self.data
    }
}

/// The documents with one fingerprint; see [`DocMapReader::by_fingerprint`].
#[derive(Debug, Clone)]
pub struct ByFingerprint<'a> {
    view: View<'a>,
    fp: u64,
    pos: usize,
    started: bool,
    done: bool,
}

impl<'a> Iterator for ByFingerprint<'a> {
    type Item = Result<DocEntry<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let v = self.view;
        let mut step = || -> Result<Option<DocEntry<'a>>, FormatError> {
            if !self.started {
                self.started = true;
                // The entry before the run bounds the binary search: check it.
                if self.pos > 0 && v.entry(self.pos - 1)?.fingerprint >= self.fp {
                    return Err(v.malformed(
                        v.entries_at,
                        ENTRY_LEN,
                        self.pos - 1,
                        "entries are not sorted by fingerprint",
                    ));
                }
            }
            if self.pos >= v.entry_count {
                return Ok(None);
            }
            let e = v.entry(self.pos)?;
            if e.fingerprint > self.fp {
                return Ok(None);
            }
            if e.fingerprint < self.fp {
                return Err(v.malformed(
                    v.entries_at,
                    ENTRY_LEN,
                    self.pos,
                    "entries are not sorted by fingerprint",
                ));
            }
            self.pos += 1;
            Ok(Some(e))
        };
        match step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Every document; see [`DocMapReader::entries`].
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    view: View<'a>,
    pos: usize,
    done: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<DocEntry<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.view.entry_count {
            return None;
        }
        let item = self.view.entry(self.pos);
        self.pos += 1;
        self.done = item.is_err();
        Some(item)
    }
}

/// Every tombstone; see [`DocMapReader::tombstones`].
#[derive(Debug, Clone)]
pub struct Tombstones<'a> {
    view: View<'a>,
    pos: usize,
    done: bool,
}

impl Iterator for Tombstones<'_> {
    type Item = Result<Tombstone, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.view.tombstone_count {
            return None;
        }
        let item = self.view.tombstone(self.pos);
        self.pos += 1;
        self.done = item.is_err();
        Some(item)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn doc(fingerprint: u64, id: u64, name: Option<&str>) -> DocEntry<'_> {
        DocEntry {
            fingerprint,
            id,
            seq: id * 10,
            timestamp: 1_700_000_000_000 + id,
            name,
        }
    }

    fn sample() -> (Vec<DocEntry<'static>>, Vec<Tombstone>) {
        let docs = vec![
            doc(50, 3, Some("https://example.com/a")),
            doc(10, 9, None),
            doc(50, 1, Some("")),
            doc(u64::MAX, 2, Some("naïve/路径")),
            doc(0, 4, None),
            doc(50, 7, Some("x")),
        ];
        let tombs = vec![
            Tombstone {
                id: 100,
                seq: 5,
                timestamp: 6,
            },
            Tombstone {
                id: 3,
                seq: 1,
                timestamp: 2,
            },
        ];
        (docs, tombs)
    }

    fn build(docs: &[DocEntry<'_>], tombs: &[Tombstone]) -> Vec<u8> {
        let mut w = DocMapWriter::new(0, 77);
        for d in docs {
            w.push(*d).unwrap();
        }
        for t in tombs {
            w.push_tombstone(*t);
        }
        w.finish().unwrap()
    }

    #[test]
    fn round_trip_and_lookups() {
        let (docs, tombs) = sample();
        let bytes = build(&docs, &tombs);
        let r = DocMapReader::new(&bytes[..]).unwrap();
        r.verify().unwrap();
        assert_eq!((r.segment_id(), r.len(), r.tombstone_count()), (77, 6, 2));
        let mut sorted = docs.clone();
        sorted.sort_by_key(|d| (d.fingerprint, d.id));
        let all: Vec<DocEntry<'_>> = r.entries().map(Result::unwrap).collect();
        assert_eq!(all, sorted);
        let fifty: Vec<u64> = r.by_fingerprint(50).map(|e| e.unwrap().id).collect();
        assert_eq!(fifty, [1, 3, 7]);
        for fp in [1, 11, 49, 51, u64::MAX - 1] {
            assert_eq!(r.by_fingerprint(fp).count(), 0);
        }
        for d in &docs {
            assert_eq!(r.by_id(d.id).unwrap(), Some(*d));
        }
        for id in [0, 5, 8, 10, u64::MAX] {
            assert_eq!(r.by_id(id).unwrap(), None);
        }
        assert_eq!(r.tombstone(3).unwrap(), Some(tombs[1]));
        assert_eq!(r.tombstone(100).unwrap(), Some(tombs[0]));
        assert_eq!(r.tombstone(4).unwrap(), None);
        let ts: Vec<Tombstone> = r.tombstones().map(Result::unwrap).collect();
        assert_eq!(ts, [tombs[1], tombs[0]]);
        let ids: Vec<(u64, usize)> = r.ids().map(Result::unwrap).collect();
        assert_eq!(
            ids.iter().map(|&(id, _)| id).collect::<Vec<_>>(),
            [1, 2, 3, 4, 7, 9]
        );
        for (id, position) in ids {
            assert_eq!(all[position].id, id);
        }
    }

    #[test]
    fn ranges_span_entries_and_tombstones() {
        let (docs, tombs) = sample();
        let mut w = DocMapWriter::new(0, 1);
        assert_eq!(w.ranges(), None);
        for d in &docs {
            w.push(*d).unwrap();
        }
        // Entries alone: seq = 10 * id for ids 1..=9, timestamps likewise.
        let entries = Ranges {
            min_seq: 10,
            max_seq: 90,
            min_timestamp: 1_700_000_000_001,
            max_timestamp: 1_700_000_000_009,
        };
        assert_eq!(w.ranges(), Some(entries));
        for t in &tombs {
            w.push_tombstone(*t);
        }
        // The tombstones' seq 1 and 5 and timestamps 2 and 6 are older.
        assert_eq!(
            w.ranges(),
            Some(Ranges {
                min_seq: 1,
                min_timestamp: 2,
                ..entries
            })
        );
    }

    #[test]
    fn empty() {
        let bytes = build(&[], &[]);
        let r = DocMapReader::new(bytes).unwrap();
        r.verify().unwrap();
        assert!(r.is_empty());
        assert_eq!(r.by_fingerprint(0).count(), 0);
        assert_eq!(r.by_id(0).unwrap(), None);
        assert_eq!(r.tombstone(0).unwrap(), None);
    }

    #[test]
    fn duplicates_and_long_names_are_refused() {
        let mut w = DocMapWriter::new(0, 1);
        w.push(doc(1, 5, None)).unwrap();
        w.push(doc(2, 5, None)).unwrap();
        assert!(matches!(
            w.finish(),
            Err(EncodeError::DuplicateId { id: 5 })
        ));
        let mut w = DocMapWriter::new(0, 1);
        let t = Tombstone {
            id: 4,
            seq: 1,
            timestamp: 1,
        };
        w.push_tombstone(t);
        w.push_tombstone(Tombstone { seq: 2, ..t });
        assert!(matches!(
            w.finish(),
            Err(EncodeError::DuplicateId { id: 4 })
        ));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        let mut w = DocMapWriter::new(0, 1);
        assert!(matches!(
            w.push(doc(1, 1, Some(&long))),
            Err(EncodeError::NameTooLong { .. })
        ));
        w.push(doc(1, 1, Some(&long[1..]))).unwrap();
    }

    /// The sample's records in file order: entries by (fingerprint, id),
    /// (id, position) by id, tombstones by id.
    fn sample_in_file_order() -> (Vec<DocEntry<'static>>, Vec<(u64, u32)>, Vec<Tombstone>) {
        let (mut docs, mut tombs) = sample();
        docs.sort_by_key(|d| (d.fingerprint, d.id));
        let mut ids: Vec<(u64, u32)> = docs.iter().zip(0u32..).map(|(d, p)| (d.id, p)).collect();
        ids.sort_unstable();
        tombs.sort_unstable();
        (docs, ids, tombs)
    }

    #[test]
    fn sorted_writer_streams_the_same_file() {
        let (docs, ids, tombs) = sample_in_file_order();
        let mut w = SortedDocMapWriter::new(Vec::new(), 0, 77, 6, 2).unwrap();
        for (d, expected) in docs.iter().zip(0u32..) {
            assert_eq!(w.push(*d).unwrap(), expected);
        }
        for &(id, position) in &ids {
            w.push_id(id, position).unwrap();
        }
        for t in &tombs {
            w.push_tombstone(*t).unwrap();
        }
        let streamed = w.finish().unwrap();
        let (unsorted_docs, unsorted_tombs) = sample();
        assert_eq!(streamed, build(&unsorted_docs, &unsorted_tombs));
        let r = DocMapReader::new(&streamed[..]).unwrap();
        r.verify().unwrap();
        for d in &docs {
            assert_eq!(r.by_id(d.id).unwrap(), Some(*d));
        }
    }

    #[test]
    fn sorted_writer_refuses_what_would_not_be_a_valid_file() {
        let (docs, ids, tombs) = sample_in_file_order();
        let writer = || SortedDocMapWriter::new(Vec::new(), 0, 1, 6, 2).unwrap();
        let with_entries = || {
            let mut w = writer();
            for d in &docs {
                w.push(*d).unwrap();
            }
            w
        };
        fn invalid<T>(r: Result<T, EncodeError>) -> bool {
            matches!(r, Err(EncodeError::Invalid(_)))
        }

        // Entries out of order, or the same (fingerprint, id) twice.
        let mut w = writer();
        w.push(docs[1]).unwrap();
        assert!(invalid(w.push(docs[0])));
        let mut w = writer();
        w.push(docs[0]).unwrap();
        assert!(matches!(
            w.push(docs[0]),
            Err(EncodeError::DuplicateId { .. })
        ));
        // An id index record before every entry, or more entries than declared.
        let mut w = writer();
        w.push(docs[0]).unwrap();
        assert!(invalid(w.push_id(ids[0].0, ids[0].1)));
        let mut w = with_entries();
        assert!(invalid(w.push(doc(u64::MAX, 99, None))));
        // An entry after the id index has begun.
        let mut w = with_entries();
        w.push_id(ids[0].0, ids[0].1).unwrap();
        assert!(invalid(w.push(doc(u64::MAX, 99, None))));
        // Ids out of order, or a position past the entries.
        let mut w = with_entries();
        w.push_id(ids[1].0, ids[1].1).unwrap();
        assert!(invalid(w.push_id(ids[0].0, ids[0].1)));
        let mut w = with_entries();
        assert!(invalid(w.push_id(ids[0].0, 6)));
        // Two ids whose positions are swapped: each record is plausible, the
        // index as a whole is not.
        let mut w = with_entries();
        let mut swapped = ids.clone();
        let (p0, p1) = (swapped[0].1, swapped[1].1);
        swapped[0].1 = p1;
        swapped[1].1 = p0;
        for &(id, position) in &swapped {
            w.push_id(id, position).unwrap();
        }
        for t in &tombs {
            w.push_tombstone(*t).unwrap();
        }
        assert!(invalid(w.finish()));
        // Too few tombstones, too few entries.
        let mut w = with_entries();
        for &(id, position) in &ids {
            w.push_id(id, position).unwrap();
        }
        w.push_tombstone(tombs[0]).unwrap();
        assert!(invalid(w.finish()));
        let mut w = writer();
        w.push(docs[0]).unwrap();
        assert!(invalid(w.finish()));
        // More documents than a doc map can hold.
        assert!(invalid(SortedDocMapWriter::new(
            Vec::new(),
            0,
            1,
            1 << 32,
            0
        )));
    }

    #[test]
    fn every_bit_flip_is_caught_or_harmless() {
        let (docs, tombs) = sample();
        let bytes = build(&docs, &tombs);
        let good = DocMapReader::new(&bytes[..]).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let Ok(r) = DocMapReader::new(&bad[..]) else {
                continue;
            };
            // Lookups either fail or agree with the undamaged file.
            for d in &docs {
                if let Ok(got) = r
                    .by_fingerprint(d.fingerprint)
                    .collect::<Result<Vec<_>, _>>()
                {
                    let want: Vec<_> = good
                        .by_fingerprint(d.fingerprint)
                        .map(Result::unwrap)
                        .collect();
                    assert_eq!(got, want, "bit {bit}");
                }
                if let Ok(got) = r.by_id(d.id) {
                    assert_eq!(got, Some(*d), "bit {bit}");
                }
            }
            for t in &tombs {
                if let Ok(got) = r.tombstone(t.id) {
                    assert_eq!(got, Some(*t), "bit {bit}");
                }
            }
            match r.verify() {
                Ok(()) => panic!("bit {bit}: verify accepted a damaged file"),
                Err(e) => assert!(e.offset < bad.len() as u64),
            }
        }
    }
}
