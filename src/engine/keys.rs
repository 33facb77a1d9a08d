//! Hashing and sorting of 64-bit keys (ids, fingerprints, permuted keys),
//! two operations every write of the engine pays for.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for one `u64`: a 64×64→128-bit multiply by an odd constant with
/// the two halves folded together, so every input bit reaches the low bits
/// (bucket index) and the high bits (the table's tag) alike. Sequential ids
/// and random fingerprints both spread evenly. About a quarter of the cost
/// of byte-at-a-time FNV-1a on a `u64`. Not resistant to chosen keys, as FNV
/// is not either.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct U64Hasher(u64);

const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for U64Hasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Not used for u64 keys; kept correct for any other key type.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        let m = u128::from(n ^ self.0) * u128::from(MULTIPLIER);
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type U64Build = BuildHasherDefault<U64Hasher>;
pub(crate) type U64Map<V> = HashMap<u64, V, U64Build>;

/// A map from `u64` keys (ids) to `u32` values other than `u32::MAX` (the
/// memtable's slot positions): open addressing with linear probing, each
/// key beside its value in 16 bytes (four to a cache line), at most 3/4
/// full. Unlike the standard map, a key's home slot can be asked for in
/// advance ([`prefetch`](Self::prefetch)), so that a batch of inserts
/// overlaps its cache misses instead of paying them one after another; one
/// line holds both the key and its value (the standard map's control bytes
/// and entries are two). Those misses were most of `Memtable::push`, 8 % of
/// a 50 M ingest's CPU (docs/ARCHITECTURE.md, "A flush reuses the memory of
/// the flush before", its last part).
#[derive(Debug, Clone)]
pub(crate) struct PosMap {
    slots: Vec<PosSlot>,
    /// `64 - log2(slots.len())`: a key's home is the top bits of its hash.
    shift: u32,
    len: usize,
}

#[derive(Debug, Clone, Copy)]
struct PosSlot {
    key: u64,
    /// [`PosMap::EMPTY`] in a free slot.
    value: u32,
}

impl PosMap {
    /// The value no key may have: it marks a free slot.
    pub(crate) const EMPTY: u32 = u32::MAX;

    /// A map with room for `n` keys before it grows.
    pub(crate) fn with_capacity(n: usize) -> PosMap {
        let slots = (n.saturating_mul(4) / 3 + 1).next_power_of_two().max(16);
        PosMap {
            slots: vec![
                PosSlot {
                    key: 0,
                    value: Self::EMPTY,
                };
                slots
            ],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Removes every key, keeping the slots' memory.
    pub(crate) fn clear(&mut self) {
        self.slots.fill(PosSlot {
            key: 0,
            value: Self::EMPTY,
        });
        self.len = 0;
    }

    /// The slot where the search for `key` starts: the high bits of the
    /// [`U64Hasher`] hash (a 128-bit product folded), spread alike for
    /// sequential, aligned and random keys.
    #[inline]
    fn home(&self, key: u64) -> usize {
        let m = u128::from(key) * u128::from(MULTIPLIER);
        (((m as u64) ^ ((m >> 64) as u64)) >> self.shift) as usize
    }

    /// Asks the processor for the cache line where `key`'s search starts.
    #[inline]
    pub(crate) fn prefetch(&self, key: u64) {
        crate::format::prefetch_line(&self.slots, self.home(key));
    }

    /// The value of `key`, if it has one.
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = self.slots[i];
            if slot.value == Self::EMPTY {
                return None;
            }
            if slot.key == key {
                return Some(slot.value);
            }
            i = (i + 1) & mask;
        }
    }

    /// Sets `key`'s value to `value` (not [`EMPTY`](Self::EMPTY)); returns
    /// the value it replaces, if any.
    #[inline]
    pub(crate) fn insert(&mut self, key: u64, value: u32) -> Option<u32> {
        debug_assert_ne!(value, Self::EMPTY);
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let slot = &mut self.slots[i];
            if slot.value == Self::EMPTY {
                *slot = PosSlot { key, value };
                self.len += 1;
                return None;
            }
            if slot.key == key {
                return Some(std::mem::replace(&mut slot.value, value));
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the slots, placing every key again.
    #[cold]
    fn grow(&mut self) {
        let old = std::mem::replace(self, PosMap::with_capacity(self.slots.len() * 3 / 2 + 1));
        debug_assert!(self.slots.len() > old.slots.len());
        for slot in old.slots {
            if slot.value != Self::EMPTY {
                self.insert(slot.key, slot.value);
            }
        }
    }
}

/// Sorts `keys` ascending; see [`crate::radix`].
pub(crate) fn sort_keys(keys: &mut Vec<u64>) {
    crate::radix::sort_by_top_bits(keys, |&k| k, |&k| k);
}

/// [`sort_keys`] reusing `scratch` for the radix pass's output (see
/// [`crate::radix::sort_by_top_bits_with`]).
pub(crate) fn sort_keys_with(keys: &mut Vec<u64>, scratch: &mut Vec<u64>) {
    crate::radix::sort_by_top_bits_with(keys, scratch, |&k| k, |&k| k);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    /// Against the standard map: sequential, aligned and random keys, 0 and
    /// `u64::MAX`, values replaced, a map grown many times from the
    /// smallest size and one sized in advance.
    #[test]
    fn pos_map_agrees_with_the_standard_map() {
        let mut s = 0x1234_5678u64;
        let mut random = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let cases: Vec<Vec<u64>> = vec![
            vec![],
            vec![0, u64::MAX, 0, u64::MAX, 1],
            (0..50_000).collect(),
            (0..20_000u64).map(|i| i << 32).collect(),
            (0..20_000u64).map(|i| i.rotate_right(12)).collect(),
            (0..60_000).map(|_| random() % 30_000).collect(),
            (0..60_000).map(|_| random()).collect(),
        ];
        for (c, keys) in cases.iter().enumerate() {
            for capacity in [0, keys.len()] {
                let mut map = PosMap::with_capacity(capacity);
                let mut model: HashMap<u64, u32> = HashMap::new();
                for (i, &key) in keys.iter().enumerate() {
                    let value = (i as u32).wrapping_mul(7) % (PosMap::EMPTY - 1);
                    map.prefetch(key);
                    assert_eq!(
                        map.insert(key, value),
                        model.insert(key, value),
                        "case {c}, key {key}"
                    );
                    assert_eq!(map.len(), model.len());
                }
                assert_eq!(map.is_empty(), keys.is_empty());
                for &key in keys {
                    assert_eq!(map.get(key), model.get(&key).copied(), "case {c}");
                }
                for key in [2, 3, u64::MAX - 1, 1 << 63] {
                    assert_eq!(map.get(key), model.get(&key).copied(), "case {c}");
                }
                map.clear();
                assert!(map.is_empty());
                let mut again: HashMap<u64, u32> = HashMap::new();
                for (i, &key) in keys.iter().enumerate().take(1000) {
                    assert_eq!(map.get(key), again.get(&key).copied(), "case {c}, cleared");
                    assert_eq!(
                        map.insert(key, i as u32),
                        again.insert(key, i as u32),
                        "case {c}, cleared"
                    );
                }
                assert_eq!(map.len(), again.len());
            }
        }
    }

    #[test]
    fn the_hasher_spreads_sequential_and_aligned_keys() {
        let build = U64Build::default();
        let hash = |x: u64| build.hash_one(x);
        // Low 10 bits (a 1024-bucket table's index) and top 7 bits (the tag).
        for keys in [
            (0..4096u64).collect::<Vec<_>>(),
            (0..4096u64).map(|i| i << 32).collect(),
            (0..4096u64).map(|i| i << 52).collect(),
        ] {
            let mut low = vec![0u32; 1024];
            let mut top = vec![0u32; 128];
            for &k in &keys {
                let h = hash(k);
                low[(h & 1023) as usize] += 1;
                top[(h >> 57) as usize] += 1;
            }
            // Four keys per bucket on average; a poor hash piles them up.
            assert!(low.iter().all(|&c| c <= 16), "{:?}", low.iter().max());
            assert!(top.iter().all(|&c| c <= 64), "{:?}", top.iter().max());
        }
    }
}
