//! Doc map files: the documents of one segment (fingerprint, id, sequence
//! number, timestamp, optional name) in blocks sorted by fingerprint, an id
//! index in blocks sorted by id, and the segment's tombstones.
//!
//! Every block carries its own CRC32 (an entry block's also covers its
//! names), and every lookup checks the blocks it decodes and the block
//! index records that bound its search, so a damaged byte is reported, never
//! silently used or skipped. See docs/FORMAT.md#doc-map-file.

use std::io::Write;

use super::bytes::to_u64;
use super::{EncodeError, FileKind, MAX_NAME_LEN};
use crate::sketch::Sketch;

mod block;
mod reader;
mod writer;

pub use reader::{ByFingerprint, DocMapReader, Entries, Tombstones};
pub use writer::SortedDocMapWriter;

const FILE: FileKind = FileKind::DocMap;
/// Magic, version, segment id, entry count, tombstone count, index id, CRC.
const HEADER_LEN: usize = 48;
const TOMBSTONE_LEN: usize = 28;
/// Sections: entry blocks, entry block index, id blocks, id block index,
/// tombstones, names.
const SECTIONS: usize = 6;
/// The name length that means "no name" (writer's bookkeeping only).
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
    /// The optional verification value (format version 4 on; documents
    /// of version 3 files have none).
    pub sketch: Option<Sketch>,
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
    sketch: Option<Sketch>,
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

    /// Makes room for `entries` more documents, so that the writer's
    /// vector is not copied as it grows.
    pub fn reserve(&mut self, entries: usize) {
        self.entries.reserve(entries);
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
            sketch: entry.sketch,
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
        let mut by_id = Vec::new();
        id_index_order(
            self.entries.iter().map(|e| e.id),
            &mut by_id,
            &mut Vec::new(),
        );
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
            w.push_raw(e.fingerprint, e.id, e.seq, e.timestamp, name, e.sketch)?;
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

/// The id index's records of a doc map whose entries, in file order, have
/// the ids `ids`: (id, position) pairs sorted by id, written into `by_id`
/// (cleared first), `scratch` being the sort's buffer (both reusable). The
/// pairs are sorted directly: sorting positions by a key looked up in the
/// entries would miss the cache on every comparison. Radix-sorted over the
/// ids' range (positions are distinct, so the order is that of a comparison
/// sort).
pub fn id_index_order(
    ids: impl Iterator<Item = u64>,
    by_id: &mut Vec<(u64, u32)>,
    scratch: &mut Vec<(u64, u32)>,
) {
    by_id.clear();
    by_id.extend(ids.zip(0u32..));
    crate::radix::sort_by_key_range_with(by_id, scratch, |p| p.0, |&p| p);
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

#[cfg(test)]
mod tests;
