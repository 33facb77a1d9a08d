//! The blocks of a doc map: bit streams, entry blocks and id index blocks.
//! Layouts: docs/FORMAT.md#doc-map-entry-block and #doc-map-id-block.

use super::super::bytes::{crc32, to_u64, to_usize, u64_at};
use super::super::{FileKind, FormatError, MAX_NAME_LEN};
use crate::sketch::Sketch;

const FILE: FileKind = FileKind::DocMap;
/// Entries (and id index records) per block; every block but the last is full.
pub(crate) const BLOCK_LEN: usize = 128;
/// Fixed fields at the start of an entry block of format version 3.
const ENTRY_HEAD_V3: usize = 46;
/// Fixed fields at the start of an entry block from version 4 on: the
/// version 3 fields and the sketch mode.
const ENTRY_HEAD: usize = 47;
/// Sketch modes (docs/FORMAT.md#doc-map-entry-block): no entry of the block
/// has a sketch, every entry has one, some do (a presence stream).
const SKETCHES_NONE: u8 = 0;
const SKETCHES_ALL: u8 = 1;
const SKETCHES_SOME: u8 = 2;
/// `sketch_slots` value of an entry without a sketch.
const NO_SKETCH: u8 = u8::MAX;
/// Fixed fields at the start of an id index block.
const ID_HEAD: usize = 10;
/// Largest Rice parameter (a reader fetches low bits with one 8-byte load).
const MAX_RICE: u32 = 56;
/// Widest name code: a name length plus one, at most 65,537.
const MAX_NAME_WIDTH: u32 = 17;

/// Bits needed to write `v` (0 for 0).
pub(crate) fn width(v: u64) -> u32 {
    64 - v.leading_zeros()
}

fn low_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The `width <= 64` bits starting at bit `bit` of `data`, least significant
/// first, zero past the end.
#[inline]
fn bits_at(data: &[u8], bit: usize, width: u32) -> u64 {
    let start = bit / 8;
    let word = match data.get(start..).and_then(|s| s.first_chunk::<16>()) {
        Some(chunk) => u128::from_le_bytes(*chunk),
        None => padded_u128(data, start),
    };
    ((word >> (bit % 8)) as u64) & low_mask(width)
}

/// The 16 bytes at `start` of `data`, zero past its end.
#[cold]
#[inline(never)]
fn padded_u128(data: &[u8], start: usize) -> u128 {
    let mut buf = [0u8; 16];
    for (dst, src) in buf.iter_mut().zip(data.get(start..).unwrap_or_default()) {
        *dst = *src;
    }
    u128::from_le_bytes(buf)
}

/// Whether the bits of `stream` from bit `used` on are all zero.
fn padding_clear(stream: &[u8], used: usize) -> bool {
    let full = used / 8;
    let partial = match stream.get(full) {
        Some(&b) if !used.is_multiple_of(8) => b >> (used % 8) == 0,
        _ => true,
    };
    let rest = stream
        .get(full + usize::from(!used.is_multiple_of(8))..)
        .unwrap_or_default();
    partial && rest.iter().all(|&b| b == 0)
}

/// Appends bits, least significant first, to a byte vector: gathered in a
/// 64-bit word, which goes out whole once full.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    /// Bits in `acc`, less than 64.
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

    /// The low `bits <= 64` bits of `value`.
    #[inline]
    fn write(&mut self, value: u64, bits: u32) {
        let value = value & low_mask(bits);
        self.acc |= value << self.len;
        let len = self.len + bits;
        if len >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            // The bits of `value` that did not fit (none if `acc` was
            // empty: a shift by 64 is not one).
            self.acc = value.checked_shr(64 - self.len).unwrap_or(0);
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
        self.out
            .extend_from_slice(self.acc.to_le_bytes().get(..bytes).unwrap_or_default());
    }
}

/// The Rice parameter that codes `gaps` in the fewest bits among
/// `⌊log2 mean⌋ - 1 ..= ⌊log2 mean⌋ + 1`, capped at 56 (the lower one on a
/// tie, the middle one before either), with the three costs summed in one
/// pass.
fn rice_parameter(gaps: &[u64]) -> u32 {
    if gaps.is_empty() {
        return 0;
    }
    let sum: u128 = gaps.iter().map(|&g| u128::from(g)).sum();
    let mean = (sum / gaps.len() as u128).max(1);
    let r0 = 127 - mean.leading_zeros();
    let candidates = [
        r0.min(MAX_RICE),
        r0.saturating_sub(1).min(MAX_RICE),
        (r0 + 1).min(MAX_RICE),
    ];
    let mut quotients = [0u128; 3];
    for &g in gaps {
        for (q, &r) in quotients.iter_mut().zip(&candidates) {
            *q += u128::from(g >> r);
        }
    }
    let n = gaps.len() as u128;
    let mut costs = quotients
        .iter()
        .zip(candidates)
        .map(|(&q, r)| (q + n * (1 + u128::from(r)), r));
    let mut best = costs.next().unwrap_or((0, 0));
    for (cost, r) in costs {
        if cost < best.0 {
            best = (cost, r);
        }
    }
    best.1
}

/// Appends the Rice low stream of `gaps` (their low `r` bits).
fn write_rice_low(out: &mut Vec<u8>, gaps: &[u64], r: u32) {
    write_packed(out, gaps.iter().copied(), r);
}

/// Appends the Rice unary stream of `gaps` (their quotients by `2^r`).
fn write_rice_unary(out: &mut Vec<u8>, gaps: &[u64], r: u32) {
    let mut w = BitWriter::new(out);
    for &g in gaps {
        w.unary(g >> r);
    }
    w.finish();
}

fn write_packed(out: &mut Vec<u8>, values: impl Iterator<Item = u64>, bits: u32) {
    if bits == 0 {
        return;
    }
    let mut w = BitWriter::new(out);
    for v in values {
        w.write(v, bits);
    }
    w.finish();
}

/// One document as the writer holds it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Pending {
    pub(crate) fingerprint: u64,
    pub(crate) id: u64,
    pub(crate) seq: u64,
    pub(crate) timestamp: u64,
    /// Name length + 1, or 0 for no name.
    pub(crate) name_code: u32,
    pub(crate) sketch: Option<Sketch>,
}

/// The smallest and largest of a block's values of one field.
#[derive(Clone, Copy)]
struct Span {
    lo: u64,
    hi: u64,
}

impl Span {
    const EMPTY: Span = Span {
        lo: u64::MAX,
        hi: 0,
    };

    #[inline]
    fn add(&mut self, v: u64) {
        self.lo = self.lo.min(v);
        self.hi = self.hi.max(v);
    }

    /// The base and width a block writes (0 and 0 for no values).
    fn base_width(self) -> (u64, u32) {
        if self.lo > self.hi {
            (0, 0)
        } else {
            (self.lo, width(self.hi - self.lo))
        }
    }
}

/// Appends the entry block of `entries` (1..=128, sorted by (fingerprint,
/// id)) whose names are `names` (back to back, in entry order) and start at
/// `name_base` in the names section.
pub(crate) fn encode_entry_block(
    entries: &[Pending],
    names: &[u8],
    name_base: u64,
    out: &mut Vec<u8>,
) {
    let start = out.len();
    let first = entries.first().copied().unwrap_or_default();
    let gaps: Vec<u64> = entries
        .windows(2)
        .map(|w| match w {
            [a, b] => b.fingerprint.wrapping_sub(a.fingerprint),
            _ => 0,
        })
        .collect();
    let r = rice_parameter(&gaps);
    // Every field's range, and the names' and sketches' counts, in one pass.
    let (mut ids, mut seqs, mut rels, mut times) =
        (Span::EMPTY, Span::EMPTY, Span::EMPTY, Span::EMPTY);
    let mut max_name = 0u32;
    let mut sketched = 0usize;
    for e in entries {
        ids.add(e.id);
        seqs.add(e.seq);
        rels.add(e.seq.wrapping_sub(e.id));
        times.add(e.timestamp);
        max_name = max_name.max(e.name_code);
        sketched += usize::from(e.sketch.is_some());
    }
    let (id_base, id_width) = ids.base_width();
    let (seq_base, seq_width) = seqs.base_width();
    let (rel_base, rel_width) = rels.base_width();
    let relative = rel_width < seq_width;
    let (seq_base, seq_width) = if relative {
        (rel_base, rel_width)
    } else {
        (seq_base, seq_width)
    };
    let (ts_base, ts_width) = times.base_width();
    let name_width = width(u64::from(max_name));
    let sketch_mode = match sketched {
        0 => SKETCHES_NONE,
        n if n == entries.len() => SKETCHES_ALL,
        _ => SKETCHES_SOME,
    };
    out.extend_from_slice(&first.fingerprint.to_le_bytes());
    out.push(r as u8);
    out.extend_from_slice(&id_base.to_le_bytes());
    out.push(id_width as u8);
    out.extend_from_slice(&seq_base.to_le_bytes());
    out.push(seq_width as u8);
    out.push(u8::from(relative));
    out.extend_from_slice(&ts_base.to_le_bytes());
    out.push(ts_width as u8);
    out.push(name_width as u8);
    out.extend_from_slice(&name_base.to_le_bytes());
    out.push(sketch_mode);
    write_rice_low(out, &gaps, r);
    write_packed(out, entries.iter().map(|e| e.id - id_base), id_width);
    if relative {
        write_packed(
            out,
            entries
                .iter()
                .map(|e| e.seq.wrapping_sub(e.id).wrapping_sub(seq_base)),
            seq_width,
        );
    } else {
        write_packed(out, entries.iter().map(|e| e.seq - seq_base), seq_width);
    }
    write_packed(out, entries.iter().map(|e| e.timestamp - ts_base), ts_width);
    write_packed(
        out,
        entries.iter().map(|e| u64::from(e.name_code)),
        name_width,
    );
    if sketch_mode == SKETCHES_SOME {
        write_packed(
            out,
            entries.iter().map(|e| u64::from(e.sketch.is_some())),
            1,
        );
    }
    for sketch in entries.iter().filter_map(|e| e.sketch) {
        out.extend_from_slice(&sketch.to_bytes());
    }
    write_rice_unary(out, &gaps, r);
    let mut crc = crc32fast::Hasher::new();
    crc.update(out.get(start..).unwrap_or_default());
    crc.update(names);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
}

/// Appends the id index block of `pairs` (1..=128 (id, position) pairs,
/// ids strictly increasing); positions take `position_width` bits each.
pub(crate) fn encode_id_block(pairs: &[(u64, u32)], position_width: u32, out: &mut Vec<u8>) {
    let start = out.len();
    let first = pairs.first().map_or(0, |p| p.0);
    let gaps: Vec<u64> = pairs
        .windows(2)
        .map(|w| match w {
            [a, b] => b.0.wrapping_sub(a.0).wrapping_sub(1),
            _ => 0,
        })
        .collect();
    let r = rice_parameter(&gaps);
    out.extend_from_slice(&first.to_le_bytes());
    out.push(r as u8);
    out.push(position_width as u8);
    write_rice_low(out, &gaps, r);
    write_packed(out, pairs.iter().map(|p| u64::from(p.1)), position_width);
    write_rice_unary(out, &gaps, r);
    let crc = crc32(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Splits `len` bytes off the front of `rest`.
fn take<'a>(rest: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(len)?;
    *rest = tail;
    Some(head)
}

/// Decodes `n - 1` Rice gaps into `out[1..n]` starting from `first`; `plus`
/// is added to each gap (1 where keys are distinct). Checks that the
/// streams hold exactly these gaps and that no key passes `u64::MAX`.
fn decode_rice(
    first: u64,
    low: &[u8],
    unary: &[u8],
    r: u32,
    plus: u64,
    out: &mut [u64],
) -> Option<()> {
    let mut key = first;
    *out.first_mut()? = first;
    let mut bit = 0usize;
    // `word` holds the unary bits from bit `base` on, those used cleared;
    // `next` is the bit just past the last one bit read.
    let (mut base, mut next) = (0usize, 0usize);
    let mut word = bits_at(unary, 0, 64);
    let total = unary.len() * 8;
    for slot in out.iter_mut().skip(1) {
        while word == 0 {
            base += 64;
            if base >= total {
                return None;
            }
            word = bits_at(unary, base, 64);
        }
        let at = base + word.trailing_zeros() as usize;
        word &= word - 1;
        let q = to_u64(at - next);
        next = at + 1;
        if q > u64::MAX >> r {
            return None;
        }
        let gap = (q << r) | bits_at(low, bit, r);
        bit += r as usize;
        key = key.checked_add(gap)?.checked_add(plus)?;
        *slot = key;
    }
    (padding_clear(low, bit) && next.div_ceil(8) == unary.len() && padding_clear(unary, next))
        .then_some(())
}

/// A packed stream of `count` values of `bits` bits.
#[derive(Debug, Clone, Copy, Default)]
struct Packed<'a> {
    bytes: &'a [u8],
    bits: u32,
}

impl<'a> Packed<'a> {
    fn take(rest: &mut &'a [u8], bits: u32, count: usize) -> Option<Self> {
        let used = count.checked_mul(bits as usize)?;
        let bytes = take(rest, used.div_ceil(8))?;
        padding_clear(bytes, used).then_some(Packed { bytes, bits })
    }

    fn get(&self, i: usize) -> u64 {
        bits_at(self.bytes, i * self.bits as usize, self.bits)
    }
}

/// A field of one entry in a block, base plus packed value.
#[derive(Debug, Clone, Copy, Default)]
struct Field<'a> {
    base: u64,
    packed: Packed<'a>,
}

/// One entry block, its CRC (and its names') checked and its fingerprints
/// decoded; the other fields are unpacked on demand.
#[derive(Debug, Clone)]
pub(crate) struct EntryBlock<'a> {
    fingerprints: [u64; BLOCK_LEN],
    len: usize,
    id: Field<'a>,
    seq: Field<'a>,
    seq_relative: bool,
    timestamp: Field<'a>,
    codes: Packed<'a>,
    /// Where each entry's name starts among the block's names (entry `i`'s
    /// ends where entry `i + 1`'s starts).
    name_starts: [u32; BLOCK_LEN + 1],
    /// The block's names, back to back.
    names: &'a [u8],
    /// Where the block's names start in the names section.
    name_base: u64,
    /// The block's sketches, 16 bytes each, and for each entry the index of
    /// its sketch among them ([`NO_SKETCH`] for none).
    sketches: &'a [u8],
    sketch_slots: [u8; BLOCK_LEN],
}

/// One decoded entry; its name is a range of the block's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) fingerprint: u64,
    pub(crate) id: u64,
    pub(crate) seq: u64,
    pub(crate) timestamp: u64,
}

impl<'a> EntryBlock<'a> {
    /// Parses and checks the block `bytes` of `len` entries (1..=128) at
    /// offset `at` of a file of format `version`, whose names lie in
    /// `names` (the whole names section).
    ///
    /// With `crc` false the block's CRC is not computed (the caller checked
    /// this block of this file before); its other checks still run.
    pub(crate) fn parse(
        bytes: &'a [u8],
        len: usize,
        names: &'a [u8],
        at: u64,
        version: u32,
        crc: bool,
    ) -> Result<Self, FormatError> {
        let bad = |what| FormatError::malformed(FILE, at, what);
        if len == 0 || len > BLOCK_LEN {
            return Err(bad("a doc map block has a wrong entry count"));
        }
        let head = if version >= 4 {
            ENTRY_HEAD
        } else {
            ENTRY_HEAD_V3
        };
        let check_crc = crc;
        let Some((body, crc)) = bytes
            .split_last_chunk::<4>()
            .filter(|(b, _)| b.len() >= head)
        else {
            return Err(bad(
                "a doc map entry block is shorter than its fixed fields",
            ));
        };
        let u8_at = |i: usize| u32::from(body.get(i).copied().unwrap_or(0));
        let u64_of = |i: usize| u64_at(body, i).unwrap_or(0);
        let (first, r) = (u64_of(0), u8_at(8));
        let (id_base, id_width) = (u64_of(9), u8_at(17));
        let (seq_base, seq_width, relative) = (u64_of(18), u8_at(26), u8_at(27));
        let (ts_base, ts_width) = (u64_of(28), u8_at(36));
        let (name_width, name_base) = (u8_at(37), u64_of(38));
        let sketch_mode = if version >= 4 {
            body.get(46).copied().unwrap_or(0)
        } else {
            SKETCHES_NONE
        };
        if r > MAX_RICE
            || id_width > 64
            || seq_width > 64
            || ts_width > 64
            || relative > 1
            || name_width > MAX_NAME_WIDTH
            || sketch_mode > SKETCHES_SOME
        {
            return Err(bad("a doc map entry block has a field width out of range"));
        }
        let mut rest = body.get(head..).unwrap_or_default();
        let low_bits = (len - 1) * r as usize;
        let streams = (|| {
            let low = take(&mut rest, low_bits.div_ceil(8))?;
            let id = Packed::take(&mut rest, id_width, len)?;
            let seq = Packed::take(&mut rest, seq_width, len)?;
            let ts = Packed::take(&mut rest, ts_width, len)?;
            let codes = Packed::take(&mut rest, name_width, len)?;
            let presence = match sketch_mode {
                SKETCHES_SOME => Some(Packed::take(&mut rest, 1, len)?),
                _ => None,
            };
            Some((low, id, seq, ts, codes, presence))
        })();
        let Some((low, id, seq, ts, codes, presence)) = streams else {
            return Err(bad("a doc map entry block is shorter than its streams"));
        };
        let mut sketch_slots = [NO_SKETCH; BLOCK_LEN];
        let mut sketched = 0usize;
        if sketch_mode != SKETCHES_NONE {
            for (i, slot) in sketch_slots.iter_mut().enumerate().take(len) {
                if presence.is_none_or(|p| p.get(i) == 1) {
                    *slot = sketched as u8;
                    sketched += 1;
                }
            }
        }
        if sketch_mode == SKETCHES_SOME && (sketched == 0 || sketched == len) {
            return Err(bad(
                "a doc map entry block's sketch presence bits are all equal",
            ));
        }
        let Some(sketches) = take(&mut rest, sketched * Sketch::BYTES) else {
            return Err(bad("a doc map entry block is shorter than its sketches"));
        };
        let unary = rest;
        let mut name_starts = [0u32; BLOCK_LEN + 1];
        let mut names_len = 0usize;
        if name_width > 0 {
            for i in 0..len {
                let code = codes.get(i);
                if code > to_u64(MAX_NAME_LEN) + 1 {
                    return Err(bad("a doc map entry has a name longer than 65,536 bytes"));
                }
                names_len += to_usize(code.saturating_sub(1)).unwrap_or(usize::MAX);
                if let Some(slot) = name_starts.get_mut(i + 1) {
                    *slot = u32::try_from(names_len).unwrap_or(u32::MAX);
                }
            }
        }
        let block_names = to_usize(name_base)
            .and_then(|s| names.get(s..s.checked_add(names_len)?))
            .ok_or_else(|| bad("a doc map block's names lie outside the names section"))?;
        if check_crc {
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(body);
            hasher.update(block_names);
            let (computed, stored) = (hasher.finalize(), u32::from_le_bytes(*crc));
            if computed != stored {
                return Err(FormatError::new(
                    FILE,
                    at,
                    super::super::FormatErrorKind::ChecksumMismatch {
                        expected: stored,
                        got: computed,
                    },
                ));
            }
        }
        let mut fingerprints = [0u64; BLOCK_LEN];
        decode_rice(
            first,
            low,
            unary,
            r,
            0,
            fingerprints.get_mut(..len).unwrap_or_default(),
        )
        .ok_or_else(|| bad("a doc map entry block's fingerprint streams do not decode"))?;
        let block = EntryBlock {
            fingerprints,
            len,
            id: Field {
                base: id_base,
                packed: id,
            },
            seq: Field {
                base: seq_base,
                packed: seq,
            },
            seq_relative: relative == 1,
            timestamp: Field {
                base: ts_base,
                packed: ts,
            },
            codes,
            name_starts,
            names: block_names,
            name_base,
            sketches,
            sketch_slots,
        };
        // A packed field passes 2^64 - 1 only if its base plus its widest
        // value could: each value is checked only then.
        let fields = [
            Some(&block.id),
            Some(&block.timestamp),
            (!block.seq_relative).then_some(&block.seq),
        ];
        for field in fields.into_iter().flatten() {
            if field
                .base
                .checked_add(low_mask(field.packed.bits))
                .is_none()
                && (0..len).any(|i| field.base.checked_add(field.packed.get(i)).is_none())
            {
                return Err(bad("a doc map entry's field passes 2^64 - 1"));
            }
        }
        Ok(block)
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The fingerprint of entry `i`.
    pub(crate) fn fingerprint(&self, i: usize) -> u64 {
        self.fingerprints.get(i).copied().unwrap_or(u64::MAX)
    }

    /// Entry `i` (all fields were checked by `parse`).
    pub(crate) fn entry(&self, i: usize) -> Decoded {
        let id = self.id.base.wrapping_add(self.id.packed.get(i));
        let seq = if self.seq_relative {
            id.wrapping_add(self.seq.base)
                .wrapping_add(self.seq.packed.get(i))
        } else {
            self.seq.base.wrapping_add(self.seq.packed.get(i))
        };
        Decoded {
            fingerprint: self.fingerprint(i),
            id,
            seq,
            timestamp: self
                .timestamp
                .base
                .wrapping_add(self.timestamp.packed.get(i)),
        }
    }

    /// Entry `i`'s name bytes: `None` for no name.
    pub(crate) fn name(&self, i: usize) -> Option<&'a [u8]> {
        if self.codes.bits == 0 {
            return None;
        }
        if self.codes.get(i) == 0 {
            return None;
        }
        let start = self.name_starts.get(i).copied()? as usize;
        let end = self.name_starts.get(i + 1).copied()? as usize;
        self.names.get(start..end)
    }

    /// Entry `i`'s sketch: `None` for none.
    pub(crate) fn sketch(&self, i: usize) -> Option<Sketch> {
        let slot = *self.sketch_slots.get(i)?;
        if slot == NO_SKETCH {
            return None;
        }
        let start = usize::from(slot) * Sketch::BYTES;
        let bytes = self.sketches.get(start..start + Sketch::BYTES)?;
        Some(Sketch::from_bytes(bytes.try_into().ok()?))
    }

    /// Where the block's names start in the names section.
    pub(crate) fn name_base(&self) -> u64 {
        self.name_base
    }

    /// Where the block's names end in the names section.
    pub(crate) fn name_end(&self) -> u64 {
        self.name_base + to_u64(self.names.len())
    }
}

/// One id index block, its CRC checked and its ids decoded.
#[derive(Debug, Clone)]
pub(crate) struct IdBlock<'a> {
    ids: [u64; BLOCK_LEN],
    len: usize,
    positions: Packed<'a>,
}

impl<'a> IdBlock<'a> {
    /// Parses and checks the id block `bytes` of `len` records (1..=128) at
    /// offset `at` of the file.
    /// With `crc` false the CRC is not computed (checked before).
    pub(crate) fn parse(
        bytes: &'a [u8],
        len: usize,
        at: u64,
        crc: bool,
    ) -> Result<Self, FormatError> {
        let bad = |what| FormatError::malformed(FILE, at, what);
        if len == 0 || len > BLOCK_LEN {
            return Err(bad("a doc map block has a wrong record count"));
        }
        let check_crc = crc;
        let Some((body, stored)) = bytes
            .split_last_chunk::<4>()
            .filter(|(b, _)| b.len() >= ID_HEAD)
        else {
            return Err(bad("a doc map id block is shorter than its fixed fields"));
        };
        if check_crc {
            super::super::bytes::check_crc(FILE, at, body, u32::from_le_bytes(*stored))?;
        }
        let first = u64_at(body, 0).unwrap_or(0);
        let r = u32::from(body.get(8).copied().unwrap_or(0));
        let position_width = u32::from(body.get(9).copied().unwrap_or(0));
        if r > MAX_RICE || position_width > 32 {
            return Err(bad("a doc map id block has a field width out of range"));
        }
        let mut rest = body.get(ID_HEAD..).unwrap_or_default();
        let streams = (|| {
            let low = take(&mut rest, ((len - 1) * r as usize).div_ceil(8))?;
            let positions = Packed::take(&mut rest, position_width, len)?;
            Some((low, positions))
        })();
        let Some((low, positions)) = streams else {
            return Err(bad("a doc map id block is shorter than its streams"));
        };
        let mut ids = [0u64; BLOCK_LEN];
        decode_rice(
            first,
            low,
            rest,
            r,
            1,
            ids.get_mut(..len).unwrap_or_default(),
        )
        .ok_or_else(|| bad("a doc map id block's streams do not decode"))?;
        Ok(IdBlock {
            ids,
            len,
            positions,
        })
    }

    /// The ids, increasing.
    pub(crate) fn ids(&self) -> &[u64] {
        self.ids.get(..self.len).unwrap_or_default()
    }

    /// Record `i`: (id, entry position).
    pub(crate) fn record(&self, i: usize) -> (u64, u64) {
        (self.ids.get(i).copied().unwrap_or(0), self.positions.get(i))
    }
}

/// The stored first key of the block at `offset` of a blocks section (not
/// checked: compared with the block index's copy to trust either).
pub(crate) fn stored_first_key(blocks: &[u8], offset: usize) -> Option<u64> {
    u64_at(blocks, offset)
}

/// Reads a 16-byte block index record: (first key, offset).
pub(crate) fn index_record(index: &[u8], i: usize) -> Option<(u64, u64)> {
    let at = i.checked_mul(16)?;
    Some((u64_at(index, at)?, u64_at(index, at + 8)?))
}

/// The block encoders as they were before [`BitWriter`] gathered 64-bit
/// words and the fields' ranges were taken in one pass: what the new ones
/// must write byte for byte.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod reference {
    use super::super::super::bytes::crc32;
    use super::{MAX_RICE, Pending, SKETCHES_ALL, SKETCHES_NONE, SKETCHES_SOME, low_mask, width};

    /// Appends bits, least significant first, to a byte vector.
    struct BitWriter<'a> {
        out: &'a mut Vec<u8>,
        acc: u128,
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

        /// The low `bits <= 64` bits of `value`.
        fn write(&mut self, value: u64, bits: u32) {
            self.acc |= u128::from(value & low_mask(bits)) << self.len;
            self.len += bits;
            while self.len >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.len -= 8;
            }
        }

        /// `q` zero bits, then a one bit.
        fn unary(&mut self, mut q: u64) {
            while q >= 32 {
                self.write(0, 32);
                q -= 32;
            }
            self.write(1 << q, q as u32 + 1);
        }

        /// Pads with zero bits to a byte boundary.
        fn finish(self) {
            if self.len > 0 {
                self.out.push(self.acc as u8);
            }
        }
    }

    /// The Rice parameter that codes `gaps` in the fewest bits among
    /// `⌊log2 mean⌋ - 1 ..= ⌊log2 mean⌋ + 1`, capped at 56.
    fn rice_parameter(gaps: &[u64]) -> u32 {
        if gaps.is_empty() {
            return 0;
        }
        let sum: u128 = gaps.iter().map(|&g| u128::from(g)).sum();
        let mean = (sum / gaps.len() as u128).max(1);
        let r0 = 127 - mean.leading_zeros();
        let cost = |r: u32| -> u128 {
            gaps.iter()
                .map(|&g| u128::from(g >> r) + 1 + u128::from(r))
                .sum()
        };
        let mut best = r0.min(MAX_RICE);
        for r in [r0.saturating_sub(1), r0 + 1] {
            let r = r.min(MAX_RICE);
            if cost(r) < cost(best) {
                best = r;
            }
        }
        best
    }

    /// Writes `gaps` as a Rice low stream and a unary stream.
    fn write_rice(gaps: &[u64], r: u32) -> (Vec<u8>, Vec<u8>) {
        let (mut low, mut unary) = (Vec::new(), Vec::new());
        {
            let mut w = BitWriter::new(&mut low);
            for &g in gaps {
                w.write(g, r);
            }
            w.finish();
        }
        {
            let mut w = BitWriter::new(&mut unary);
            for &g in gaps {
                w.unary(g >> r);
            }
            w.finish();
        }
        (low, unary)
    }

    fn write_packed(out: &mut Vec<u8>, values: impl Iterator<Item = u64>, bits: u32) {
        let mut w = BitWriter::new(out);
        for v in values {
            w.write(v, bits);
        }
        w.finish();
    }

    /// Appends the entry block of `entries` (1..=128, sorted by (fingerprint,
    /// id)) whose names are `names` (back to back, in entry order) and start at
    /// `name_base` in the names section.
    pub(super) fn encode_entry_block(
        entries: &[Pending],
        names: &[u8],
        name_base: u64,
        out: &mut Vec<u8>,
    ) {
        let start = out.len();
        let first = entries.first().copied().unwrap_or_default();
        let gaps: Vec<u64> = entries
            .windows(2)
            .map(|w| match w {
                [a, b] => b.fingerprint.wrapping_sub(a.fingerprint),
                _ => 0,
            })
            .collect();
        let r = rice_parameter(&gaps);
        let span = |f: &dyn Fn(&Pending) -> u64| {
            let lo = entries.iter().map(f).min().unwrap_or(0);
            let hi = entries.iter().map(f).max().unwrap_or(0);
            (lo, width(hi - lo))
        };
        let (id_base, id_width) = span(&|e| e.id);
        let (seq_base, seq_width) = span(&|e| e.seq);
        let (rel_base, rel_width) = span(&|e| e.seq.wrapping_sub(e.id));
        let relative = rel_width < seq_width;
        let (seq_base, seq_width) = if relative {
            (rel_base, rel_width)
        } else {
            (seq_base, seq_width)
        };
        let (ts_base, ts_width) = span(&|e| e.timestamp);
        let name_width = width(
            entries
                .iter()
                .map(|e| u64::from(e.name_code))
                .max()
                .unwrap_or(0),
        );
        let sketched = entries.iter().filter(|e| e.sketch.is_some()).count();
        let sketch_mode = match sketched {
            0 => SKETCHES_NONE,
            n if n == entries.len() => SKETCHES_ALL,
            _ => SKETCHES_SOME,
        };
        out.extend_from_slice(&first.fingerprint.to_le_bytes());
        out.push(r as u8);
        out.extend_from_slice(&id_base.to_le_bytes());
        out.push(id_width as u8);
        out.extend_from_slice(&seq_base.to_le_bytes());
        out.push(seq_width as u8);
        out.push(u8::from(relative));
        out.extend_from_slice(&ts_base.to_le_bytes());
        out.push(ts_width as u8);
        out.push(name_width as u8);
        out.extend_from_slice(&name_base.to_le_bytes());
        out.push(sketch_mode);
        let (low, unary) = write_rice(&gaps, r);
        out.extend_from_slice(&low);
        write_packed(out, entries.iter().map(|e| e.id - id_base), id_width);
        let seq_of = |e: &Pending| {
            if relative {
                e.seq.wrapping_sub(e.id).wrapping_sub(seq_base)
            } else {
                e.seq - seq_base
            }
        };
        write_packed(out, entries.iter().map(seq_of), seq_width);
        write_packed(out, entries.iter().map(|e| e.timestamp - ts_base), ts_width);
        write_packed(
            out,
            entries.iter().map(|e| u64::from(e.name_code)),
            name_width,
        );
        if sketch_mode == SKETCHES_SOME {
            write_packed(
                out,
                entries.iter().map(|e| u64::from(e.sketch.is_some())),
                1,
            );
        }
        for sketch in entries.iter().filter_map(|e| e.sketch) {
            out.extend_from_slice(&sketch.to_bytes());
        }
        out.extend_from_slice(&unary);
        let mut crc = crc32fast::Hasher::new();
        crc.update(out.get(start..).unwrap_or_default());
        crc.update(names);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
    }

    /// Appends the id index block of `pairs` (1..=128 (id, position) pairs,
    /// ids strictly increasing); positions take `position_width` bits each.
    pub(super) fn encode_id_block(pairs: &[(u64, u32)], position_width: u32, out: &mut Vec<u8>) {
        let start = out.len();
        let first = pairs.first().map_or(0, |p| p.0);
        let gaps: Vec<u64> = pairs
            .windows(2)
            .map(|w| match w {
                [a, b] => b.0.wrapping_sub(a.0).wrapping_sub(1),
                _ => 0,
            })
            .collect();
        let r = rice_parameter(&gaps);
        out.extend_from_slice(&first.to_le_bytes());
        out.push(r as u8);
        out.push(position_width as u8);
        let (low, unary) = write_rice(&gaps, r);
        out.extend_from_slice(&low);
        write_packed(out, pairs.iter().map(|p| u64::from(p.1)), position_width);
        out.extend_from_slice(&unary);
        let crc = crc32(out.get(start..).unwrap_or_default());
        out.extend_from_slice(&crc.to_le_bytes());
    }

    fn xorshift(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Blocks of 1 to 128 entries whose fields span nothing, a few bits or
    /// all 64 (gaps of 0 and of nearly 2^64, ids and sequence numbers at 0
    /// and `u64::MAX`, sequence numbers that follow the ids or not), with
    /// and without names and sketches; id blocks with every position width
    /// and gaps small and huge.
    #[test]
    fn blocks_are_written_byte_for_byte_as_before() {
        use crate::sketch::Sketch;
        let mut s = 0x5eed_u64;
        let mut cases = 0;
        for len in [1usize, 2, 3, 7, 64, 127, 128] {
            for shape in 0..12u64 {
                let mut fps: Vec<u64> = (0..len)
                    .map(|i| match shape % 4 {
                        0 => xorshift(&mut s),
                        1 => 42,
                        2 => [0, u64::MAX][i % 2],
                        _ => 1 << 40 | (xorshift(&mut s) & 0xffff),
                    })
                    .collect();
                fps.sort_unstable();
                let entries: Vec<Pending> = fps
                    .iter()
                    .enumerate()
                    .map(|(i, &fingerprint)| {
                        let r = xorshift(&mut s);
                        let id = match shape % 3 {
                            0 => r,
                            1 => 1000 + i as u64,
                            _ => [0, u64::MAX, r & 0xff][i % 3],
                        };
                        let seq = match shape / 4 {
                            0 => id.wrapping_add(7),
                            1 => r >> (i % 64),
                            _ => u64::MAX - (r & 0xffff_ffff),
                        };
                        Pending {
                            fingerprint,
                            id,
                            seq,
                            timestamp: match shape % 5 {
                                0 => 1_700_000_000_000,
                                1 => r.rotate_left(17),
                                _ => 1_700_000_000_000 + (r & 0xfff),
                            },
                            name_code: match shape % 3 {
                                0 => 0,
                                1 => (r % 65_538) as u32,
                                _ => (r % 20) as u32,
                            },
                            sketch: match (shape / 2) % 3 {
                                0 => None,
                                1 => Some(Sketch::from_bytes(
                                    r.to_le_bytes().repeat(2).try_into().unwrap(),
                                )),
                                _ => r
                                    .is_multiple_of(3)
                                    .then(|| Sketch::from_bytes([i as u8; 16])),
                            },
                        }
                    })
                    .collect();
                let names: Vec<u8> = (0..shape * 3).map(|b| b as u8).collect();
                let base = xorshift(&mut s) >> (shape * 5);
                let (mut want, mut got) = (vec![9u8], vec![9u8]);
                encode_entry_block(&entries, &names, base, &mut want);
                super::encode_entry_block(&entries, &names, base, &mut got);
                assert_eq!(got, want, "entry block of {len}, shape {shape}");

                let mut ids: Vec<u64> = (0..len)
                    .map(|i| match shape % 4 {
                        0 => xorshift(&mut s),
                        1 => 5 + i as u64,
                        2 => xorshift(&mut s) >> (64 - len.max(2).ilog2() - 8),
                        _ => [0, u64::MAX][i % 2] ^ i as u64,
                    })
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                for position_width in [0, 1, 9, 31, 32] {
                    let pairs: Vec<(u64, u32)> = ids
                        .iter()
                        .map(|&id| (id, (xorshift(&mut s) & low_mask(position_width)) as u32))
                        .collect();
                    let (mut want, mut got) = (Vec::new(), Vec::new());
                    encode_id_block(&pairs, position_width, &mut want);
                    super::encode_id_block(&pairs, position_width, &mut got);
                    assert_eq!(
                        got, want,
                        "id block of {len}, shape {shape}, width {position_width}"
                    );
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 7 * 12);
    }
}
