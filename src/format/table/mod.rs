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
//!
//! From format version 5 a table may instead be flat ([`FlatTable`]): a
//! directory over the keys' top bits and each key's low bits at a fixed
//! width, searched where it is mapped (docs/FORMAT.md#flat-table-section).

use super::FileKind;

mod block;
mod flat;
mod reader;
mod rice;
mod writer;

pub(crate) use flat::is_flat;
pub use flat::{
    FLAT_CHUNK_LEN, FlatKeys, FlatLayout, FlatTable, FlatTableWriter, MAX_FLAT_BITS, flat_width,
};
pub use reader::{Range, TableLayout, TableReader};
pub use writer::TableWriter;

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::rice::rice_parameter;
    use super::*;
    use crate::format::EncodeError;
    use crate::format::bytes::{crc32, u64_at};

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

    /// Checks `t.range(lo, hi)` against `keys`, with the guide read at
    /// every guess and read once ([`TableReader::guided`]).
    fn assert_range(t: &TableReader<'_>, keys: &[u64], lo: u64, hi: u64, context: &str) {
        let want: Vec<u64> = keys
            .iter()
            .copied()
            .filter(|&k| lo <= k && k <= hi)
            .collect();
        for t in [*t, t.guided().unwrap()] {
            let got: Vec<u64> = t.range(lo, hi).collect::<Result<_, _>>().unwrap();
            assert_eq!(got, want, "{context}{lo:#x}..={hi:#x}");
        }
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
            assert_range(&t, &keys, lo, hi, "");
        }
    }

    /// Keys far from uniform: both guesses land far from the block a
    /// search wants, and the gallop and bisection still find it.
    #[test]
    fn ranges_match_a_filter_when_keys_are_skewed() {
        let mut keys: Vec<u64> = (0..3000u64).map(|i| i * 7).collect();
        keys.extend((0..50u64).map(|i| (1 << 40) + (i << 30)));
        keys.extend(xorshift(2000, 11).into_iter().map(|k| k | (1 << 63)));
        keys.push(u64::MAX);
        keys.sort_unstable();
        keys.dedup();
        for block_len in [1, 4, 32, 128] {
            let bytes = encode(&keys, block_len);
            let t = TableReader::new(&bytes).unwrap();
            for (i, &k) in keys.iter().enumerate().step_by(13) {
                let next = keys.get(i + 1).copied().unwrap_or(u64::MAX);
                for (lo, hi) in [(k, k), (k.saturating_add(1), next), (k / 2, k)] {
                    t.warm_index(lo);
                    t.warm_near(lo);
                    t.warm_block(lo);
                    assert_range(&t, &keys, lo, hi, &format!("block_len {block_len}, "));
                }
            }
        }
    }

    /// A range starting at, just after and just before every key, in
    /// blocks of every kind: dense (r = 0), uniform, with long unary codes,
    /// and near the largest key, where a search skips the first gaps of its
    /// block by their unary codes alone.
    #[test]
    fn ranges_from_every_key() {
        let mut long_unary: Vec<u64> = (0..200).collect();
        long_unary.extend([1 << 20, (1 << 20) + 1, 1 << 40]);
        long_unary.extend((0..100).map(|i| (1 << 41) + i * 3));
        let shapes = [
            (0..300u64).collect::<Vec<_>>(),
            xorshift(700, 21),
            long_unary,
            (0..300u64).map(|i| u64::MAX - 600 + 2 * i).collect(),
        ];
        for keys in shapes {
            for block_len in [128, 32, 5] {
                let bytes = encode(&keys, block_len);
                let t = TableReader::new(&bytes).unwrap();
                for (i, &k) in keys.iter().enumerate() {
                    let next = keys.get(i + 1).copied().unwrap_or(u64::MAX);
                    let probes = [
                        (k, k),
                        (k, next),
                        (k.saturating_add(1), next),
                        (k.saturating_sub(1), k),
                        (k.saturating_add(1), u64::MAX),
                    ];
                    for (lo, hi) in probes {
                        assert_range(&t, &keys, lo, hi, &format!("block_len {block_len}, "));
                    }
                }
            }
        }
    }

    #[test]
    fn the_index_range_holds_the_block_index_and_footer() {
        for (keys, block_len) in [(xorshift(1000, 9), 128), (vec![7], 4), (vec![], 128)] {
            let bytes = encode(&keys, block_len);
            let t = TableReader::at(&bytes, 1000).unwrap();
            let range = t.index_range();
            let blocks = keys.len().div_ceil(block_len as usize);
            assert_eq!(range.end, 1000 + bytes.len() as u64);
            assert_eq!(
                range.end - range.start,
                (blocks * INDEX_ENTRY_LEN + FOOTER_LEN) as u64
            );
            // Its first entry: the first key, at block offset 0.
            if let Some(&first) = keys.first() {
                let at = (range.start - 1000) as usize;
                assert_eq!(u64_at(&bytes, at), Some(first));
                assert_eq!(u64_at(&bytes, at + 8), Some(0));
            }
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
                // The hints read damaged bytes without panicking.
                t.warm_index(w[0]);
                t.warm_near(w[0]);
                t.warm_block(w[0]);
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
                    for key in [0, 1 << 63, u64::MAX] {
                        t.warm_index(key);
                        t.warm_near(key);
                        t.warm_block(key);
                    }
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

    /// A set padding bit after a block's last gap, under a valid CRC, is
    /// an error even for a search that wants no key of the block (its
    /// skip leaves the last gap to the decoder, which checks the end).
    #[test]
    fn a_search_past_every_key_still_checks_the_blocks_end() {
        let mut checked = 0;
        for seed in 1..40 {
            let keys = xorshift(100, seed);
            let mut bytes = encode(&keys, 128);
            let footer = bytes.len() - FOOTER_LEN;
            let index = u64_at(&bytes, footer + 8).unwrap() as usize;
            // One block: its unary stream's last byte is just before its CRC.
            let last = index - CRC_LEN - 1;
            let byte = bytes[last];
            if byte == 0 || byte.leading_zeros() == 0 {
                continue;
            }
            bytes[last] |= 0x80;
            reseal(&mut bytes);
            let t = TableReader::new(&bytes).unwrap();
            // Far past the last key, the skip's bound lets it reach the end.
            assert!(
                t.range(u64::MAX, u64::MAX).any(|k| k.is_err()),
                "seed {seed}"
            );
            assert!(t.verify().is_err(), "seed {seed}");
            checked += 1;
        }
        assert!(checked > 10, "{checked} blocks had padding to set");
        // A zero byte more at the end of the unary stream: the same.
        let keys = xorshift(100, 3);
        let mut bytes = encode(&keys, 128);
        let footer = bytes.len() - FOOTER_LEN;
        let index = u64_at(&bytes, footer + 8).unwrap() as usize;
        bytes.insert(index - CRC_LEN, 0);
        let footer = footer + 1;
        bytes[footer + 8..footer + 16].copy_from_slice(&(index as u64 + 1).to_le_bytes());
        reseal(&mut bytes);
        let t = TableReader::new(&bytes).unwrap();
        assert!(t.range(u64::MAX, u64::MAX).any(|k| k.is_err()));
        assert!(t.verify().is_err());
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

    /// A table reopened from its layout reads as the table opened with
    /// its footer checked, from the file it lies in; a file too short for
    /// the layout is refused.
    #[test]
    fn a_reopened_table_reads_as_the_opened_one() {
        let keys = xorshift(1000, 5);
        let mut file = vec![0xaa; 100];
        file.extend(encode(&keys, 128));
        let opened = TableReader::at(&file[100..], 100).unwrap();
        let layout = opened.layout();
        let reopened = TableReader::reopen(&file, &layout).unwrap();
        assert_eq!(reopened.layout(), layout);
        assert_eq!(reopened.block_count(), opened.block_count());
        assert_eq!(reopened.index_range(), opened.index_range());
        let all: Vec<u64> = reopened.iter().map(Result::unwrap).collect();
        assert_eq!(all, keys);
        let (lo, hi) = (keys[300], keys[310]);
        assert_eq!(reopened.range(lo, hi).count(), 11);
        assert!(reopened.verify().is_ok());
        assert!(TableReader::reopen(&file[..file.len() - 1], &layout).is_none());
        // Its blocks are still checked: a damaged one is an error.
        let at = file.len() / 2;
        file[at] ^= 1;
        let damaged = TableReader::reopen(&file, &layout).unwrap();
        assert!(damaged.iter().any(|k| k.is_err()));
    }

    /// One `Range` moved on through sorted ranges ([`Range::seek`], as a
    /// query's probes into one table use it) yields what a fresh range
    /// yields for each: ranges within one block, adjacent ones (`lo` just
    /// past the previous `hi`), ones starting in the next block or far
    /// on, empty ones between keys, and ones at the table's edges (below
    /// its first key, in its first and last blocks, past its last key),
    /// for blocks of 1 to 128 keys.
    #[test]
    fn a_range_moved_on_by_seek_yields_what_fresh_ranges_yield() {
        let shapes = [
            (0..300u64).map(|i| i * 10 + 5).collect::<Vec<_>>(),
            xorshift(2000, 77),
            (0..200u64).map(|i| u64::MAX - 2000 + 10 * i).collect(),
            vec![42],
        ];
        let mut s = 0x1234_5678_9abc_def1u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for keys in shapes {
            let min = keys[0];
            let max = *keys.last().unwrap();
            for block_len in [1, 5, 32, 128] {
                let bytes = encode(&keys, block_len);
                let t = TableReader::new(&bytes).unwrap();
                for round in 0..300 {
                    // Sorted disjoint ranges: cut points between `min - 3`
                    // and `max + 3`, near keys or anywhere, some ranges
                    // a single value, some adjacent to the one before.
                    let count = 1 + (next() % 12) as usize;
                    let mut cuts: Vec<u64> = (0..2 * count)
                        .map(|_| match next() % 4 {
                            0 => {
                                let key = keys[(next() % keys.len() as u64) as usize];
                                key.wrapping_add(next() % 3).wrapping_sub(1)
                            }
                            1 => min.saturating_sub(next() % 3),
                            2 => max.saturating_add(next() % 3),
                            _ => min.saturating_sub(3) + next() % (max - min).saturating_add(7),
                        })
                        .collect();
                    cuts.sort_unstable();
                    cuts.dedup();
                    let mut ranges = Vec::new();
                    let mut i = 0;
                    while i + 1 < cuts.len() {
                        let lo = cuts[i];
                        // Adjacent to the previous range, or a gap.
                        let hi = if next() % 3 == 0 { lo } else { cuts[i + 1] };
                        ranges.push((lo, hi));
                        i += if next() % 2 == 0 && hi < cuts[i + 1] {
                            1
                        } else {
                            2
                        };
                        if cuts.get(i).is_some_and(|&c| c <= hi) {
                            i += 1;
                        }
                    }
                    if round % 5 == 0 {
                        ranges.push((u64::MAX, u64::MAX));
                        ranges.dedup();
                    }
                    let Some(&(lo, hi)) = ranges.first() else {
                        continue;
                    };
                    let mut shared = t.range(lo, hi);
                    for (j, &(lo, hi)) in ranges.iter().enumerate() {
                        if j > 0 {
                            assert!(lo > ranges[j - 1].1);
                            shared.seek(lo, hi);
                        }
                        let got: Vec<u64> = (&mut shared).map(Result::unwrap).collect();
                        let want: Vec<u64> = keys
                            .iter()
                            .copied()
                            .filter(|&k| lo <= k && k <= hi)
                            .collect();
                        assert_eq!(got, want, "block_len {block_len}, ranges {ranges:?}, #{j}");
                        assert_eq!(
                            t.range(lo, hi).map(Result::unwrap).collect::<Vec<_>>(),
                            want
                        );
                    }
                }
            }
        }
    }

    /// A damaged block met after a `seek` is reported as a fresh range
    /// reports it.
    #[test]
    fn a_seek_into_a_damaged_block_reports_it() {
        let keys = xorshift(1000, 5);
        let mut bytes = encode(&keys, 32);
        let at = bytes.len() / 2;
        bytes[at] ^= 1;
        let t = TableReader::new(&bytes).unwrap();
        let fresh: Vec<bool> = keys
            .chunks(50)
            .map(|c| t.range(c[0], c[c.len() - 1]).any(|k| k.is_err()))
            .collect();
        assert!(fresh.iter().any(|&bad| bad));
        let mut shared = t.range(keys[0], keys[49]);
        for (j, c) in keys.chunks(50).enumerate() {
            if j > 0 {
                shared.seek(c[0], c[c.len() - 1]);
            }
            let bad = shared.any(|k| k.is_err());
            assert_eq!(bad, fresh[j], "chunk {j}");
            if bad {
                break;
            }
        }
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
