//! Decoding one block, a chunk of keys at a time, each block checked
//! against its CRC first.

use crate::format::FormatError;
use crate::format::bytes::{to_u64, to_usize, u64_at};

use super::rice::{bits_at, load_u64, low_mask};
use super::{BLOCK_HEADER_LEN, CHUNK, FILE, MAX_RICE};

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
pub(super) struct BlockCursor<'a> {
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
    pub(super) fn new(body: &'a [u8], count: usize, offset: u64) -> Result<Self, FormatError> {
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

    pub(super) fn malformed(&self, what: &'static str) -> FormatError {
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

    /// Skips the gaps whose keys are surely below `lo`, reading only their
    /// unary codes (and then their low bits, to learn the key where it
    /// stops): [`decode_chunk`](Self::decode_chunk) goes on from there.
    ///
    /// Each gap adds `q·2^r + low + 1 <= (q + 1)·2^r`, so after the gaps
    /// whose unary codes span `s` bits from here, the key is at most
    /// `key + s·2^r`: while that bound is below `lo`, every key so far is
    /// too. The skip stops before the block's last gap, which `decode_chunk`
    /// decodes (and checks the block's end with).
    ///
    /// Each pass starts from the exact key where the one before stopped,
    /// so the bound, loose by up to `2^r` per gap skipped, tightens.
    pub(super) fn skip_below(&mut self, lo: u64) {
        for _ in 0..2 {
            if !self.skip_pass(lo) {
                return;
            }
        }
    }

    /// One pass of [`skip_below`](Self::skip_below): whether it skipped.
    fn skip_pass(&mut self, lo: u64) -> bool {
        let remaining = self.gaps - self.done;
        let start = self.pos;
        if remaining < 2 || lo <= start.key {
            return false;
        }
        // s·2^r < lo - key exactly when s <= (lo - key - 1) >> r.
        let max_span = (lo - start.key - 1) >> self.r;
        let (mut word, mut word_base, mut next_bit) = (start.word, start.word_base, start.next_bit);
        let mut skipped = 0usize;
        'gaps: while skipped + 1 < remaining {
            while word == 0 {
                word_base += 64;
                let at = to_usize(word_base / 8).unwrap_or(usize::MAX);
                if at >= self.unary.len() {
                    // Damaged: the decoder reports it.
                    break 'gaps;
                }
                word = load_u64(self.unary, at);
            }
            // The whole word at once when its last gap is below `lo`: its
            // one bits are its gaps, the last of them ends the span.
            let ones = word.count_ones() as usize;
            let end = word_base + 64 - u64::from(word.leading_zeros());
            if skipped + ones < remaining && end - start.next_bit <= max_span {
                skipped += ones;
                next_bit = end;
                word = 0;
                continue;
            }
            // Otherwise gap by gap, up to the first that may reach `lo`.
            while word != 0 && skipped + 1 < remaining {
                let end = word_base + u64::from(word.trailing_zeros()) + 1;
                if end - start.next_bit > max_span {
                    break 'gaps;
                }
                word &= word - 1;
                next_bit = end;
                skipped += 1;
            }
        }
        if skipped == 0 {
            return false;
        }
        let (r, mask) = (self.r, low_mask(self.r));
        let mut low_sum = 0u64;
        let mut bit = start.bit;
        for _ in 0..skipped {
            low_sum += (load_u64(self.low, bit / 8) >> (bit % 8)) & mask;
            bit += r as usize;
        }
        // The key is at most the bound checked above, below `lo`: no sum
        // here overflows.
        let quotients = next_bit - start.next_bit - to_u64(skipped);
        self.pos = Position {
            word,
            word_base,
            next_bit,
            key: start.key + (quotients << r) + low_sum + to_u64(skipped),
            bit,
        };
        self.done += skipped;
        // The block's first key is below `lo` too.
        self.started = true;
        true
    }

    /// Decodes the next keys of the block into `out`; returns how many
    /// (0 once the block is exhausted). Checks that the block ends cleanly
    /// when its last key is decoded.
    ///
    /// At most `limit` keys (at least 1, at most [`CHUNK`]): a search that
    /// wants a few keys decodes a few.
    #[inline(never)]
    pub(super) fn decode_chunk(
        &mut self,
        out: &mut [u64; CHUNK],
        limit: usize,
    ) -> Result<usize, FormatError> {
        let limit = limit.clamp(1, CHUNK);
        let mut n = 0;
        if !self.started {
            self.started = true;
            if let Some(slot) = out.first_mut() {
                *slot = self.pos.key;
            }
            n = 1;
        }
        let want = (self.gaps - self.done).min(limit - n);
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
