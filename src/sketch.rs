//! A text's verification value: a 16-byte sketch of its word 5-shingles
//! from which the Jaccard similarity of two texts is estimated without the
//! texts.
//!
//! Fingerprints within a few bits of each other are candidates, not
//! answers: texts that share a vocabulary (license files, pages of one
//! template) have fingerprints 0–3 bits apart although they share few
//! shingles. Kept next to each fingerprint, a [`Sketch`] tells those apart
//! from near-duplicates. Which value, threshold and candidate distance were
//! chosen, and why, is measured in docs/QUALITY.md ("Verified answers: the
//! verification value").
//!
//! ```
//! use simhashdb::Simhasher;
//! use simhashdb::sketch::Sketch;
//!
//! let h = Simhasher::default();
//! let a = "the crawler fetched this page about storage engines, their file formats, \
//!          their write-ahead logs and the way they recover after a crash of the process";
//! let b = "the crawler fetched this page about storage engines, their file formats, \
//!          their write-ahead logs and the way they recover after a crash of the machine";
//! let c = "a page of recipes for bread, cakes and other things baked in an oven at home, \
//!          with the times and temperatures that the bakers of the village use every day";
//! let (sa, sb, sc) = (Sketch::from_text(&h, a), Sketch::from_text(&h, b), Sketch::from_text(&h, c));
//! assert!(sa.similarity(&sb) >= Sketch::threshold_for(b));
//! assert!(sa.similarity(&sc) < Sketch::threshold_for(c));
//! assert_eq!(Sketch::from_bytes(sa.to_bytes()), sa);
//! ```

use crate::fingerprint::{Simhasher, fmix64};
use crate::recheck::{ShingleSet, shingle_hashes};

/// 128 one-bit minima of a text's word 5-shingles (b-bit MinHash with
/// b = 1, Li and König, WWW 2010), 16 bytes.
///
/// The shingles are the runs of [`SHINGLE`](Self::SHINGLE) consecutive
/// tokens of the [`Simhasher`] (for the default, Unicode words, lower-cased;
/// each Chinese character a word), hashed as
/// [`ShingleSet`] hashes them. One permutation hashing (Li, Owen and Zhang,
/// NIPS 2012) puts each shingle, by a hash of it, in one of 128 bins, and
/// each bin keeps its least hash; a bin no shingle fell in takes the least
/// hash of the first filled bin on its own probe sequence (optimal
/// densification, Shrivastava, ICML 2017). Bit `i` is one bit of a hash of
/// bin `i`'s value and `i`. Two texts whose shingle sets have Jaccard
/// similarity `J` agree on a bin's value with probability `J`, and on its
/// bit with probability `(1 + J) / 2`;
/// [`similarity`](Self::similarity) inverts that.
///
/// The bits depend on the shingle hashes only: the same text gives the same
/// sketch in every process and on every platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sketch([u8; Sketch::BYTES]);

/// A sketch serializes as its 16 bytes in 32 lower-case hexadecimal
/// digits, in [`to_bytes`](Sketch::to_bytes) order.
#[cfg(feature = "serde")]
impl serde::Serialize for Sketch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use std::fmt::Write as _;
        let mut hex = String::with_capacity(2 * Sketch::BYTES);
        for byte in self.0 {
            let _ = write!(hex, "{byte:02x}");
        }
        serializer.serialize_str(&hex)
    }
}

impl Sketch {
    /// Size in bytes.
    pub const BYTES: usize = 16;
    /// Number of bins (one bit each).
    pub const BINS: usize = Sketch::BYTES * 8;
    /// Tokens per shingle.
    pub const SHINGLE: usize = 5;
    /// The estimated similarity at which a candidate is a near-duplicate:
    /// measured in docs/QUALITY.md, it keeps pairs at Jaccard >= 0.9 and
    /// rejects those below 0.5.
    pub const THRESHOLD: f64 = 0.7;
    /// The threshold for texts written mostly in Han characters
    /// ([`threshold_for`](Self::threshold_for)): a repost with 1–5 % of its
    /// characters edited is near Jaccard 0.75 rather than 0.9.
    pub const THRESHOLD_HAN: f64 = 0.6;

    /// The sketch of `text`'s shingles, tokenized as `hasher` tokenizes
    /// (an empty text, without tokens, gives the all-zero sketch).
    pub fn from_text(hasher: &Simhasher, text: &str) -> Sketch {
        Sketch::with_fingerprint(hasher, text).1
    }

    /// `text`'s fingerprint (as [`Simhasher::fingerprint_checked`]) and
    /// sketch, tokenizing the text once where the hasher's features are its
    /// tokens (the default configuration).
    pub fn with_fingerprint(hasher: &Simhasher, text: &str) -> (Option<u64>, Sketch) {
        let (fp, tokens) = hasher.fingerprint_and_token_hashes(text);
        (
            fp,
            Sketch::of_hashes(&shingle_hashes(tokens, Sketch::SHINGLE)),
        )
    }

    /// The sketch of a set of shingle hashes (its width need not be
    /// [`SHINGLE`](Self::SHINGLE)); `from_text` is
    /// `from_shingles(&ShingleSet::from_text(hasher, text, 5))`.
    pub fn from_shingles(set: &ShingleSet) -> Sketch {
        Sketch::of_hashes(set.hashes())
    }

    /// The sketch stored as `bytes` ([`to_bytes`](Self::to_bytes)).
    pub fn from_bytes(bytes: [u8; Sketch::BYTES]) -> Sketch {
        Sketch(bytes)
    }

    /// The 16 bytes: bit `i % 8` of byte `i / 8` is bin `i`'s bit.
    pub fn to_bytes(self) -> [u8; Sketch::BYTES] {
        self.0
    }

    /// The estimated Jaccard similarity of the two texts' shingle sets, in
    /// [0, 1]: with `E` the share of equal bits, `max(0, 2E − 1)`
    /// (two bins of different values agree by chance half the time). Its
    /// standard deviation is about `sqrt((1 − J²) / 128)` for large sets
    /// (0.077 at J = 0.5, 0.056 at 0.8), more for texts of fewer shingles
    /// than bins.
    pub fn similarity(&self, other: &Sketch) -> f64 {
        let differ: u32 = self
            .0
            .iter()
            .zip(&other.0)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        let equal = Sketch::BINS as f64 - f64::from(differ);
        (2.0 * equal / Sketch::BINS as f64 - 1.0).max(0.0)
    }

    /// The threshold for a query `text`: [`THRESHOLD_HAN`](Self::THRESHOLD_HAN)
    /// when Han characters make up at least half of its letters and digits,
    /// [`THRESHOLD`](Self::THRESHOLD) otherwise.
    pub fn threshold_for(text: &str) -> f64 {
        let (mut han, mut alnum) = (0usize, 0usize);
        for c in text.chars().filter(|c| c.is_alphanumeric()) {
            alnum += 1;
            han += usize::from(is_han(c));
        }
        if han > 0 && 2 * han >= alnum {
            Sketch::THRESHOLD_HAN
        } else {
            Sketch::THRESHOLD
        }
    }

    fn of_hashes(hashes: &[u64]) -> Sketch {
        let mut out = [0u8; Sketch::BYTES];
        if hashes.is_empty() {
            return Sketch(out);
        }
        let mut mins = [u64::MAX; Sketch::BINS];
        let mut filled = [false; Sketch::BINS];
        for &x in hashes {
            let y = fmix64(x ^ SHINGLE_SEED);
            let bin = bin_of(y);
            mins[bin] = mins[bin].min(y);
            filled[bin] = true;
        }
        for i in 0..Sketch::BINS {
            let value = if filled[i] {
                mins[i]
            } else {
                // The probes are uniform over the bins and one is filled,
                // so this ends (after 128 probes on average at worst).
                let mut attempt = 1u64;
                loop {
                    let j = bin_of(fmix64(((i as u64) << 32) | attempt));
                    if filled[j] {
                        break mins[j];
                    }
                    attempt += 1;
                }
            };
            let bit = fmix64(value ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) & 1;
            out[i / 8] |= (bit as u8) << (i % 8);
        }
        Sketch(out)
    }
}

/// A text prepared for a verified check or query
/// ([`Index::query_verified`](crate::Index::query_verified)): its
/// fingerprint, its sketch, its number of tokens and the threshold for it,
/// computed in one tokenization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TextValues {
    /// The text's fingerprint (`None` for a text without tokens).
    pub fingerprint: Option<u64>,
    /// The text's sketch.
    pub sketch: Sketch,
    /// The number of its tokens.
    pub tokens: usize,
    /// [`Sketch::threshold_for`] the text.
    pub threshold: f64,
}

impl TextValues {
    /// Candidates are searched at [`K_SHORT`](Self::K_SHORT) for texts of
    /// fewer than 50 tokens (docs/QUALITY.md, "The decision").
    pub const K_SHORT: u32 = 8;
    /// ... at `K_MEDIUM` for texts of 50–499 tokens.
    pub const K_MEDIUM: u32 = 6;
    /// ... at `K_LONG` from 500 tokens on.
    pub const K_LONG: u32 = 4;

    /// The values of `text`, tokenized as `hasher` tokenizes.
    pub fn of(hasher: &Simhasher, text: &str) -> TextValues {
        let (fingerprint, tokens) = hasher.fingerprint_and_token_hashes(text);
        let count = tokens.len();
        TextValues {
            fingerprint,
            sketch: Sketch::of_hashes(&shingle_hashes(tokens, Sketch::SHINGLE)),
            tokens: count,
            threshold: Sketch::threshold_for(text),
        }
    }

    /// The distance at which candidates are searched for this text: the
    /// smallest that reached recall 0.98 for its length in docs/QUALITY.md.
    pub fn candidate_k(&self) -> u32 {
        match self.tokens {
            0..50 => TextValues::K_SHORT,
            50..500 => TextValues::K_MEDIUM,
            _ => TextValues::K_LONG,
        }
    }
}

/// Mixed into each shingle hash before it chooses its bin.
const SHINGLE_SEED: u64 = 0x5851_f42d_4c95_7f2d;

/// The bin a hash falls in, by its high bits.
fn bin_of(y: u64) -> usize {
    ((u128::from(y) * Sketch::BINS as u128) >> 64) as usize
}

/// CJK Unified Ideographs (main block, extensions and compatibility
/// ideographs).
fn is_han(c: char) -> bool {
    matches!(c,
        '\u{4E00}'..='\u{9FFF}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{2A6DF}'
        | '\u{2A700}'..='\u{2EBEF}'
        | '\u{2F800}'..='\u{2FA1F}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The sketch by its definition, written for clarity: each bin's
    /// shingles listed, its least hash taken, an empty bin's probe sequence
    /// followed; then one bit per bin.
    fn reference(hashes: &[u64]) -> [u8; 16] {
        let mut bins: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for &x in hashes {
            let y = fmix64(x ^ SHINGLE_SEED);
            let bin = (u128::from(y) * 128 / (1u128 << 64)) as usize;
            bins.entry(bin).or_default().push(y);
        }
        let least = |b: usize| bins.get(&b).map(|v| *v.iter().min().expect("listed"));
        let mut bits = [0u8; 16];
        if hashes.is_empty() {
            return bits;
        }
        for i in 0..128 {
            let v = least(i).unwrap_or_else(|| {
                (1u64..)
                    .find_map(|attempt| {
                        let y = fmix64(((i as u64) << 32) | attempt);
                        least((u128::from(y) * 128 / (1u128 << 64)) as usize)
                    })
                    .expect("some bin is filled")
            });
            let bit = fmix64(v ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) % 2;
            bits[i / 8] |= (bit as u8) << (i % 8);
        }
        bits
    }

    fn words(n: usize, from: usize) -> String {
        (from..from + n)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn sketch_matches_its_definition() {
        let h = Simhasher::default();
        for text in [
            "",
            "one",
            "one two three",
            "a rose is a rose is a rose is a rose",
            &words(40, 0),
            &words(700, 3),
            "迈向充满希望的新世纪——一九九八年新年讲话",
        ] {
            let set = ShingleSet::from_text(&h, text, Sketch::SHINGLE);
            let want = reference(set.hashes());
            assert_eq!(Sketch::from_shingles(&set).to_bytes(), want, "{text:?}");
            assert_eq!(Sketch::from_text(&h, text).to_bytes(), want, "{text:?}");
            let (fp, sketch) = Sketch::with_fingerprint(&h, text);
            assert_eq!(fp, h.fingerprint_checked(text));
            assert_eq!(sketch.to_bytes(), want);
        }
    }

    #[test]
    fn identical_texts_are_similar_one_and_bytes_round_trip() {
        let h = Simhasher::default();
        let s = Sketch::from_text(&h, &words(100, 0));
        assert_eq!(s.similarity(&s), 1.0);
        assert_eq!(Sketch::from_bytes(s.to_bytes()), s);
        assert_ne!(s, Sketch::from_text(&h, &words(100, 1)));
    }

    /// Over many pairs of sets with one known Jaccard similarity, the mean
    /// estimate is that similarity and the spread is what the binomial
    /// model gives.
    #[test]
    fn similarity_estimates_the_jaccard_of_the_shingle_sets() {
        for (n, overlap) in [(400u64, 360u64), (400, 267), (400, 160), (60, 54), (30, 20)] {
            // A = [0, n), B = [n - overlap, 2n - overlap): Jaccard
            // overlap / (2n - overlap).
            let jaccard = overlap as f64 / (2 * n - overlap) as f64;
            let trials = 300u64;
            let (mut sum, mut sq) = (0.0, 0.0);
            for t in 0..trials {
                let key = |i: u64| fmix64(i ^ (t << 40));
                let a: Vec<u64> = (0..n).map(key).collect();
                let b: Vec<u64> = (n - overlap..2 * n - overlap).map(key).collect();
                let est = Sketch::of_hashes(&a).similarity(&Sketch::of_hashes(&b));
                sum += est;
                sq += est * est;
            }
            let mean = sum / trials as f64;
            let sd = (sq / trials as f64 - mean * mean).sqrt();
            assert!(
                (mean - jaccard).abs() < 0.03,
                "n {n} overlap {overlap}: mean {mean:.3} vs {jaccard:.3}"
            );
            // sqrt((1 - J^2) / 128) for sets of more shingles than bins;
            // smaller sets spread more.
            let model = ((1.0 - jaccard * jaccard) / 128.0).sqrt();
            assert!(
                sd < 2.5 * model + 0.02,
                "n {n}: sd {sd:.3}, model {model:.3}"
            );
        }
    }

    #[test]
    fn unrelated_texts_are_far_below_the_threshold() {
        let h = Simhasher::default();
        let mut worst: f64 = 0.0;
        for t in 0..50 {
            let a = Sketch::from_text(&h, &words(200, t * 1000));
            let b = Sketch::from_text(&h, &words(200, t * 1000 + 500));
            worst = worst.max(a.similarity(&b));
        }
        assert!(worst < 0.4, "{worst}");
    }

    #[test]
    fn threshold_follows_the_script_of_the_query() {
        assert_eq!(Sketch::threshold_for("plain English text"), 0.7);
        assert_eq!(Sketch::threshold_for(""), 0.7);
        assert_eq!(Sketch::threshold_for("新华社北京电 Xinhua"), 0.6);
        assert_eq!(Sketch::threshold_for("A long English sentence 中"), 0.7);
    }
}
