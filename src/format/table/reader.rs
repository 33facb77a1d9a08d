//! [`TableReader`] and its [`Range`] iterator: a table opened, its block
//! index searched, its blocks decoded on demand.

use crate::format::bytes::{check_crc, prefetch, to_u64, to_usize, u32_at, u64_at};
use crate::format::{FormatError, FormatErrorKind};

use super::block::BlockCursor;
use super::{
    CHUNK, CRC_LEN, FILE, FOOTER_LEN, INDEX_ENTRY_LEN, MAX_BLOCK_LEN, MIN_BLOCK_LEN_BYTES,
};

/// A table section: checked cheaply when opened, each block checked when read.
///
/// It borrows the bytes (usually part of a memory-mapped segment) and is
/// `Copy`, so iterators carry their own.
#[derive(Debug, Clone, Copy)]
pub struct TableReader<'a> {
    bytes: &'a [u8],
    layout: TableLayout,
}

/// Where a table section lies in its file and what its footer says, once
/// the footer is checked: what [`TableReader::reopen`] needs to read the
/// table again without checking its footer again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLayout {
    /// Offset of the section in its file.
    base: u64,
    /// Length of the section.
    len: usize,
    key_count: u64,
    block_len: u32,
    block_count: usize,
    index_offset: usize,
    index_crc: u32,
    /// What the guesses interpolate with, once read
    /// ([`TableReader::guided`]).
    guide: Option<Guide>,
}

/// The first keys of a table's first and last blocks (it has two or more),
/// and the blocks per unit of key between them as a fraction of 2^64: what
/// [`TableReader::guess`] interpolates with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Guide {
    first_key: u64,
    last_key: u64,
    blocks_per_key: u64,
}

impl Guide {
    /// How many blocks a run of `keys` units of key spans, interpolated
    /// (rounded down, or up if `up`; saturated).
    #[inline]
    fn blocks_in(&self, keys: u64, up: bool) -> usize {
        let product = u128::from(keys) * u128::from(self.blocks_per_key);
        let blocks = (product + if up { u128::from(u64::MAX) } else { 0 }) >> 64;
        usize::try_from(blocks).unwrap_or(usize::MAX)
    }
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
            layout: TableLayout {
                base,
                len: bytes.len(),
                key_count,
                block_len,
                block_count,
                index_offset,
                index_crc,
                guide: None,
            },
        })
    }

    /// This table with what its guesses interpolate with read: the first
    /// keys of its first and last blocks. A table searched many times (a
    /// segment's, through its [`layout`](Self::layout)) reads them once
    /// instead of at every guess, which also divides by their difference.
    /// Reads two block index entries (the open does not, so that opening a
    /// segment whose files are not in memory reads its footers only).
    pub fn guided(mut self) -> Result<Self, FormatError> {
        if self.layout.guide.is_none() && self.layout.block_count > 1 {
            self.layout.guide = Some(self.read_guide()?);
        }
        Ok(self)
    }

    /// Reads the guide of a table of two or more blocks.
    fn read_guide(&self) -> Result<Guide, FormatError> {
        let last = self.layout.block_count.saturating_sub(1);
        let (first_key, last_key) = (self.index_entry(0)?.0, self.index_entry(last)?.0);
        // A table's keys increase, so the last block's first key is at
        // least `last * block_len` above the first's, and the fraction is
        // below 1 (a damaged index gets its guesses clamped).
        let range = u128::from(last_key.saturating_sub(first_key)).max(1);
        let per_key = (to_u64(last) as u128).checked_shl(64).unwrap_or(0) / range;
        Ok(Guide {
            first_key,
            last_key,
            blocks_per_key: u64::try_from(per_key).unwrap_or(u64::MAX),
        })
    }

    /// Where the table lies and what its checked footer says, to
    /// [`reopen`](Self::reopen) it later.
    pub fn layout(&self) -> TableLayout {
        self.layout
    }

    /// The table `layout` describes, read from `file` (the whole file it
    /// was opened from, unchanged since) without checking its footer again:
    /// O(1). `None` if `file` is too short to hold it.
    pub fn reopen(file: &'a [u8], layout: &TableLayout) -> Option<Self> {
        let start = to_usize(layout.base)?;
        let bytes = file.get(start..start.checked_add(layout.len)?)?;
        Some(TableReader {
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

    /// Keys per block (the last block may hold fewer).
    pub fn block_len(&self) -> u32 {
        self.layout.block_len
    }

    /// Number of blocks.
    pub fn block_count(&self) -> usize {
        self.layout.block_count
    }

    /// Size of the section in bytes.
    pub fn size_bytes(&self) -> u64 {
        to_u64(self.bytes.len())
    }

    /// Where the block index and footer lie in the file: what every
    /// search reads first.
    pub fn index_range(&self) -> std::ops::Range<u64> {
        self.layout.base + to_u64(self.layout.index_offset)
            ..self.layout.base + to_u64(self.bytes.len())
    }

    fn entry_offset(&self, block: usize) -> usize {
        self.layout
            .index_offset
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

    pub(super) fn malformed(&self, at: usize, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.layout.base + to_u64(at), what)
    }

    /// Opens `block`: checks its bounds, its CRC, and that its first key is
    /// the one the index holds.
    fn block(&self, block: usize) -> Result<BlockCursor<'a>, FormatError> {
        let entry_at = self.entry_offset(block);
        let (indexed_first, start) = self.index_entry(block)?;
        let end = if block + 1 < self.layout.block_count {
            self.index_entry(block + 1)?.1
        } else {
            to_u64(self.layout.index_offset)
        };
        let bounds = (to_usize(start), to_usize(end));
        let (Some(start), Some(end)) = bounds else {
            return Err(self.malformed(entry_at, "a block offset is out of bounds"));
        };
        if end > self.layout.index_offset || end < start.saturating_add(MIN_BLOCK_LEN_BYTES) {
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
        check_crc(FILE, self.layout.base + to_u64(start), body, stored)?;
        let first = u64_at(body, 0).unwrap_or_default();
        if first != indexed_first {
            return Err(self.malformed(
                entry_at,
                "the block index disagrees with the first key of its block",
            ));
        }
        // block < block_count, so block * block_len < key_count.
        let before = to_u64(block) * u64::from(self.layout.block_len);
        let count = (self.layout.key_count - before).min(u64::from(self.layout.block_len));
        BlockCursor::new(body, count as usize, self.layout.base + to_u64(start))
    }

    /// Where a search for `key` looks first: `Ok(Ok(b))` when the answer is
    /// block `b` without reading more (a key below the first block's or at
    /// or above the last's), `Ok(Err((g, guide)))` for a guess `g` in
    /// `0..last` to search around, with the guide it was interpolated with.
    ///
    /// Permuted fingerprints are close to uniform, so the guess interpolates
    /// between the first and last block's first keys (read here unless the
    /// table is [`guided`](Self::guided)).
    #[inline]
    fn guess(&self, key: u64) -> Result<Result<usize, (usize, Guide)>, FormatError> {
        let n = self.layout.block_count;
        if n <= 1 {
            return Ok(Ok(0));
        }
        let last = n - 1;
        let guide = match self.layout.guide {
            Some(guide) => guide,
            None => self.read_guide()?,
        };
        if key < guide.first_key {
            return Ok(Ok(0));
        }
        if key >= guide.last_key {
            return Ok(Ok(last));
        }
        let guess = guide.blocks_in(key - guide.first_key, false).min(last - 1);
        Ok(Err((guess, guide)))
    }

    /// [`guess`](Self::guess), corrected by the first key of the block it
    /// guessed: keys spread like random ones put the block a search wants
    /// some `sqrt(keys)/block_len` blocks from the first guess (about 30 at
    /// 50 M keys, several cache lines of the block index apart), and within
    /// a block or so of this second one. Reads the first guess's entry.
    fn second_guess(&self, key: u64) -> Result<Result<usize, usize>, FormatError> {
        let (guess, guide) = match self.guess(key)? {
            Ok(block) => return Ok(Ok(block)),
            Err(guess) => guess,
        };
        let last = self.layout.block_count - 1;
        let at = self.index_entry(guess)?.0;
        let second = if key >= at {
            guess.saturating_add(guide.blocks_in(key - at, false))
        } else {
            guess.saturating_sub(guide.blocks_in(at - key, true))
        };
        // The block wanted is in 0..last (its first key is below the last
        // block's); the interpolation's position rounded down.
        Ok(Err(second.min(last - 1)))
    }

    /// The block a search for `key` starts in: the last one whose first key
    /// is `<= key` (block 0 if none).
    ///
    /// The search starts at [`second_guess`](Self::second_guess), gallops
    /// from it to bracket the block and finishes by bisection. A damaged
    /// index can only make it start at a block whose (checked) first key is
    /// `<= key`, which loses nothing.
    fn find_block(&self, key: u64) -> Result<usize, FormatError> {
        let guess = match self.second_guess(key)? {
            Ok(block) => return Ok(block),
            Err(guess) => guess,
        };
        let last = self.layout.block_count - 1;
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

    /// Prefetches the block index entry a search for `key` reads first,
    /// and nothing else: a hint that lets a caller with several tables to
    /// search wait for their memory once instead of once per table (see
    /// [`warm_block`](Self::warm_block)). Errors are left to the search.
    #[inline]
    pub fn warm_index(&self, key: u64) {
        if let Ok(Err((guess, _))) = self.guess(key) {
            self.prefetch_entries(guess);
        }
    }

    /// After [`warm_index`](Self::warm_index), whose entry it reads:
    /// prefetches the entries around its corrected (second) guess,
    /// where the search for `key` goes next.
    #[inline]
    pub fn warm_near(&self, key: u64) {
        if let Ok(Err(guess)) = self.second_guess(key) {
            self.prefetch_entries(guess);
        }
    }

    /// Prefetches the index entries of `block` and the next one, which a
    /// search from `block` reads.
    #[inline]
    fn prefetch_entries(&self, block: usize) {
        let at = self.entry_offset(block);
        prefetch(self.bytes, at..at + 2 * INDEX_ENTRY_LEN);
    }

    /// Where the block index entry a search for `key` reads first lies in
    /// the file (see [`warm_index`](Self::warm_index)), for asking the
    /// kernel to read it ahead; `None` when the search reads no other entry
    /// than the first and last (which it reads to guess).
    pub fn index_entry_span(&self, key: u64) -> Option<std::ops::Range<u64>> {
        let Ok(Err((guess, _))) = self.guess(key) else {
            return None;
        };
        let at = self.layout.base + to_u64(self.entry_offset(guess));
        Some(at..at + to_u64(INDEX_ENTRY_LEN))
    }

    /// Where the block a search for `key` starts in lies in the table's
    /// bytes; `None` for an empty table or a damaged index.
    fn block_bytes(&self, key: u64) -> Option<std::ops::Range<usize>> {
        if self.layout.block_count == 0 {
            return None;
        }
        let block = self.find_block(key).ok()?;
        let (_, start) = self.index_entry(block).ok()?;
        let end = if block + 1 < self.layout.block_count {
            self.index_entry(block + 1).ok()?.1
        } else {
            to_u64(self.layout.index_offset)
        };
        let (start, end) = (to_usize(start)?, to_usize(end)?);
        (start < end && end <= self.layout.index_offset).then_some(start..end)
    }

    /// Where the block a search for `key` starts in lies in the file (this
    /// section's offset added): for asking the kernel to read it ahead.
    /// `None` for an empty table or a damaged index.
    pub fn block_span(&self, key: u64) -> Option<std::ops::Range<u64>> {
        let bytes = self.block_bytes(key)?;
        Some(self.layout.base + to_u64(bytes.start)..self.layout.base + to_u64(bytes.end))
    }

    /// Prefetches the bytes of the block a search for `key` starts in,
    /// after [`warm_index`](Self::warm_index) (this reads the block index
    /// entries that one prefetched): a hint, as it is. Errors are left to
    /// the search.
    #[inline]
    pub fn warm_block(&self, key: u64) {
        if let Some(bytes) = self.block_bytes(key) {
            // All of it: its CRC is checked before any key is decoded.
            prefetch(self.bytes, bytes);
        }
    }

    /// [`warm_block`](Self::warm_block) for the blocks a search of
    /// `lo..=hi` is expected to read: the first, and as many after it as
    /// the range spans at the guide's density (at most `RUN_BLOCKS`
    /// more), at the table's mean block length. Only a table that is
    /// [`guided`](Self::guided) looks past the first block.
    #[inline]
    pub fn warm_run(&self, lo: u64, hi: u64) {
        let Some(bytes) = self.block_bytes(lo) else {
            return;
        };
        let more = self
            .layout
            .guide
            .map_or(0, |guide| guide.blocks_in(hi.saturating_sub(lo), true))
            .min(RUN_BLOCKS);
        let mean = self.layout.index_offset / self.layout.block_count.max(1);
        let end = bytes
            .end
            .saturating_add(more.saturating_mul(mean))
            .min(self.layout.index_offset);
        prefetch(self.bytes, bytes.start..end);
    }

    /// The keys in `lo..=hi`, ascending. Binary-searches the block index,
    /// then decodes from the block where the range starts.
    ///
    /// Yields an error (and then stops) when a block it reads is damaged.
    pub fn range(&self, lo: u64, hi: u64) -> Range<'a> {
        let state = if lo > hi || self.layout.key_count == 0 {
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
            .get(self.layout.index_offset..footer_at)
            .unwrap_or_default();
        check_crc(
            FILE,
            self.layout.base + to_u64(self.layout.index_offset),
            index,
            self.layout.index_crc,
        )?;
        if self.layout.block_count > 0 && self.index_entry(0)?.1 != 0 {
            return Err(self.malformed(
                self.layout.index_offset,
                "the first block does not start the table",
            ));
        }
        let mut count = 0u64;
        for key in self.iter() {
            key?;
            count += 1;
        }
        if count != self.layout.key_count {
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

/// Blocks past the first that [`TableReader::warm_run`] prefetches at most.
const RUN_BLOCKS: usize = 8;

/// Keys the first chunk of a search decodes at most.
const FIRST_CHUNK: usize = 8;

/// Blocks of more keys than this are skipped into by their unary codes.
const SKIP_ABOVE: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RangeState {
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
    /// Keys the next chunk decodes at most.
    chunk: usize,
    /// Whether the next block opened is the first of a search (its keys
    /// below `lo` may be skipped, and its first chunk is short).
    first_block: bool,
    /// Whether the iteration stopped at a key above `hi`, left at
    /// `buf[pos]` for a [`seek`](Self::seek) to a range above.
    ended: bool,
}

impl<'a> Range<'a> {
    pub(super) fn new(table: TableReader<'a>, lo: u64, hi: u64, state: RangeState) -> Self {
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
            chunk: CHUNK,
            state,
            first_block: true,
            ended: false,
        }
    }

    /// Goes on to the keys in `lo..=hi`, a range above the one iterated so
    /// far (`lo` above its `hi`), as if [`TableReader::range`] had been
    /// called anew: a new iteration, which [`next`](Iterator::next) then
    /// yields (even after it returned `None` for the previous range).
    ///
    /// The sorted probes of one query into one table
    /// ([`search::probe`](crate::search::probe)) share one `Range` this
    /// way: when `lo` lies before the first key of the block after the
    /// next one, the iteration goes on decoding where it stands (in the
    /// block it is in, or from the next one), instead of searching the
    /// block index and checking a block's CRC again; further on, it
    /// searches anew. Either way it yields the same keys.
    pub fn seek(&mut self, lo: u64, hi: u64) {
        let going_on = self.state == RangeState::Running && self.last.is_some() && lo > self.hi;
        self.ended = false;
        self.lo = lo;
        self.hi = hi;
        if lo > hi {
            self.state = RangeState::Done;
            self.len = 0;
            return;
        }
        // Only an iteration that has decoded keys of a range below goes on
        // where it stands; one that failed, ran out or never started
        // searches (a damaged index entry read here is left to the search
        // to report).
        if going_on {
            let count = self.table.layout.block_count;
            let below_first_of = |block: usize| {
                block >= count
                    || self
                        .table
                        .index_entry(block)
                        .is_ok_and(|(first, _)| lo < first)
            };
            if below_first_of(self.next_block) {
                // The keys from `lo` on start in this block or at the
                // next one's first key.
                return;
            }
            if below_first_of(self.next_block + 1) {
                // In the next block: open it, as a search would.
                self.cursor = None;
                self.len = 0;
                self.pos = 0;
                self.first_block = true;
                return;
            }
        }
        self.state = if self.table.layout.key_count == 0 {
            RangeState::Done
        } else {
            RangeState::Search
        };
        self.cursor = None;
        self.len = 0;
        self.pos = 0;
        self.last = None;
        self.first_block = true;
        self.chunk = CHUNK;
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
                    if self.next_block >= self.table.layout.block_count {
                        self.state = RangeState::Done;
                        return Ok(false);
                    }
                    let mut cursor = self.table.block(self.next_block)?;
                    self.next_block += 1;
                    // The search's first block: if long, skip what lies
                    // below `lo` (in a short block the skip saves less than
                    // it costs: docs/BENCHMARKS.md, "Prefetched blocks and
                    // a corrected guess"); then decode a few keys at first,
                    // as the search usually ends in the block (a later
                    // block must first show that its first key follows the
                    // previous block's last).
                    if self.first_block && self.lo > 0 {
                        if self.table.layout.block_len > SKIP_ABOVE {
                            cursor.skip_below(self.lo);
                        }
                        self.chunk = FIRST_CHUNK;
                    }
                    self.first_block = false;
                    self.cursor.insert(cursor)
                }
            };
            let n = cursor.decode_chunk(&mut self.buf, self.chunk)?;
            // A search's range usually holds a key or two past where its
            // first chunk starts: start small, then double.
            self.chunk = (self.chunk * 2).min(CHUNK);
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
        if self.ended {
            return None;
        }
        loop {
            if self.pos < self.len {
                let key = self.buf.get(self.pos).copied().unwrap_or_default();
                if key > self.hi {
                    // Left where it is, for a `seek` further on.
                    self.ended = true;
                    return None;
                }
                self.pos += 1;
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
