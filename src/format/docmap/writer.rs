//! Writing doc maps whose records arrive in file order.
//! Layout: docs/FORMAT.md#doc-map-file.

use std::io::Write;

use super::super::container::ContainerWriter;
use super::super::{EncodeError, MAX_NAME_LEN};
use super::block::{BLOCK_LEN, Pending, encode_entry_block, encode_id_block, width};
use super::{DocEntry, FILE, HEADER_LEN, Ranges, Tombstone, pair_hash};
use crate::sketch::Sketch;

/// Which part of the file a [`SortedDocMapWriter`] is writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Entries,
    Ids,
    Tombstones,
}

/// Writes a doc map whose records arrive in file order, straight to `out`:
/// the entries sorted by (fingerprint, id), then the id index sorted by id,
/// then the tombstones sorted by id, with the counts declared up front. Only
/// the names (written last), one block of records and the block indexes are
/// held. A merge of sorted doc maps uses it to avoid collecting and
/// re-sorting every record; [`DocMapWriter`](super::DocMapWriter) uses it
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
    /// Records written in the current part.
    written: u64,
    ranges: Option<Ranges>,
    /// Entries of the block being filled, and where its names start.
    entries: Vec<Pending>,
    block_names_at: usize,
    /// Id index records of the block being filled.
    ids: Vec<(u64, u32)>,
    /// Block index of the part being written: (first key, offset).
    index: Vec<(u64, u64)>,
    /// Bytes of blocks written in the current part.
    offset: u64,
    block: Vec<u8>,
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
        header.extend_from_slice(&super::super::FORMAT_VERSION.to_le_bytes());
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
            entries: Vec::with_capacity(BLOCK_LEN),
            block_names_at: 0,
            ids: Vec::with_capacity(BLOCK_LEN),
            index: Vec::new(),
            offset: 0,
            block: Vec::new(),
        })
    }

    /// Records part `phase` must hold.
    fn declared(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Entries | Phase::Ids => self.entry_count,
            Phase::Tombstones => self.tombstone_count,
        }
    }

    /// Encodes the pending block, if any, of the current part.
    fn flush_block(&mut self) -> Result<(), EncodeError> {
        self.block.clear();
        let first = match self.phase {
            Phase::Entries => {
                let Some(first) = self.entries.first() else {
                    return Ok(());
                };
                let first = first.fingerprint;
                let names = self.names.get(self.block_names_at..).unwrap_or_default();
                encode_entry_block(
                    &self.entries,
                    names,
                    self.block_names_at as u64,
                    &mut self.block,
                );
                self.entries.clear();
                self.block_names_at = self.names.len();
                first
            }
            Phase::Ids => {
                let Some(&(first, _)) = self.ids.first() else {
                    return Ok(());
                };
                let position_width = width(self.entry_count.saturating_sub(1));
                encode_id_block(&self.ids, position_width, &mut self.block);
                self.ids.clear();
                first
            }
            Phase::Tombstones => return Ok(()),
        };
        self.index.push((first, self.offset));
        self.offset += self.block.len() as u64;
        self.container.sink().write_all(&self.block)?;
        Ok(())
    }

    /// Closes the blocks section of the current part and writes its block
    /// index as the next section.
    fn close_blocks(&mut self) -> Result<(), EncodeError> {
        self.flush_block()?;
        self.container.end_section();
        for &(first, offset) in &self.index {
            let sink = self.container.sink();
            sink.write_all(&first.to_le_bytes())?;
            sink.write_all(&offset.to_le_bytes())?;
        }
        self.container.end_section();
        self.index.clear();
        self.offset = 0;
        Ok(())
    }

    /// Moves on to part `phase`, closing the ones before it (each must hold
    /// exactly its declared number of records).
    fn advance(&mut self, phase: Phase) -> Result<(), EncodeError> {
        while self.phase < phase {
            if self.written != self.declared(self.phase) {
                return Err(EncodeError::Invalid(
                    "a doc map section got fewer records than declared",
                ));
            }
            self.close_blocks()?;
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
            entry.sketch,
        )
    }

    pub(super) fn push_raw(
        &mut self,
        fingerprint: u64,
        id: u64,
        seq: u64,
        timestamp: u64,
        name: Option<&[u8]>,
        sketch: Option<Sketch>,
    ) -> Result<u32, EncodeError> {
        self.enter(Phase::Entries)?;
        let name_code = match name {
            Some(name) if name.len() > MAX_NAME_LEN => {
                return Err(EncodeError::NameTooLong {
                    id,
                    len: name.len(),
                });
            }
            Some(name) => name.len() as u32 + 1,
            None => 0,
        };
        self.check_order((fingerprint, id), id)?;
        Ranges::include(&mut self.ranges, seq, timestamp);
        self.names.extend_from_slice(name.unwrap_or_default());
        self.entries.push(Pending {
            fingerprint,
            id,
            seq,
            timestamp,
            name_code,
            sketch,
        });
        let position = self.written as u32;
        self.entry_pairs = self.entry_pairs.wrapping_add(pair_hash(id, position));
        self.written += 1;
        if self.entries.len() == BLOCK_LEN {
            self.flush_block()?;
        }
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
        self.ids.push((id, position));
        self.written += 1;
        if self.ids.len() == BLOCK_LEN {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Writes the next tombstone (in id order). Every entry and id index
    /// record must have been pushed.
    pub fn push_tombstone(&mut self, tombstone: Tombstone) -> Result<(), EncodeError> {
        self.enter(Phase::Tombstones)?;
        self.check_order((tombstone.id, 0), tombstone.id)?;
        Ranges::include(&mut self.ranges, tombstone.seq, tombstone.timestamp);
        let mut record = [0u8; super::TOMBSTONE_LEN];
        for (dst, v) in
            record
                .chunks_exact_mut(8)
                .zip([tombstone.id, tombstone.seq, tombstone.timestamp])
        {
            dst.copy_from_slice(&v.to_le_bytes());
        }
        let crc = super::super::bytes::crc32(record.get(..24).unwrap_or_default());
        if let Some(dst) = record.get_mut(24..) {
            dst.copy_from_slice(&crc.to_le_bytes());
        }
        self.container.sink().write_all(&record)?;
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
