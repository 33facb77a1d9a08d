//! Flat tables (format version 5): a directory over the keys' top bits and
//! each key's low bits at a fixed width, searched in place, with a CRC32
//! per 4 KiB chunk checked the first time a reader reads the chunk.
//!
//! See docs/FORMAT.md#flat-table-section for the layout and the reasons.

use std::io::Write;

use crate::format::bytes::{Sink, check_crc, crc32, to_u64, to_usize, u32_at, u64_at};
use crate::format::{EncodeError, FormatError};

use super::{FILE, FOOTER_LEN};

/// Bytes per checksummed chunk of a flat table's keys and directory.
pub const FLAT_CHUNK_LEN: usize = 4096;

/// The largest directory a flat table may have, in bits.
pub const MAX_FLAT_BITS: u32 = 32;

/// The largest directory the writer builds, in bits (`2^28 + 1` entries, 1
/// GiB, held in memory while the table is written).
const MAX_WRITTEN_FLAT_BITS: u32 = 28;

/// Zero bytes after the last key: every key loads as one `u64`.
const PAD: usize = 8;

/// Bytes a key's low `64 - bits` bits take.
pub fn flat_width(bits: u32) -> usize {
    (64 - bits.min(63)).div_ceil(8) as usize
}

/// CRC32s of consecutive [`FLAT_CHUNK_LEN`]-byte chunks of a stream.
#[derive(Debug, Default)]
struct ChunkCrcs {
    hasher: crc32fast::Hasher,
    in_chunk: usize,
    crcs: Vec<u32>,
}

impl ChunkCrcs {
    fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let room = FLAT_CHUNK_LEN - self.in_chunk;
            let (now, rest) = bytes.split_at(room.min(bytes.len()));
            self.hasher.update(now);
            self.in_chunk += now.len();
            bytes = rest;
            if self.in_chunk == FLAT_CHUNK_LEN {
                self.crcs.push(std::mem::take(&mut self.hasher).finalize());
                self.in_chunk = 0;
            }
        }
    }

    fn finish(mut self) -> Vec<u32> {
        if self.in_chunk > 0 {
            self.crcs.push(self.hasher.finalize());
        }
        self.crcs
    }
}

/// Builds one flat table from strictly increasing keys, streaming their
/// low bits to `W`; the directory (4 bytes per entry, `2^bits + 1`
/// entries) is held in memory until [`finish`](Self::finish).
#[derive(Debug)]
pub struct FlatTableWriter<W: Write = Vec<u8>> {
    sink: Sink<W>,
    bits: u32,
    width: usize,
    counts: Vec<u32>,
    crcs: ChunkCrcs,
    /// Keys' low bytes not yet checksummed and written: a key is 5 to 8
    /// bytes, and a CRC32 update and a write per key cost more than the
    /// rest of the merge's work on it.
    pending: Vec<u8>,
    last: Option<u64>,
    count: u64,
}

/// Bytes of keys a [`FlatTableWriter`] gathers before checksumming and
/// writing them.
const PENDING_LEN: usize = 64 << 10;

impl FlatTableWriter<Vec<u8>> {
    /// A writer into a new `Vec<u8>` with a directory of `bits` bits.
    pub fn new(bits: u32) -> Result<Self, EncodeError> {
        FlatTableWriter::with_writer(Vec::new(), bits)
    }
}

impl<W: Write> FlatTableWriter<W> {
    /// A writer that streams the table section into `out`, with a
    /// directory of `bits` bits (1 to 28).
    pub fn with_writer(out: W, bits: u32) -> Result<Self, EncodeError> {
        if !(1..=MAX_WRITTEN_FLAT_BITS).contains(&bits) {
            return Err(EncodeError::Invalid(
                "a flat table's directory must have between 1 and 28 bits",
            ));
        }
        Ok(FlatTableWriter {
            sink: Sink::counting(out),
            bits,
            width: flat_width(bits),
            counts: vec![0; (1usize << bits) + 1],
            crcs: ChunkCrcs::default(),
            pending: Vec::with_capacity(PENDING_LEN),
            last: None,
            count: 0,
        })
    }

    /// Checksums and writes the pending keys, then `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        self.write_pending()?;
        self.crcs.update(bytes);
        Ok(self.sink.write_all(bytes)?)
    }

    fn write_pending(&mut self) -> Result<(), EncodeError> {
        if !self.pending.is_empty() {
            self.crcs.update(&self.pending);
            self.sink.write_all(&self.pending)?;
            self.pending.clear();
        }
        Ok(())
    }

    /// Appends `key`, which must be greater than every key pushed before.
    pub fn push(&mut self, key: u64) -> Result<(), EncodeError> {
        if let Some(prev) = self.last
            && key <= prev
        {
            return Err(EncodeError::KeysNotIncreasing { prev, key });
        }
        if self.count >= u64::from(u32::MAX) {
            return Err(EncodeError::Invalid(
                "a flat table holds fewer than 2^32 keys",
            ));
        }
        self.last = Some(key);
        self.count += 1;
        let bucket = (key >> (64 - self.bits)) as usize;
        if let Some(c) = self.counts.get_mut(bucket + 1) {
            *c += 1;
        }
        let low = key & (u64::MAX >> self.bits);
        let bytes = low.to_le_bytes();
        self.pending
            .extend_from_slice(bytes.get(..self.width).unwrap_or_default());
        if self.pending.len() + 8 > PENDING_LEN {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Keys pushed so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether no key was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Writes the padding, the directory, the chunk CRCs and the footer;
    /// returns the writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        self.write(&[0; PAD])?;
        let mut dir = Vec::with_capacity(self.counts.len() * 4);
        let mut sum = 0u32;
        for &c in &self.counts {
            sum += c;
            dir.extend_from_slice(&sum.to_le_bytes());
        }
        self.counts = Vec::new();
        self.write(&dir)?;
        let crc_at = self.sink.written();
        let crcs = std::mem::take(&mut self.crcs).finish();
        let crc_bytes: Vec<u8> = crcs.iter().flat_map(|c| c.to_le_bytes()).collect();
        self.sink.write_all(&crc_bytes)?;
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(&self.count.to_le_bytes());
        footer.extend_from_slice(&crc_at.to_le_bytes());
        footer.extend_from_slice(&0u32.to_le_bytes());
        footer.extend_from_slice(&[self.bits as u8, self.width as u8, 0, 0]);
        let footer_crc = crc32(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        self.sink.write_all(&footer)?;
        Ok(self.sink.into_inner())
    }
}

/// Whether the table section `bytes` is flat: its footer's block length
/// field is 0 (a Rice-coded table's is 1 to 4096).
pub(crate) fn is_flat(bytes: &[u8]) -> bool {
    let at = bytes.len().saturating_sub(FOOTER_LEN) + 16;
    bytes.len() >= FOOTER_LEN && u32_at(bytes, at) == Some(0)
}

/// Where a flat table lies in its file and what its checked footer says:
/// what [`FlatTable::reopen`] needs to read it again without checking the
/// footer again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatLayout {
    /// Offset of the section in its file.
    base: u64,
    /// Length of the section.
    len: usize,
    key_count: u64,
    bits: u32,
    width: usize,
    /// Where the directory starts in the section (after the keys and
    /// their padding).
    dir_at: usize,
    /// Where the chunk CRCs start (after the directory).
    crc_at: usize,
}

/// A flat table section, checked cheaply when opened (its footer); its
/// chunks are checked by [`check_chunk`](Self::check_chunk), all of them
/// by [`verify`](Self::verify) and by its iteration.
#[derive(Debug, Clone, Copy)]
pub struct FlatTable<'a> {
    bytes: &'a [u8],
    layout: FlatLayout,
}

impl<'a> FlatTable<'a> {
    /// Opens a flat table section that starts at `base` in its file: checks
    /// the footer's CRC, and that the keys, the directory and the chunk
    /// CRCs exactly fill the section. Costs O(1).
    pub fn at(bytes: &'a [u8], base: u64) -> Result<Self, FormatError> {
        let malformed = |at: usize, what| FormatError::malformed(FILE, base + to_u64(at), what);
        let Some(footer_at) = bytes.len().checked_sub(FOOTER_LEN) else {
            return Err(malformed(0, "a table section shorter than its footer"));
        };
        let footer = bytes.get(footer_at..).unwrap_or_default();
        check_crc(
            FILE,
            base + to_u64(footer_at),
            footer.get(..24).unwrap_or_default(),
            u32_at(footer, 24).unwrap_or_default(),
        )?;
        let key_count = u64_at(footer, 0).unwrap_or_default();
        let crc_at = u64_at(footer, 8).unwrap_or_default();
        let bits = u32::from(footer.get(20).copied().unwrap_or_default());
        let width = usize::from(footer.get(21).copied().unwrap_or_default());
        if u32_at(footer, 16) != Some(0) {
            return Err(malformed(footer_at + 16, "not a flat table"));
        }
        if !(1..=MAX_FLAT_BITS).contains(&bits) || footer.get(22..24) != Some(&[0, 0][..]) {
            return Err(malformed(footer_at + 20, "a flat table's directory bits"));
        }
        if width != flat_width(bits) {
            return Err(malformed(
                footer_at + 21,
                "a flat table's key width does not match its directory bits",
            ));
        }
        if key_count >= u64::from(u32::MAX) {
            return Err(malformed(footer_at, "a flat table of 2^32 keys or more"));
        }
        // Every length below fits: the key count is under 2^32 and the
        // width at most 8, the directory at most 2^32 + 1 entries.
        let dir_at = to_usize(key_count)
            .and_then(|n| n.checked_mul(width))
            .and_then(|n| n.checked_add(PAD));
        let dir_len = ((1u64 << bits) + 1) * 4;
        let expected_crc_at = dir_at.and_then(|d| d.checked_add(to_usize(dir_len)?));
        let (Some(dir_at), Some(expected)) = (dir_at, expected_crc_at) else {
            return Err(malformed(footer_at, "a flat table larger than memory"));
        };
        if to_u64(expected) != crc_at {
            return Err(malformed(
                footer_at + 8,
                "a flat table's directory does not end where its chunk CRCs start",
            ));
        }
        let chunks = expected.div_ceil(FLAT_CHUNK_LEN);
        if expected.checked_add(chunks * 4) != Some(footer_at) {
            return Err(malformed(
                footer_at,
                "a flat table's keys, directory and chunk CRCs do not fill its section",
            ));
        }
        Ok(FlatTable {
            bytes,
            layout: FlatLayout {
                base,
                len: bytes.len(),
                key_count,
                bits,
                width,
                dir_at,
                crc_at: expected,
            },
        })
    }

    /// What [`reopen`](Self::reopen) needs.
    pub fn layout(&self) -> FlatLayout {
        self.layout
    }

    /// The table of `layout`, from its whole file's bytes, as opened before
    /// (nothing is checked again); `None` if the file is too short.
    pub fn reopen(file: &'a [u8], layout: &FlatLayout) -> Option<Self> {
        let start = to_usize(layout.base)?;
        let bytes = file.get(start..start.checked_add(layout.len)?)?;
        Some(FlatTable {
            bytes,
            layout: *layout,
        })
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.layout.key_count
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.layout.key_count == 0
    }

    /// The directory's bits: a key's top `bits` bits are its directory
    /// position.
    pub fn bits(&self) -> u32 {
        self.layout.bits
    }

    /// Bytes per key's low bits.
    pub fn width(&self) -> usize {
        self.layout.width
    }

    /// The section's size in bytes.
    pub fn size_bytes(&self) -> u64 {
        to_u64(self.bytes.len())
    }

    /// Where the section lies in its file.
    pub fn file_range(&self) -> std::ops::Range<u64> {
        self.layout.base..self.layout.base + to_u64(self.layout.len)
    }

    /// Where the directory lies in the file.
    pub fn dir_range(&self) -> std::ops::Range<u64> {
        let at = |x: usize| self.layout.base + to_u64(x);
        at(self.layout.dir_at)..at(self.layout.crc_at)
    }

    /// The keys' low bits, `width` bytes each, then 8 zero bytes.
    pub fn low_bytes(&self) -> &'a [u8] {
        self.bytes.get(..self.layout.dir_at).unwrap_or_default()
    }

    /// The directory: `2^bits + 1` little-endian `u32`.
    pub fn dir_bytes(&self) -> &'a [u8] {
        self.bytes
            .get(self.layout.dir_at..self.layout.crc_at)
            .unwrap_or_default()
    }

    /// Directory entry `b` (0 out of bounds): the position of the first key
    /// whose top bits are at least `b`.
    pub fn entry(&self, b: usize) -> u64 {
        u32_at(self.dir_bytes(), b.saturating_mul(4)).map_or(0, u64::from)
    }

    /// Number of checksummed chunks.
    pub fn chunk_count(&self) -> usize {
        self.layout.crc_at.div_ceil(FLAT_CHUNK_LEN)
    }

    /// The chunks holding directory entries `b` and `b + 1`.
    pub fn dir_chunks(&self, b: usize) -> std::ops::Range<usize> {
        let at = self.layout.dir_at.saturating_add(b.saturating_mul(4));
        at / FLAT_CHUNK_LEN..at.saturating_add(8).div_ceil(FLAT_CHUNK_LEN)
    }

    /// The chunks holding the bytes that loads of keys `lo..hi` read (8
    /// bytes from each key's start).
    pub fn key_chunks(&self, lo: u64, hi: u64) -> std::ops::Range<usize> {
        if lo >= hi {
            return 0..0;
        }
        let width = to_u64(self.layout.width);
        let start = lo.saturating_mul(width);
        let end = (hi - 1).saturating_mul(width).saturating_add(8);
        let chunk = |x: u64| to_usize(x / to_u64(FLAT_CHUNK_LEN)).unwrap_or(usize::MAX);
        chunk(start)..chunk(end.saturating_add(to_u64(FLAT_CHUNK_LEN) - 1))
    }

    /// Asks the processor for chunk `i`'s bytes ahead of its
    /// [check](Self::check_chunk), without waiting for them: the chunks a
    /// query checks are fetched at once instead of one after another
    /// (nothing for a chunk out of range).
    pub fn prefetch_chunk(&self, i: usize) {
        let start = i.saturating_mul(FLAT_CHUNK_LEN);
        let end = start.saturating_add(FLAT_CHUNK_LEN).min(self.layout.crc_at);
        if start < end {
            crate::format::prefetch(self.bytes, start..end);
        }
    }

    /// Checks chunk `i`'s CRC (an error for a chunk out of range).
    pub fn check_chunk(&self, i: usize) -> Result<(), FormatError> {
        let start = i.saturating_mul(FLAT_CHUNK_LEN);
        let end = start.saturating_add(FLAT_CHUNK_LEN).min(self.layout.crc_at);
        let (Some(covered), Some(stored)) = (
            self.bytes.get(start..end).filter(|_| start < end),
            u32_at(self.bytes, self.layout.crc_at + i.saturating_mul(4)),
        ) else {
            return Err(FormatError::malformed(
                FILE,
                self.layout.base + to_u64(self.layout.crc_at),
                "a flat table's chunk past its end",
            ));
        };
        check_crc(FILE, self.layout.base + to_u64(start), covered, stored)
    }

    fn malformed(&self, at: usize, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.layout.base + to_u64(at), what)
    }

    /// Checks every chunk's CRC, and that the directory counts the keys:
    /// it starts at 0, never decreases, and ends at the key count.
    fn check_all(&self) -> Result<(), FormatError> {
        for i in 0..self.chunk_count() {
            self.check_chunk(i)?;
        }
        let entries = (1usize << self.layout.bits) + 1;
        let mut prev = 0u64;
        for b in 0..entries {
            let e = self.entry(b);
            if (b == 0 && e != 0) || e < prev {
                return Err(self.malformed(
                    self.layout.dir_at + b * 4,
                    "a flat table's directory entries decrease",
                ));
            }
            prev = e;
        }
        if prev != self.layout.key_count {
            return Err(self.malformed(
                self.layout.crc_at - 4,
                "a flat table's directory ends at another key count than its footer",
            ));
        }
        let pad = self.low_bytes().get(self.layout.dir_at - PAD..);
        if pad != Some(&[0; PAD][..]) {
            return Err(self.malformed(
                self.layout.dir_at - PAD,
                "a flat table's padding is not zero",
            ));
        }
        Ok(())
    }

    /// Every key, ascending: every chunk is checked first (an error is
    /// then the only item), then the keys are rebuilt from the directory
    /// and their low bits (an error if they do not increase).
    pub fn iter(&self) -> FlatKeys<'a> {
        FlatKeys {
            table: *self,
            failed: self.check_all().err(),
            bucket: 0,
            next: 0,
            last: None,
            done: false,
        }
    }

    /// Checks everything: every chunk's CRC, the directory, and that the
    /// keys strictly increase.
    pub fn verify(&self) -> Result<(), FormatError> {
        for key in self.iter() {
            key?;
        }
        Ok(())
    }
}

/// The keys of a [`FlatTable`], ascending.
#[derive(Debug)]
pub struct FlatKeys<'a> {
    table: FlatTable<'a>,
    failed: Option<FormatError>,
    bucket: usize,
    next: u64,
    last: Option<u64>,
    done: bool,
}

impl Iterator for FlatKeys<'_> {
    type Item = Result<u64, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Some(Err(e));
        }
        let t = &self.table;
        if self.next >= t.len() {
            self.done = true;
            return None;
        }
        // The bucket of key `next`: the last entry at most `next`.
        while t.entry(self.bucket + 1) <= self.next {
            self.bucket += 1;
        }
        let bits = t.layout.bits;
        let at = to_usize(self.next).unwrap_or(usize::MAX) * t.layout.width;
        let low = t
            .low_bytes()
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
            & (u64::MAX >> bits);
        let key = ((self.bucket as u64) << (64 - bits)) | low;
        if self.last.is_some_and(|prev| key <= prev) {
            self.done = true;
            return Some(Err(t.malformed(at, "a flat table's keys do not increase")));
        }
        self.last = Some(key);
        self.next += 1;
        Some(Ok(key))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::format::FormatErrorKind;

    fn keys(n: usize, seed: u64) -> Vec<u64> {
        let mut s = seed | 1;
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

    fn encode(keys: &[u64], bits: u32) -> Vec<u8> {
        let mut w = FlatTableWriter::new(bits).unwrap();
        for &k in keys {
            w.push(k).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn keys_come_back_at_every_directory_size() {
        for keys in [
            vec![],
            vec![0],
            vec![u64::MAX],
            vec![0, 1, u64::MAX - 1, u64::MAX],
            keys(5000, 7),
        ] {
            for bits in [1, 8, 12, 16, 17, 24] {
                let bytes = encode(&keys, bits);
                assert!(is_flat(&bytes));
                let t = FlatTable::at(&bytes, 0).unwrap();
                assert_eq!(t.len(), keys.len() as u64);
                assert_eq!(t.width(), flat_width(bits));
                let got: Vec<u64> = t.iter().collect::<Result<_, _>>().unwrap();
                assert_eq!(got, keys, "{bits} bits");
                t.verify().unwrap();
                // Each key's directory entries and bytes lie in the
                // table's chunks, and its position holds it.
                for &key in &keys {
                    let b = (key >> (64 - bits)) as usize;
                    let (lo, hi) = (t.entry(b), t.entry(b + 1));
                    assert!(lo < hi, "{bits} bits, key {key:#x}");
                    assert!(t.dir_chunks(b).end <= t.chunk_count());
                    assert!(t.key_chunks(lo, hi).end <= t.chunk_count());
                }
            }
        }
    }

    #[test]
    fn every_flipped_byte_is_found_by_verify_or_the_open() {
        let keys = keys(3000, 3);
        let bytes = encode(&keys, 10);
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x20;
            let found = FlatTable::at(&bad, 0).and_then(|t| {
                t.verify()?;
                // A flipped CRC byte fails its chunk's check.
                (0..t.chunk_count()).try_for_each(|i| t.check_chunk(i))
            });
            assert!(found.is_err(), "byte {at} of {}", bytes.len());
        }
    }

    #[test]
    fn a_chunk_s_damage_is_found_by_its_check() {
        let keys = keys(3000, 5);
        let mut bytes = encode(&keys, 10);
        bytes[5000] ^= 1;
        let t = FlatTable::at(&bytes, 100).unwrap();
        let e = t.check_chunk(1).unwrap_err();
        assert!(matches!(e.kind, FormatErrorKind::ChecksumMismatch { .. }));
        assert_eq!(e.offset, 100 + 4096);
        t.check_chunk(0).unwrap();
        assert!(t.iter().next().unwrap().is_err());
    }

    #[test]
    fn keys_gathered_before_writing_are_written_and_checksummed_in_order() {
        // 40,000 keys of 6 bytes: several of the writer's pending buffers
        // (64 KiB), ending in the middle of one and of a chunk. Every
        // chunk's stored CRC equals the CRC of its 4 KiB of the section.
        let keys = keys(40_000, 11);
        let bytes = encode(&keys, 16);
        let t = FlatTable::at(&bytes, 0).unwrap();
        let got: Vec<u64> = t.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(got, keys);
        t.verify().unwrap();
        let crc_at = t.layout.crc_at;
        assert!(t.chunk_count() > 60, "{} chunks", t.chunk_count());
        for i in 0..t.chunk_count() {
            let chunk = &bytes[i * FLAT_CHUNK_LEN..((i + 1) * FLAT_CHUNK_LEN).min(crc_at)];
            let stored = u32_at(&bytes, crc_at + 4 * i).unwrap();
            assert_eq!(stored, crc32(chunk), "chunk {i}");
        }
    }

    #[test]
    fn a_rice_table_is_not_flat() {
        let mut w = super::super::TableWriter::new(32).unwrap();
        w.push(5).unwrap();
        assert!(!is_flat(&w.finish().unwrap()));
        assert!(FlatTable::at(&[0; 10], 0).is_err());
    }
}
