//! simhashdb: an exact near-duplicate index for 64-bit SimHash fingerprints.

pub mod batch;
pub mod fingerprint;
pub mod plan;
pub mod search;

pub use fingerprint::Simhasher;

/// Number of bit positions in which `a` and `b` differ.
#[inline]
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}
