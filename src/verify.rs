//! Exact re-checks of candidate pairs: the Jaccard similarity of two texts'
//! shingle sets.
//!
//! Simhash at a small `k` misses near-duplicates among short texts, where one
//! edited word moves many bits, and at a larger `k` it lets unrelated texts
//! through. Generating candidates at the larger `k` and keeping only the pairs
//! whose shingle sets overlap enough fixes both:
//!
//! ```
//! use simhashdb::verify::ShingleSet;
//! use simhashdb::Simhasher;
//!
//! let hasher = Simhasher::default();
//! let a = ShingleSet::from_text(&hasher, "the quick brown fox jumps over the lazy dog", 2);
//! let b = ShingleSet::from_text(&hasher, "the quick brown fox jumped over the lazy dog", 2);
//! let c = ShingleSet::from_text(&hasher, "an entirely different sentence about bread", 2);
//! assert!(a.jaccard(&b) > 0.5);
//! assert_eq!(a.jaccard(&c), 0.0);
//! ```

use crate::fingerprint::{Simhasher, fmix64, fnv1a64};

/// The distinct shingles of a text (runs of `width` consecutive tokens), as
/// sorted 64-bit hashes. A text with fewer than `width` tokens has one
/// shingle, all of its tokens; an empty text has none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShingleSet {
    hashes: Vec<u64>,
}

impl ShingleSet {
    /// The shingles of `width` tokens of `text`, tokenized as `hasher` does.
    pub fn from_text(hasher: &Simhasher, text: &str, width: usize) -> ShingleSet {
        ShingleSet::from_tokens(&hasher.tokens(text), width)
    }

    /// The shingles of `width` consecutive `tokens` (`width` 0 counts as 1).
    pub fn from_tokens<T: AsRef<str>>(tokens: &[T], width: usize) -> ShingleSet {
        let width = width.max(1);
        let token_hashes: Vec<u64> = tokens
            .iter()
            .map(|t| fmix64(fnv1a64(t.as_ref().as_bytes())))
            .collect();
        let mut hashes: Vec<u64> = if token_hashes.is_empty() {
            Vec::new()
        } else if token_hashes.len() < width {
            vec![combine(&token_hashes)]
        } else {
            token_hashes.windows(width).map(combine).collect()
        };
        hashes.sort_unstable();
        hashes.dedup();
        ShingleSet { hashes }
    }

    /// Number of distinct shingles.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the text had no tokens.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The sorted shingle hashes.
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// |A ∩ B| / |A ∪ B|; two empty sets are identical (1.0).
    pub fn jaccard(&self, other: &ShingleSet) -> f64 {
        let (a, b) = (&self.hashes, &other.hashes);
        if a.is_empty() && b.is_empty() {
            return 1.0;
        }
        let (mut i, mut j, mut common) = (0, 0, 0usize);
        while i < a.len() && j < b.len() {
            match a[i].cmp(&b[j]) {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    common += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        common as f64 / (a.len() + b.len() - common) as f64
    }
}

/// Order-sensitive hash of a run of token hashes.
fn combine(run: &[u64]) -> u64 {
    run.iter().fold(0x9e37_79b9_7f4a_7c15u64, |acc, &h| {
        fmix64(acc.rotate_left(23) ^ h)
    })
}

/// The Jaccard similarity of the `width`-token shingles of two texts.
pub fn jaccard(hasher: &Simhasher, a: &str, b: &str, width: usize) -> f64 {
    ShingleSet::from_text(hasher, a, width).jaccard(&ShingleSet::from_text(hasher, b, width))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn words(s: &str) -> Vec<&str> {
        s.split_whitespace().collect()
    }

    /// Jaccard over the shingles as strings, the definition itself.
    fn reference(a: &[&str], b: &[&str], width: usize) -> f64 {
        let set = |t: &[&str]| -> BTreeSet<String> {
            if t.is_empty() {
                BTreeSet::new()
            } else if t.len() < width {
                BTreeSet::from([t.join(" ")])
            } else {
                t.windows(width).map(|w| w.join(" ")).collect()
            }
        };
        let (sa, sb) = (set(a), set(b));
        if sa.is_empty() && sb.is_empty() {
            return 1.0;
        }
        sa.intersection(&sb).count() as f64 / sa.union(&sb).count() as f64
    }

    #[test]
    fn matches_the_definition_on_string_shingles() {
        let texts = [
            "",
            "one",
            "a b c d e f g",
            "a b c d e f h",
            "a b a b a b",
            "g f e d c b a",
            "a b c",
        ];
        for x in texts {
            for y in texts {
                for width in 1..=4 {
                    let got = ShingleSet::from_tokens(&words(x), width)
                        .jaccard(&ShingleSet::from_tokens(&words(y), width));
                    let want = reference(&words(x), &words(y), width);
                    assert!(
                        (got - want).abs() < 1e-12,
                        "{x:?} vs {y:?} width {width}: {got} != {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn shingles_are_order_sensitive() {
        let a = ShingleSet::from_tokens(&["x", "y"], 2);
        let b = ShingleSet::from_tokens(&["y", "x"], 2);
        assert_eq!(a.jaccard(&b), 0.0);
        assert_eq!(a.len(), 1);
    }
}
