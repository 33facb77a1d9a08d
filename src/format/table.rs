//! Sorted-key tables: strictly increasing `u64` keys in Rice-coded blocks.
//!
//! A table is what one permuted table of a segment stores. Keys are grouped
//! in blocks of a fixed number of keys; a block holds its first key in full
//! and every following key as a Rice-coded gap, with a Rice parameter chosen
//! per block. A block index (first key and offset of every block) lets a
//! reader find the one block where a range starts. Every block
//! carries its own CRC32, checked whenever the block is decoded, so a query
//! never returns keys from a damaged block.
//!
//! See docs/FORMAT.md#table-section for the layout and the reasons.

use std::io::Write;

use super::bytes::{Sink, check_crc, crc32, to_u64, to_usize, u32_at, u64_at};
use super::{EncodeError, FileKind, FormatError, FormatErrorKind};

/// Keys per block unless a writer is told otherwise.
pub const DEFAULT_BLOCK_LEN: u32 = 128;

/// The largest block length the format allows.
pub const MAX_BLOCK_LEN: u32 = 4096;

/// First key (8 bytes) and Rice parameter (1 byte).
const BLOCK_HEADER_LEN: usize = 9;
const CRC_LEN: usize = 4;
/// The smallest possible block: header and CRC around an empty bit stream.
const MIN_BLOCK_LEN_BYTES: usize = BLOCK_HEADER_LEN + CRC_LEN;
/// The largest Rice parameter: low bits of a gap fit one unaligned 8-byte
/// load at any bit offset. See docs/FORMAT.md#table-blocks.
pub(crate) const MAX_RICE: u32 = 56;
/// Keys a range iterator decodes at a time.
const CHUNK: usize = 32;
/// First key and block offset, both `u64`.
const INDEX_ENTRY_LEN: usize = 16;
/// Key count, index offset, block length, index CRC, footer CRC.
pub(crate) const FOOTER_LEN: usize = 28;

const FILE: FileKind = FileKind::Segment;

#[inline]
fn low_mask(bits: u32) -> u64 {
    // Callers pass a Rice parameter (<= 56) or a padding width (< 8).
    (1u64 << bits) - 1
}

/// The Rice parameter for a block's gaps: start from `floor(log2(mean gap))`
/// and keep whichever of it and its two neighbours codes the gaps in the
/// fewest bits (exact count, not an estimate). Two passes over the gaps: the
/// mean, then the three candidates' costs together.
fn rice_parameter<I: Iterator<Item = u64> + Clone>(gaps: I) -> u32 {
    let (count, sum) = gaps
        .clone()
        .fold((0u128, 0u128), |(c, s), g| (c + 1, s + u128::from(g)));
    if count == 0 {
        return 0;
    }
    let mean = u64::try_from(sum / count).unwrap_or(u64::MAX);
    let r0 = 63u32.saturating_sub(mean.leading_zeros()).min(MAX_RICE);
    let candidates = [r0.saturating_sub(1), r0, (r0 + 1).min(MAX_RICE)];
    let high = gaps.fold([0u128; 3], |mut acc, g| {
        for (a, &r) in acc.iter_mut().zip(&candidates) {
            *a += u128::from(g >> r);
        }
        acc
    });
    // Ties go to the smallest parameter.
    candidates
        .iter()
        .zip(high)
        .map(|(&r, high)| (count * u128::from(r + 1) + high, r))
        .min()
        .map_or(r0, |(_, r)| r)
}

/// Appends bits least-significant first, eight bytes at a time.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    /// Pending bits, the oldest lowest; `len < 64` of them.
    acc: u64,
    len: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            len: 0,
        }
    }

    /// Appends the low `bits` bits of `value` (`bits <= 64`, higher bits zero).
    #[inline]
    fn write(&mut self, value: u64, bits: u32) {
        self.acc |= value << self.len;
        let len = self.len + bits;
        if len >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            // The bits of `value` that did not fit: `value >> (64 - len)`,
            // written so that `self.len == 0` shifts by 64 without overflow.
            self.acc = (value >> 1) >> (63 - self.len);
            self.len = len - 64;
        } else {
            self.len = len;
        }
    }

    /// `q` zero bits, then a one bit.
    #[inline]
    fn unary(&mut self, mut q: u64) {
        while q >= 63 {
            self.write(0, 63);
            q -= 63;
        }
        self.write(1 << q, q as u32 + 1);
    }

    /// Pads with zero bits to a byte boundary.
    fn finish(self) {
        let bytes = self.len.div_ceil(8) as usize;
        self.out.extend(self.acc.to_le_bytes().iter().take(bytes));
    }
}

/// Appends one encoded block of `keys` (non-empty, strictly increasing):
/// first key, Rice parameter, the low bits of every gap, then the unary
/// high parts, then the CRC. See docs/FORMAT.md#table-blocks.
fn encode_block(keys: &[u64], out: &mut Vec<u8>) {
    let Some((&first, rest)) = keys.split_first() else {
        return;
    };
    let start = out.len();
    let gaps = keys.iter().zip(rest).map(|(&a, &b)| b - a - 1);
    let r = rice_parameter(gaps.clone());
    out.extend_from_slice(&first.to_le_bytes());
    out.push(r as u8);
    let mut low = BitWriter::new(out);
    for gap in gaps.clone() {
        low.write(gap & low_mask(r), r);
    }
    low.finish();
    let mut high = BitWriter::new(out);
    for gap in gaps {
        high.unary(gap >> r);
    }
    high.finish();
    let crc = out.get(start..).map(crc32).unwrap_or(0);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Builds one table from strictly increasing keys, streaming blocks to `W`.
///
/// Memory is one block of keys plus the block index (16 bytes per block).
/// ```
/// use simhashdb::format::{TableReader, TableWriter};
///
/// let mut writer = TableWriter::new(128)?;
/// for key in [3u64, 10, 11, 1 << 40] {
///     writer.push(key)?;
/// }
/// let bytes = writer.finish()?;
/// let table = TableReader::new(&bytes)?;
/// assert_eq!(table.range(4, 11).collect::<Result<Vec<_>, _>>()?, [10, 11]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TableWriter<W: Write = Vec<u8>> {
    sink: Sink<W>,
    block_len: usize,
    pending: Vec<u64>,
    last: Option<u64>,
    count: u64,
    index: Vec<u8>,
    scratch: Vec<u8>,
}

impl TableWriter<Vec<u8>> {
    /// A writer into a new `Vec<u8>` with `block_len` keys per block
    /// (1..=[`MAX_BLOCK_LEN`]; [`DEFAULT_BLOCK_LEN`] unless measured otherwise).
    pub fn new(block_len: u32) -> Result<Self, EncodeError> {
        TableWriter::with_writer(Vec::new(), block_len)
    }
}

impl<W: Write> TableWriter<W> {
    /// A writer that streams the table section into `out`.
    pub fn with_writer(out: W, block_len: u32) -> Result<Self, EncodeError> {
        if block_len == 0 || block_len > MAX_BLOCK_LEN {
            return Err(EncodeError::Invalid(
                "the block length must be between 1 and 4096 keys",
            ));
        }
        let block_len = block_len as usize;
        Ok(TableWriter {
            sink: Sink::counting(out),
            block_len,
            pending: Vec::with_capacity(block_len),
            last: None,
            count: 0,
            index: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Appends `key`, which must be greater than every key pushed before.
    pub fn push(&mut self, key: u64) -> Result<(), EncodeError> {
        if let Some(prev) = self.last
            && key <= prev
        {
            return Err(EncodeError::KeysNotIncreasing { prev, key });
        }
        self.last = Some(key);
        self.pending.push(key);
        self.count += 1;
        if self.pending.len() == self.block_len {
            self.flush_block()?;
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

    fn flush_block(&mut self) -> Result<(), EncodeError> {
        let Some(&first) = self.pending.first() else {
            return Ok(());
        };
        self.index.extend_from_slice(&first.to_le_bytes());
        self.index
            .extend_from_slice(&self.sink.written().to_le_bytes());
        self.scratch.clear();
        encode_block(&self.pending, &mut self.scratch);
        self.pending.clear();
        Ok(self.sink.write_all(&self.scratch)?)
    }

    /// Writes the last block, the block index and the footer; returns the
    /// writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        self.flush_block()?;
        let index_offset = self.sink.written();
        self.sink.write_all(&self.index)?;
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(&self.count.to_le_bytes());
        footer.extend_from_slice(&index_offset.to_le_bytes());
        footer.extend_from_slice(&(self.block_len as u32).to_le_bytes());
        footer.extend_from_slice(&crc32(&self.index).to_le_bytes());
        let footer_crc = crc32(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        self.sink.write_all(&footer)?;
        Ok(self.sink.into_inner())
    }
}

/// Eight bytes at `at`, zero-padded past the end of `data`.
#[inline]
fn load_u64(data: &[u8], at: usize) -> u64 {
    match data.get(at..).and_then(|s| s.first_chunk::<8>()) {
        Some(chunk) => u64::from_le_bytes(*chunk),
        None => load_u64_padded(data, at),
    }
}

#[cold]
#[inline(never)]
fn load_u64_padded(data: &[u8], at: usize) -> u64 {
    let mut padded = [0u8; 8];
    for (dst, src) in padded.iter_mut().zip(data.get(at..).unwrap_or_default()) {
        *dst = *src;
    }
    u64::from_le_bytes(padded)
}

/// The `width <= 56` bits starting at bit `bit` of `data` (least
/// significant first), zero past the end.
#[inline]
fn bits_at(data: &[u8], bit: usize, width: u32) -> u64 {
    (load_u64(data, bit / 8) >> (bit % 8)) & low_mask(width)
}

/// Where decoding stands inside a block.
#[derive(Debug, Clone, Copy)]
struct Position {
    /// The unary word being read, its bits already used cleared.
    word: u64,
    /// Bit index (in the unary stream) of bit 0 of `word`.
    word_base: u64,
    /// Bit index just past the previous one bit.
    next_bit: u64,
    /// The last key decoded.
    key: u64,
    /// Bit index (in the low stream) of the next gap's low bits.
    bit: usize,
}

/// Decodes one gap per slot of `out` from `pos`: the high part is the run of
/// zeros before the next one bit of the unary stream, the low `r` bits are
/// at bit `pos.bit` of the low stream. Returns `false` when the unary stream
/// runs out, or, if `CHECKED`, when a key would pass `u64::MAX`. Unchecked,
/// keys wrap; the caller bounds the chunk's total first.
#[inline(always)]
fn decode_gaps<const CHECKED: bool>(
    low: &[u8],
    unary: &[u8],
    r: u32,
    pos: &mut Position,
    out: &mut [u64],
) -> bool {
    let mask = low_mask(r);
    let limit = u64::MAX >> r;
    let Position {
        mut word,
        mut word_base,
        mut next_bit,
        mut key,
        mut bit,
    } = *pos;
    for slot in out.iter_mut() {
        while word == 0 {
            word_base += 64;
            let at = to_usize(word_base / 8).unwrap_or(usize::MAX);
            if at >= unary.len() {
                return false;
            }
            word = load_u64(unary, at);
        }
        let one = word_base + u64::from(word.trailing_zeros());
        word &= word - 1;
        let q = one - next_bit;
        next_bit = one + 1;
        let gap = (q << r) | ((load_u64(low, bit / 8) >> (bit % 8)) & mask);
        bit += r as usize;
        if CHECKED {
            match key.checked_add(gap).and_then(|k| k.checked_add(1)) {
                Some(k) if q <= limit => key = k,
                _ => return false,
            }
        } else {
            key = key.wrapping_add(gap).wrapping_add(1);
        }
        *slot = key;
    }
    *pos = Position {
        word,
        word_base,
        next_bit,
        key,
        bit,
    };
    true
}

/// Decodes one block, a chunk of keys at a time. See
/// docs/FORMAT.md#table-blocks.
#[derive(Debug, Clone, Copy)]
struct BlockCursor<'a> {
    low: &'a [u8],
    unary: &'a [u8],
    r: u32,
    /// Gaps in the block, and gaps decoded so far.
    gaps: usize,
    done: usize,
    pos: Position,
    /// Whether the first key was returned.
    started: bool,
    /// Absolute offset of the block, for errors.
    offset: u64,
}

impl<'a> BlockCursor<'a> {
    /// `body` is the block without its CRC; `count` its number of keys.
    fn new(body: &'a [u8], count: usize, offset: u64) -> Result<Self, FormatError> {
        let malformed = |what| FormatError::malformed(FILE, offset, what);
        let first = u64_at(body, 0).unwrap_or_default();
        let r = u32::from(body.get(8).copied().unwrap_or_default());
        if r > MAX_RICE {
            return Err(malformed("a block's Rice parameter is above 56"));
        }
        let gaps = count.saturating_sub(1);
        let low_len = (gaps * r as usize).div_ceil(8);
        let streams = body.get(BLOCK_HEADER_LEN..).unwrap_or_default();
        let Some((low, unary)) = streams.split_at_checked(low_len) else {
            return Err(malformed("a block is shorter than its low bits"));
        };
        Ok(BlockCursor {
            low,
            unary,
            r,
            gaps,
            done: 0,
            pos: Position {
                word: load_u64(unary, 0),
                word_base: 0,
                next_bit: 0,
                key: first,
                bit: 0,
            },
            started: false,
            offset,
        })
    }

    fn malformed(&self, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.offset, what)
    }

    /// Whether both streams end exactly after the last gap, padded with
    /// zero bits to a byte.
    fn ends_cleanly(&self) -> bool {
        let low_bits = self.gaps * self.r as usize;
        let low_padding = self.low.len() * 8 - low_bits;
        let unary_bytes = to_usize(self.pos.next_bit.div_ceil(8));
        bits_at(self.low, low_bits, low_padding as u32) == 0
            && unary_bytes == Some(self.unary.len())
            && self.pos.word == 0
    }

    /// Decodes the next keys of the block into `out`; returns how many
    /// (0 once the block is exhausted). Checks that the block ends cleanly
    /// when its last key is decoded.
    #[inline(never)]
    fn decode_chunk(&mut self, out: &mut [u64; CHUNK]) -> Result<usize, FormatError> {
        let mut n = 0;
        if !self.started {
            self.started = true;
            if let Some(slot) = out.first_mut() {
                *slot = self.pos.key;
            }
            n = 1;
        }
        let want = (self.gaps - self.done).min(CHUNK - n);
        let slots = out.get_mut(n..n + want).unwrap_or_default();
        let (low, unary, r) = (self.low, self.unary, self.r);
        let start = self.pos;
        let mut end = start;
        if !decode_gaps::<false>(low, unary, r, &mut end, slots) {
            return Err(self.malformed("a block's unary codes run past its end"));
        }
        // Each gap adds q·2^r + low + 1 <= (q + 1)·2^r, and next_bit moved
        // by the sum of q + 1: if that bound fits, no key wrapped and no
        // quotient lost bits. Otherwise decode again, checking every key.
        let steps = end.next_bit - start.next_bit;
        if u128::from(start.key) + (u128::from(steps) << r) > u128::from(u64::MAX) {
            end = start;
            if !decode_gaps::<true>(low, unary, r, &mut end, slots) {
                return Err(self.malformed("a block's gaps run past the largest key"));
            }
        }
        self.pos = end;
        self.done += want;
        n += want;
        if n > 0 && self.done == self.gaps && !self.ends_cleanly() {
            return Err(self.malformed("a block has bits left after its last key"));
        }
        Ok(n)
    }
}

/// A table section: checked cheaply when opened, each block checked when read.
///
/// It borrows the bytes (usually part of a memory-mapped segment) and is
/// `Copy`, so iterators carry their own.
#[derive(Debug, Clone, Copy)]
pub struct TableReader<'a> {
    bytes: &'a [u8],
    /// Offset of `bytes` in its file, for error offsets.
    base: u64,
    key_count: u64,
    block_len: u32,
    block_count: usize,
    index_offset: usize,
    index_crc: u32,
}

impl<'a> TableReader<'a> {
    /// Opens a table section: checks the footer's checksum and that the
    /// block index and the blocks fit the bytes. Costs O(1); blocks are
    /// checked when read, or all at once by [`verify`](Self::verify).
    pub fn new(bytes: &'a [u8]) -> Result<Self, FormatError> {
        TableReader::at(bytes, 0)
    }

    /// [`new`](Self::new) for a section that starts at `base` in its file.
    pub(crate) fn at(bytes: &'a [u8], base: u64) -> Result<Self, FormatError> {
        let err_at = |off: usize, kind| FormatError::new(FILE, base + to_u64(off), kind);
        let malformed = |off: usize, what| err_at(off, FormatErrorKind::Malformed(what));
        let Some(footer_at) = bytes.len().checked_sub(FOOTER_LEN) else {
            return Err(err_at(
                0,
                FormatErrorKind::Truncated {
                    needed: to_u64(FOOTER_LEN),
                    available: to_u64(bytes.len()),
                },
            ));
        };
        let footer = bytes.get(footer_at..).unwrap_or_default();
        let (covered, stored) = footer.split_at_checked(FOOTER_LEN - 4).unwrap_or_default();
        let stored = u32_at(stored, 0).unwrap_or_default();
        check_crc(FILE, base + to_u64(footer_at), covered, stored)?;
        let field = |at| u64_at(covered, at).unwrap_or_default();
        let key_count = field(0);
        let index_offset = field(8);
        let block_len = u32_at(covered, 16).unwrap_or_default();
        let index_crc = u32_at(covered, 20).unwrap_or_default();
        if block_len == 0 || block_len > MAX_BLOCK_LEN {
            return Err(malformed(
                footer_at + 16,
                "the table's block length is outside 1..=4096",
            ));
        }
        let block_count = key_count.div_ceil(u64::from(block_len));
        let index_end = block_count
            .checked_mul(to_u64(INDEX_ENTRY_LEN))
            .and_then(|len| len.checked_add(index_offset));
        if index_end != Some(to_u64(footer_at)) {
            return Err(malformed(
                footer_at,
                "the table's block index does not end where its footer starts",
            ));
        }
        let min_data = block_count.saturating_mul(to_u64(MIN_BLOCK_LEN_BYTES));
        if index_offset < min_data || (block_count == 0 && index_offset != 0) {
            return Err(malformed(
                footer_at + 8,
                "the table's blocks cannot fit before its block index",
            ));
        }
        let (Some(block_count), Some(index_offset)) =
            (to_usize(block_count), to_usize(index_offset))
        else {
            return Err(malformed(
                footer_at,
                "the table is too large for this platform",
            ));
        };
        Ok(TableReader {
            bytes,
            base,
            key_count,
            block_len,
            block_count,
            index_offset,
            index_crc,
        })
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.key_count
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.key_count == 0
    }

    /// Keys per block (the last block may hold fewer).
    pub fn block_len(&self) -> u32 {
        self.block_len
    }

    /// Number of blocks.
    pub fn block_count(&self) -> usize {
        self.block_count
    }

    /// Size of the section in bytes.
    pub fn size_bytes(&self) -> u64 {
        to_u64(self.bytes.len())
    }

    fn entry_offset(&self, block: usize) -> usize {
        self.index_offset
            .saturating_add(block.saturating_mul(INDEX_ENTRY_LEN))
    }

    /// First key and offset of `block`, from the block index.
    #[inline]
    fn index_entry(&self, block: usize) -> Result<(u64, u64), FormatError> {
        let at = self.entry_offset(block);
        match (u64_at(self.bytes, at), u64_at(self.bytes, at + 8)) {
            (Some(first), Some(offset)) => Ok((first, offset)),
            _ => Err(self.malformed(at, "a block index entry is out of bounds")),
        }
    }

    fn malformed(&self, at: usize, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.base + to_u64(at), what)
    }

    /// Opens `block`: checks its bounds, its CRC, and that its first key is
    /// the one the index holds.
    fn block(&self, block: usize) -> Result<BlockCursor<'a>, FormatError> {
        let entry_at = self.entry_offset(block);
        let (indexed_first, start) = self.index_entry(block)?;
        let end = if block + 1 < self.block_count {
            self.index_entry(block + 1)?.1
        } else {
            to_u64(self.index_offset)
        };
        let bounds = (to_usize(start), to_usize(end));
        let (Some(start), Some(end)) = bounds else {
            return Err(self.malformed(entry_at, "a block offset is out of bounds"));
        };
        if end > self.index_offset || end < start.saturating_add(MIN_BLOCK_LEN_BYTES) {
            return Err(self.malformed(
                entry_at,
                "the block index's offsets are out of order or out of bounds",
            ));
        }
        let block_bytes = self.bytes.get(start..end).unwrap_or_default();
        let (body, stored) = block_bytes
            .split_at_checked(end - start - CRC_LEN)
            .unwrap_or_default();
        let stored = u32_at(stored, 0).unwrap_or_default();
        check_crc(FILE, self.base + to_u64(start), body, stored)?;
        let first = u64_at(body, 0).unwrap_or_default();
        if first != indexed_first {
            return Err(self.malformed(
                entry_at,
                "the block index disagrees with the first key of its block",
            ));
        }
        // block < block_count, so block * block_len < key_count.
        let before = to_u64(block) * u64::from(self.block_len);
        let count = (self.key_count - before).min(u64::from(self.block_len));
        BlockCursor::new(body, count as usize, self.base + to_u64(start))
    }

    /// The block a search for `key` starts in: the last one whose first key
    /// is `<= key` (block 0 if none).
    ///
    /// Permuted fingerprints are close to uniform, so the first guess
    /// interpolates between the first and last block's first keys; the
    /// search then gallops from the guess to bracket the block and finishes
    /// by bisection. A damaged index can only make it start at a block whose
    /// (checked) first key is `<= key`, which loses nothing.
    fn find_block(&self, key: u64) -> Result<usize, FormatError> {
        let n = self.block_count;
        if n <= 1 {
            return Ok(0);
        }
        let last = n - 1;
        let (first_key, last_key) = (self.index_entry(0)?.0, self.index_entry(last)?.0);
        if key < first_key {
            return Ok(0);
        }
        if key >= last_key {
            return Ok(last);
        }
        // first_key <= key < last_key, so the guess is in 0..last.
        let span = u128::from(last_key - first_key);
        let guess = u128::from(key - first_key) * to_u64(last) as u128 / span;
        let guess = usize::try_from(guess).unwrap_or(0).min(last - 1);
        // Invariant: entry(lo) <= key < entry(hi), lo < hi.
        let (mut lo, mut hi);
        let mut step = 1;
        if self.index_entry(guess)?.0 <= key {
            lo = guess;
            hi = (guess + step).min(last);
            while hi < last && self.index_entry(hi)?.0 <= key {
                lo = hi;
                step *= 2;
                hi = (hi + step).min(last);
            }
        } else {
            hi = guess;
            lo = guess.saturating_sub(step);
            while lo > 0 && self.index_entry(lo)?.0 > key {
                hi = lo;
                step *= 2;
                lo = lo.saturating_sub(step);
            }
        }
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.index_entry(mid)?.0 <= key {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The keys in `lo..=hi`, ascending. Binary-searches the block index,
    /// then decodes from the block where the range starts.
    ///
    /// Yields an error (and then stops) when a block it reads is damaged.
    pub fn range(&self, lo: u64, hi: u64) -> Range<'a> {
        let state = if lo > hi || self.key_count == 0 {
            RangeState::Done
        } else {
            RangeState::Search
        };
        Range::new(*self, lo, hi, state)
    }

    /// Every key, ascending.
    pub fn iter(&self) -> Range<'a> {
        Range::new(*self, 0, u64::MAX, RangeState::Running)
    }

    /// Checks everything: the block index's CRC, every block's CRC and
    /// encoding, and that keys increase across blocks.
    pub fn verify(&self) -> Result<(), FormatError> {
        let footer_at = self.bytes.len().saturating_sub(FOOTER_LEN);
        let index = self
            .bytes
            .get(self.index_offset..footer_at)
            .unwrap_or_default();
        check_crc(
            FILE,
            self.base + to_u64(self.index_offset),
            index,
            self.index_crc,
        )?;
        if self.block_count > 0 && self.index_entry(0)?.1 != 0 {
            return Err(self.malformed(
                self.index_offset,
                "the first block does not start the table",
            ));
        }
        let mut count = 0u64;
        for key in self.iter() {
            key?;
            count += 1;
        }
        if count != self.key_count {
            return Err(self.malformed(
                footer_at,
                "the table's blocks hold a different number of keys than its footer",
            ));
        }
        Ok(())
    }
}

impl<'a> IntoIterator for &TableReader<'a> {
    type Item = Result<u64, FormatError>;
    type IntoIter = Range<'a>;

    fn into_iter(self) -> Range<'a> {
        self.iter()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeState {
    Search,
    Running,
    Done,
}

/// Iterator over the keys of a [`TableReader`] in a range, ascending.
///
/// Items are `Err` when a block is damaged; the iterator then ends.
#[derive(Debug, Clone)]
pub struct Range<'a> {
    table: TableReader<'a>,
    lo: u64,
    hi: u64,
    next_block: usize,
    cursor: Option<BlockCursor<'a>>,
    /// Decoded keys, `buf[pos..len]` not yet returned.
    buf: [u64; CHUNK],
    pos: usize,
    len: usize,
    /// The last key decoded, to check that blocks follow each other in order.
    last: Option<u64>,
    state: RangeState,
}

impl<'a> Range<'a> {
    fn new(table: TableReader<'a>, lo: u64, hi: u64, state: RangeState) -> Self {
        Range {
            table,
            lo,
            hi,
            next_block: 0,
            cursor: None,
            buf: [0; CHUNK],
            pos: 0,
            len: 0,
            last: None,
            state,
        }
    }

    /// Decodes the next chunk of keys into `buf`; `Ok(false)` at the end.
    #[inline(never)]
    fn fill(&mut self) -> Result<bool, FormatError> {
        loop {
            match self.state {
                RangeState::Done => return Ok(false),
                RangeState::Search => {
                    self.next_block = self.table.find_block(self.lo)?;
                    self.state = RangeState::Running;
                }
                RangeState::Running => {}
            }
            let cursor = match &mut self.cursor {
                Some(cursor) => cursor,
                None => {
                    if self.next_block >= self.table.block_count {
                        self.state = RangeState::Done;
                        return Ok(false);
                    }
                    let cursor = self.table.block(self.next_block)?;
                    self.next_block += 1;
                    self.cursor.insert(cursor)
                }
            };
            let n = cursor.decode_chunk(&mut self.buf)?;
            if n == 0 {
                self.cursor = None;
                continue;
            }
            let first = self.buf.first().copied().unwrap_or_default();
            if self.last.is_some_and(|last| first <= last) {
                return Err(
                    cursor.malformed("a block's first key is not above the previous block's keys")
                );
            }
            let last = self.buf.get(n - 1).copied().unwrap_or_default();
            self.last = Some(last);
            if last < self.lo {
                continue;
            }
            let chunk = self.buf.get(..n).unwrap_or_default();
            self.pos = chunk.partition_point(|&k| k < self.lo);
            self.len = n;
            return Ok(true);
        }
    }
}

impl Iterator for Range<'_> {
    type Item = Result<u64, FormatError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.pos < self.len {
                let key = self.buf.get(self.pos).copied().unwrap_or_default();
                self.pos += 1;
                if key > self.hi {
                    self.state = RangeState::Done;
                    self.len = 0;
                    return None;
                }
                if key >= self.lo {
                    return Some(Ok(key));
                }
                continue;
            }
            match self.fill() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.state = RangeState::Done;
                    self.cursor = None;
                    self.len = 0;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl std::iter::FusedIterator for Range<'_> {}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn encode(keys: &[u64], block_len: u32) -> Vec<u8> {
        let mut w = TableWriter::new(block_len).unwrap();
        for &k in keys {
            w.push(k).unwrap();
        }
        w.finish().unwrap()
    }

    fn xorshift(n: usize, seed: u64) -> Vec<u64> {
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

    fn all(t: &TableReader<'_>) -> Vec<u64> {
        t.iter().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn round_trip_shapes() {
        let cases: Vec<Vec<u64>> = vec![
            vec![],
            vec![0],
            vec![u64::MAX],
            vec![0, u64::MAX],
            vec![0, 1, 2, 3, 4, 5],
            (0..1000).collect(),
            (0..1000).map(|i| u64::MAX - 1000 + i).collect(),
            xorshift(5000, 7),
            (0..256).map(|i| i << 56).collect(),
        ];
        for keys in &cases {
            for block_len in [1, 2, 3, 127, 128, 4096] {
                let bytes = encode(keys, block_len);
                let t = TableReader::new(&bytes).unwrap();
                assert_eq!(t.len(), keys.len() as u64);
                assert_eq!(&all(&t), keys, "block_len {block_len}");
                t.verify().unwrap();
            }
        }
    }

    #[test]
    fn rice_parameter_follows_mean_gap() {
        assert_eq!(rice_parameter([0u64; 10].into_iter()), 0);
        assert_eq!(rice_parameter(std::iter::empty()), 0);
        let r = rice_parameter([1u64 << 38; 100].into_iter());
        assert!((37..=39).contains(&r), "{r}");
        assert_eq!(rice_parameter([u64::MAX; 3].into_iter()), MAX_RICE);
    }

    #[test]
    fn huge_gaps_and_the_largest_rice_parameter() {
        let keys = [0, 1 << 63, u64::MAX];
        let bytes = encode(&keys, 128);
        assert_eq!(all(&TableReader::new(&bytes).unwrap()), keys);
    }

    #[test]
    fn unary_longer_than_a_word() {
        // One tiny gap among huge ones forces a small r for... the opposite:
        // many zero gaps and one huge gap give a long quotient.
        let mut keys: Vec<u64> = (0..120).collect();
        keys.push(1 << 20);
        let bytes = encode(&keys, 128);
        assert_eq!(all(&TableReader::new(&bytes).unwrap()), keys);
    }

    #[test]
    fn ranges_match_a_filter() {
        let keys = xorshift(20_000, 3);
        let bytes = encode(&keys, 128);
        let t = TableReader::new(&bytes).unwrap();
        let mut probes: Vec<(u64, u64)> = vec![(0, u64::MAX), (0, 0), (u64::MAX, u64::MAX)];
        for w in keys.windows(2).step_by(97) {
            probes.push((w[0], w[1]));
            probes.push((w[0] + 1, w[1] - 1));
            probes.push((w[0], w[0]));
            probes.push((w[0] & !0xffff_ffff_ffff, w[0] | 0xffff_ffff_ffff));
        }
        probes.push((5, 4));
        for (lo, hi) in probes {
            let got: Vec<u64> = t.range(lo, hi).collect::<Result<_, _>>().unwrap();
            let want: Vec<u64> = keys
                .iter()
                .copied()
                .filter(|&k| lo <= k && k <= hi)
                .collect();
            assert_eq!(got, want, "{lo:#x}..={hi:#x}");
        }
    }

    #[test]
    fn rejects_non_increasing_keys() {
        let mut w = TableWriter::new(4).unwrap();
        w.push(5).unwrap();
        assert!(matches!(
            w.push(5),
            Err(EncodeError::KeysNotIncreasing { prev: 5, key: 5 })
        ));
        assert!(matches!(
            w.push(4),
            Err(EncodeError::KeysNotIncreasing { .. })
        ));
        assert!(TableWriter::new(0).is_err());
        assert!(TableWriter::new(MAX_BLOCK_LEN + 1).is_err());
    }

    #[test]
    fn every_bit_flip_is_caught_or_harmless() {
        let keys = xorshift(600, 11);
        let bytes = encode(&keys, 64);
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let Ok(t) = TableReader::new(&bad) else {
                continue;
            };
            // Every full read either errors or returns the right keys.
            match t.iter().collect::<Result<Vec<_>, _>>() {
                Ok(got) => assert_eq!(got, keys, "bit {bit}"),
                Err(e) => assert!(e.offset < bad.len() as u64),
            }
            for w in keys.windows(2).step_by(37) {
                if let Ok(got) = t.range(w[0], w[1]).collect::<Result<Vec<_>, _>>() {
                    assert_eq!(got, [w[0], w[1]], "bit {bit}");
                }
            }
            if t.verify().is_ok() {
                assert_eq!(all(&t), keys);
            }
        }
    }

    #[test]
    fn every_truncation_is_refused() {
        let keys = xorshift(300, 5);
        let bytes = encode(&keys, 32);
        for len in 0..bytes.len() {
            assert!(TableReader::new(&bytes[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0, 1, 27, 28, 29, 64, 200, 1000] {
            for _ in 0..200 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        s as u8
                    })
                    .collect();
                if let Ok(t) = TableReader::new(&bytes) {
                    let _ = t.verify();
                    let _ = t.range(0, u64::MAX).count();
                }
            }
        }
    }

    /// Recomputes every checksum of a table section (and the index's copy
    /// of each block's first key), so that damage reaches the decoder.
    fn reseal(bytes: &mut [u8]) {
        let len = bytes.len();
        let footer = len - FOOTER_LEN;
        let index = u64_at(bytes, footer + 8).unwrap() as usize;
        let blocks = (footer - index) / INDEX_ENTRY_LEN;
        for i in 0..blocks {
            let at = index + i * INDEX_ENTRY_LEN;
            let start = u64_at(bytes, at + 8).unwrap() as usize;
            let end = if i + 1 < blocks {
                u64_at(bytes, at + INDEX_ENTRY_LEN + 8).unwrap() as usize
            } else {
                index
            };
            let crc = crc32(&bytes[start..end - 4]);
            bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
            let first: [u8; 8] = bytes[start..start + 8].try_into().unwrap();
            bytes[at..at + 8].copy_from_slice(&first);
        }
        let crc = crc32(&bytes[index..footer]);
        bytes[footer + 20..footer + 24].copy_from_slice(&crc.to_le_bytes());
        let crc = crc32(&bytes[footer..footer + 24]);
        bytes[footer + 24..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn checksummed_garbage_is_refused_or_still_sorted() {
        let mut keys = xorshift(400, 21);
        keys.extend([u64::MAX - 3, u64::MAX - 1, u64::MAX]);
        keys.sort_unstable();
        keys.dedup();
        let bytes = encode(&keys, 16);
        let mut s = 77u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let (mut errors, mut accepted) = (0, 0);
        for _ in 0..20_000 {
            let mut bad = bytes.clone();
            let data_end = u64_at(&bad, bad.len() - FOOTER_LEN + 8).unwrap() as usize;
            for _ in 0..1 + next() % 3 {
                let at = next() as usize % data_end;
                bad[at] = match next() % 4 {
                    0 => 0,
                    1 => 0xff,
                    _ => next() as u8,
                };
            }
            reseal(&mut bad);
            let t = TableReader::new(&bad).unwrap();
            let mut prev = None;
            let mut ok = true;
            for k in t.iter() {
                match k {
                    Ok(k) => {
                        assert!(prev.is_none_or(|p| p < k), "keys out of order");
                        prev = Some(k);
                    }
                    Err(e) => {
                        assert!(e.offset < bad.len() as u64);
                        ok = false;
                    }
                }
            }
            if ok {
                accepted += 1;
                assert!(t.verify().is_ok());
            } else {
                errors += 1;
                assert!(t.verify().is_err());
            }
            let lo = next();
            for k in t.range(lo, lo.saturating_add(next() >> 4)).flatten() {
                assert!(k >= lo);
            }
        }
        // Both outcomes occur: the decoder's own checks are exercised.
        assert!(errors > 1000 && accepted > 100, "{errors} {accepted}");
    }

    #[test]
    fn uniform_keys_cost_about_log_gap_plus_two_bits() {
        let keys = xorshift(1 << 16, 99);
        let bytes = encode(&keys, DEFAULT_BLOCK_LEN);
        let bits_per_key = bytes.len() as f64 * 8.0 / keys.len() as f64;
        // Mean gap 2^48: about 48 + 1.6 bits, plus block overhead.
        assert!(bits_per_key < 48.0 + 3.5, "{bits_per_key}");
    }
}
