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
