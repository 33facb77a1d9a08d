//! The bits of a block: choosing the Rice parameter, writing gaps as low
//! bits and unary high parts, and reading bits back.
//! See docs/FORMAT.md#table-blocks.

use crate::format::bytes::crc32;

use super::MAX_RICE;

#[inline]
pub(super) fn low_mask(bits: u32) -> u64 {
    // Callers pass a Rice parameter (<= 56) or a padding width (< 8).
    (1u64 << bits) - 1
}

/// The Rice parameter for a block's gaps: start from `floor(log2(mean gap))`
/// and keep whichever of it and its two neighbours codes the gaps in the
/// fewest bits (exact count, not an estimate). Two passes over the gaps: the
/// mean, then the three candidates' costs together.
pub(super) fn rice_parameter<I: Iterator<Item = u64> + Clone>(gaps: I) -> u32 {
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
    pub(super) fn new(out: &'a mut Vec<u8>) -> Self {
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
    pub(super) fn unary(&mut self, mut q: u64) {
        while q >= 63 {
            self.write(0, 63);
            q -= 63;
        }
        self.write(1 << q, q as u32 + 1);
    }

    /// Pads with zero bits to a byte boundary.
    pub(super) fn finish(self) {
        let bytes = self.len.div_ceil(8) as usize;
        self.out.extend(self.acc.to_le_bytes().iter().take(bytes));
    }
}

/// Appends one encoded block of `keys` (non-empty, strictly increasing):
/// first key, Rice parameter, the low bits of every gap, then the unary
/// high parts, then the CRC. See docs/FORMAT.md#table-blocks.
pub(super) fn encode_block(keys: &[u64], out: &mut Vec<u8>) {
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

/// Eight bytes at `at`, zero-padded past the end of `data`.
#[inline]
pub(super) fn load_u64(data: &[u8], at: usize) -> u64 {
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
pub(super) fn bits_at(data: &[u8], bit: usize, width: u32) -> u64 {
    (load_u64(data, bit / 8) >> (bit % 8)) & low_mask(width)
}
