//! Feature hashing (FNV-1a 64) and Charikar's weighted bitwise vote.

use std::fmt;
use std::hash::Hasher;
use std::str::FromStr;

use fnv::FnvHasher;

use super::FingerprintError;

/// The hash that turns each feature into the 64 bits it votes with.
///
/// Both start from [`fnv1a64`] of the feature's bytes, which is also the key
/// of an [`IdfTable`](super::IdfTable) whichever hash is chosen.
///
/// Plain FNV-1a mixes poorly on short inputs (a word, a 3-character
/// n-gram): its high bits depend on the last bytes only through carries, so
/// the hashes of short features, and the fingerprints built from them, are
/// correlated. Random texts of random short words then differ in about 23
/// bits instead of 32, and character 3-gram fingerprints of unrelated texts
/// share most of their top 16 bits. [`FeatureHash::Fnv1a64Fmix64`] follows
/// FNV-1a with MurmurHash3's 64-bit finaliser, a bijection that makes every
/// output bit depend on every input bit, and removes that bias;
/// `tests/fingerprint_stats.rs` measures both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FeatureHash {
    /// FNV-1a 64 ([`fnv1a64`]), written `fnv1a64`.
    Fnv1a64,
    /// FNV-1a 64 followed by MurmurHash3's `fmix64` finaliser ([`fmix64`]),
    /// written `fnv1a64-fmix64`. The default.
    #[default]
    Fnv1a64Fmix64,
}

impl FeatureHash {
    /// The 64 bits `feature` votes with.
    ///
    /// ```
    /// use simhashdb::fingerprint::{FeatureHash, fmix64, fnv1a64};
    /// assert_eq!(FeatureHash::Fnv1a64.hash(b"word"), fnv1a64(b"word"));
    /// assert_eq!(FeatureHash::Fnv1a64Fmix64.hash(b"word"), fmix64(fnv1a64(b"word")));
    /// ```
    #[inline]
    pub fn hash(self, feature: &[u8]) -> u64 {
        self.finish(fnv1a64(feature))
    }

    /// The vote hash of a feature whose [`fnv1a64`] is `fnv`.
    #[inline]
    pub(crate) fn finish(self, fnv: u64) -> u64 {
        match self {
            FeatureHash::Fnv1a64 => fnv,
            FeatureHash::Fnv1a64Fmix64 => fmix64(fnv),
        }
    }
}

impl fmt::Display for FeatureHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FeatureHash::Fnv1a64 => f.write_str("fnv1a64"),
            FeatureHash::Fnv1a64Fmix64 => f.write_str("fnv1a64-fmix64"),
        }
    }
}

impl FromStr for FeatureHash {
    type Err = FingerprintError;

    /// Parses `fnv1a64` or `fnv1a64-fmix64`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fnv1a64" => Ok(FeatureHash::Fnv1a64),
            "fnv1a64-fmix64" => Ok(FeatureHash::Fnv1a64Fmix64),
            _ => Err(FingerprintError::Parse {
                what: "feature hash",
                input: s.to_owned(),
                expected: "`fnv1a64` or `fnv1a64-fmix64`",
            }),
        }
    }
}

/// MurmurHash3's 64-bit finaliser (`fmix64`): a bijection on `u64` with
/// full avalanche.
///
/// ```
/// use simhashdb::fingerprint::fmix64;
/// assert_eq!(fmix64(0), 0);
/// assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
/// ```
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// FNV-1a 64 of `bytes`: the hash of every feature.
///
/// This is plain FNV-1a over the bytes (offset basis `0xcbf29ce484222325`,
/// prime `0x100000001b3`). It is *not* the same as hashing a `&str` through
/// [`std::hash::Hash`], which appends a `0xff` terminator.
///
/// ```
/// use simhashdb::fingerprint::fnv1a64;
/// assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
/// ```
#[inline]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hasher = FnvHasher::default();
    hasher.write(bytes);
    hasher.finish()
}

/// Charikar's simhash of already-hashed, weighted features.
///
/// For each bit `j`, every `(hash, weight)` pair adds `+weight` to a running
/// `f64` sum when bit `j` of `hash` is set and `-weight` when it is clear, in
/// iteration order. Bit `j` of the result is 1 iff the sum is strictly greater
/// than zero.
///
/// **Tie rule:** a sum of exactly zero gives bit 0, so no features at all (or
/// only zero weights) give the fingerprint `0`.
///
/// **Weights:** negative, NaN and infinite weights are ignored (treated as 0);
/// pairs are not merged, so a hash given twice votes twice. If the total
/// weight is so large that a sum overflows `f64`, the affected bits follow
/// IEEE arithmetic (`+inf` gives 1, NaN gives 0); nothing panics.
///
/// ```
/// use simhashdb::fingerprint::simhash;
/// assert_eq!(simhash([(0b1100, 1.0), (0b1010, 1.0), (0b1001, 1.0)]), 0b1000);
/// assert_eq!(simhash([(0b01, 10.0), (0b10, 1.0)]), 0b01);
/// assert_eq!(simhash(std::iter::empty()), 0);
/// ```
pub fn simhash<I>(features: I) -> u64
where
    I: IntoIterator<Item = (u64, f64)>,
{
    let mut vote = WeightedVote::new();
    for (hash, weight) in features {
        vote.add(hash, weight);
    }
    vote.finish()
}

/// The per-bit `f64` sums of a weighted vote.
#[derive(Clone, Debug)]
pub(crate) struct WeightedVote {
    sums: [f64; 64],
}

impl WeightedVote {
    pub(crate) fn new() -> Self {
        WeightedVote { sums: [0.0; 64] }
    }

    #[inline]
    pub(crate) fn add(&mut self, hash: u64, weight: f64) {
        // Also drops -0.0, whose sign would otherwise be flipped below.
        if !(weight.is_finite() && weight > 0.0) {
            return;
        }
        let bits = weight.to_bits();
        // Flipping the sign bit instead of branching lets the loop vectorise;
        // each lane still adds its ±weight in feature order, so the result is
        // the same as the textbook loop, bit for bit.
        for (j, sum) in self.sums.iter_mut().enumerate() {
            let clear = !(hash >> j) & 1;
            *sum += f64::from_bits(bits ^ (clear << 63));
        }
    }

    pub(crate) fn finish(&self) -> u64 {
        self.sums
            .iter()
            .enumerate()
            .fold(0u64, |fp, (j, &sum)| fp | (u64::from(sum > 0.0) << j))
    }
}

/// `SPREAD[b]` has byte `i` equal to bit `i` of `b`.
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if (b >> i) & 1 == 1 {
                table[b] |= 1 << (8 * i);
            }
            i += 1;
        }
        b += 1;
    }
    table
};

/// A vote in which every feature has weight 1: the common case (term
/// frequency or binary weighting without IDF), done with integer counts.
///
/// With unit weights the `f64` sums of [`WeightedVote`] are exact integers
/// (below 2^53), so counting set bits gives the same fingerprint. Counts are
/// kept eight to a `u64` (one byte per bit position, via [`SPREAD`]) and
/// flushed to wide counters before a byte can overflow.
#[derive(Clone, Debug)]
pub(crate) struct CountVote {
    packed: [u64; 8],
    pending: u32,
    ones: [u64; 64],
    total: u64,
}

impl CountVote {
    pub(crate) fn new() -> Self {
        CountVote {
            packed: [0; 8],
            pending: 0,
            ones: [0; 64],
            total: 0,
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, hash: u64) {
        for (k, packed) in self.packed.iter_mut().enumerate() {
            *packed += SPREAD[((hash >> (8 * k)) & 0xff) as usize];
        }
        self.pending += 1;
        if self.pending == 255 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        for (packed, ones) in self.packed.iter_mut().zip(self.ones.chunks_exact_mut(8)) {
            for (i, count) in ones.iter_mut().enumerate() {
                *count += (*packed >> (8 * i)) & 0xff;
            }
            *packed = 0;
        }
        self.total += u64::from(self.pending);
        self.pending = 0;
    }

    pub(crate) fn finish(mut self) -> u64 {
        self.flush();
        let total = self.total;
        self.ones.iter().enumerate().fold(0u64, |fp, (j, &ones)| {
            // ones > total - ones, i.e. set bits outvote clear ones; ties give 0.
            fp | (u64::from(ones > total - ones) << j)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_published_vectors() {
        // From the FNV reference test suite (Landon Curt Noll).
        let vectors: [(&[u8], u64); 14] = [
            (b"", 0xcbf29ce484222325),
            (b"a", 0xaf63dc4c8601ec8c),
            (b"b", 0xaf63df4c8601f1a5),
            (b"fo", 0x08985907b541d342),
            (b"foo", 0xdcb27518fed9d577),
            (b"foob", 0xdd120e790c2512af),
            (b"fooba", 0xcac165afa2fef40a),
            (b"foobar", 0x85944171f73967e8),
            (b"\0", 0xaf63bd4c8601b7df),
            (b"a\0", 0x089be207b544f1e4),
            (b"foobar\0", 0x34531ca7168b8f38),
            (b"chongo", 0xe150688c8217b8fd),
            (b"chongo ", 0xf35a83c10e4f1f87),
            (b"ch", 0x08a25607b54a22ae),
        ];
        for (input, expected) in vectors {
            assert_eq!(fnv1a64(input), expected, "FNV-1a 64 of {input:?}");
        }
    }

    #[test]
    fn fnv1a64_differs_from_std_hash_of_str() {
        use std::hash::Hash;
        let mut h = FnvHasher::default();
        "foobar".hash(&mut h);
        assert_ne!(h.finish(), fnv1a64(b"foobar"));
    }

    #[test]
    fn fmix64_reference_values() {
        assert_eq!(fmix64(0), 0);
        assert_eq!(fmix64(1), 0xb456_bcfc_34c2_cb2c);
        assert_eq!(fmix64(0xcbf2_9ce4_8422_2325), 0xefd0_1f60_ba99_2926);
    }

    #[test]
    fn feature_hash_names_round_trip() {
        for h in [FeatureHash::Fnv1a64, FeatureHash::Fnv1a64Fmix64] {
            assert_eq!(h.to_string().parse::<FeatureHash>(), Ok(h));
        }
        assert_eq!(FeatureHash::default().to_string(), "fnv1a64-fmix64");
        for bad in ["", "FNV1A64", "fnv1a64 ", "fmix64", "fnv1a64-fmix"] {
            assert!(bad.parse::<FeatureHash>().is_err(), "{bad:?}");
        }
        assert_eq!(FeatureHash::Fnv1a64.hash(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(FeatureHash::Fnv1a64Fmix64.hash(b""), 0xefd0_1f60_ba99_2926);
    }

    #[test]
    fn tie_gives_zero_bits() {
        assert_eq!(simhash(std::iter::empty()), 0);
        // Every bit is set by one feature and clear in the other: all ties.
        assert_eq!(simhash([(u64::MAX, 1.0), (0, 1.0)]), 0);
        assert_eq!(simhash([(0xf0, 2.0), (0x0f, 2.0)]), 0);
        // Zero weight votes for nothing.
        assert_eq!(simhash([(u64::MAX, 0.0)]), 0);
    }

    #[test]
    fn single_feature_is_its_own_fingerprint() {
        for h in [1u64, 0xdead_beef, u64::MAX, 0x8000_0000_0000_0000] {
            assert_eq!(simhash([(h, 1.0)]), h);
            assert_eq!(simhash([(h, 0.25)]), h);
        }
    }

    #[test]
    fn heavy_feature_dominates() {
        let a = 0x0123_4567_89ab_cdef;
        let others = [(!a, 1.0), (0x1111, 1.0), (0xffff_0000, 1.0), (!a, 1.0)];
        let fp = simhash(others.into_iter().chain([(a, 10.0)]));
        assert_eq!(fp, a);
        let fp = simhash(others.into_iter().chain([(a, 1.0)]));
        assert_ne!(fp, a);
    }

    #[test]
    fn bad_weights_are_ignored() {
        let good = [(0xabcdu64, 1.0), (0x1234, 2.0), (0xff00, 0.5)];
        let expected = simhash(good);
        for bad in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            -0.0,
            -1e300,
        ] {
            let with_bad = good.into_iter().chain([(u64::MAX, bad), (0, bad)]);
            assert_eq!(simhash(with_bad), expected, "weight {bad}");
        }
    }

    #[test]
    fn huge_weights_do_not_panic() {
        let fp = simhash([(u64::MAX, f64::MAX), (u64::MAX, f64::MAX), (0, f64::MAX)]);
        // Positive overflow to +inf, then +inf - MAX = +inf: all bits set.
        assert_eq!(fp, u64::MAX);
    }

    #[test]
    fn spread_table_is_correct() {
        for (b, spread) in SPREAD.iter().enumerate() {
            for i in 0..8 {
                assert_eq!((spread >> (8 * i)) & 0xff, ((b >> i) & 1) as u64);
            }
        }
    }

    /// The integer vote agrees with the `f64` vote for unit weights,
    /// including across the byte-counter flush at 255 features.
    #[test]
    fn count_vote_matches_weighted_vote() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for n in [0usize, 1, 2, 3, 254, 255, 256, 511, 1000, 2049] {
            let mut count = CountVote::new();
            let mut weighted = WeightedVote::new();
            for _ in 0..n {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Bias towards set bits so that some positions are decided
                // by a small margin and some are ties.
                let h = state | (state >> 3);
                count.add(h);
                weighted.add(h, 1.0);
            }
            assert_eq!(count.finish(), weighted.finish(), "n = {n}");
        }
    }

    #[test]
    fn count_vote_tie_and_majority() {
        let mut v = CountVote::new();
        v.add(0b11);
        v.add(0b01);
        assert_eq!(v.finish(), 0b01);
        let mut v = CountVote::new();
        for _ in 0..300 {
            v.add(1);
            v.add(2);
        }
        assert_eq!(v.finish(), 0);
    }
}
