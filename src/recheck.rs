//! Exact re-checks of candidate pairs: the Jaccard similarity of two texts'
//! shingle sets. (Not to be confused with [`Index::verify`](crate::Index::verify),
//! which checks an index's files against their checksums.)
//!
//! Simhash at a small `k` misses near-duplicates among short texts, where one
//! edited word moves many bits, and at a larger `k` it lets unrelated texts
//! through. Generating candidates at the larger `k` and keeping only the pairs
//! whose shingle sets overlap enough fixes both:
//!
//! ```
//! use simhashdb::recheck::ShingleSet;
//! use simhashdb::Simhasher;
//!
//! let hasher = Simhasher::default();
//! let a = ShingleSet::from_text(&hasher, "the quick brown fox jumps over the lazy dog", 2);
//! let b = ShingleSet::from_text(&hasher, "the quick brown fox jumped over the lazy dog", 2);
//! let c = ShingleSet::from_text(&hasher, "an entirely different sentence about bread", 2);
//! assert!(a.jaccard(&b) > 0.5);
//! assert_eq!(a.jaccard(&c), 0.0);
//! ```

use std::fmt;
use std::str::FromStr;

use crate::fingerprint::{FeatureHash, Simhasher, fmix64};

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
        let mut token_hashes = Vec::with_capacity(tokens_in(text));
        hasher.for_each_token_fnv(text, &mut |fnv| {
            token_hashes.push(FeatureHash::Fnv1a64Fmix64.finish(fnv))
        });
        ShingleSet::from_token_hashes(token_hashes, width)
    }

    /// The shingles of `text` as [`from_text`](Self::from_text) gives
    /// them, and its fingerprint as
    /// [`Simhasher::fingerprint_checked`] gives it (`None` for a text with
    /// no feature), tokenizing the text once where the hasher's features
    /// are its tokens (the default configuration).
    ///
    /// ```
    /// use simhashdb::recheck::ShingleSet;
    /// use simhashdb::Simhasher;
    /// let h = Simhasher::default();
    /// let text = "the quick brown fox jumps over the lazy dog";
    /// let (fp, set) = ShingleSet::with_fingerprint(&h, text, 5);
    /// assert_eq!(fp, h.fingerprint_checked(text));
    /// assert_eq!(set, ShingleSet::from_text(&h, text, 5));
    /// ```
    pub fn with_fingerprint(
        hasher: &Simhasher,
        text: &str,
        width: usize,
    ) -> (Option<u64>, ShingleSet) {
        let (fp, token_hashes) = hasher.fingerprint_and_token_hashes(text);
        (fp, ShingleSet::from_token_hashes(token_hashes, width))
    }

    /// The shingles of `width` consecutive `tokens` (`width` 0 counts as 1).
    pub fn from_tokens<T: AsRef<str>>(tokens: &[T], width: usize) -> ShingleSet {
        let token_hashes = tokens.iter().map(|t| token_hash(t.as_ref())).collect();
        ShingleSet::from_token_hashes(token_hashes, width)
    }

    fn from_token_hashes(token_hashes: Vec<u64>, width: usize) -> ShingleSet {
        let mut hashes = shingle_hashes(token_hashes, width);
        hashes.sort_unstable();
        hashes.dedup();
        // The vector was sized for the tokens; a set may be held a while
        // (the dataset check budgets its memory by `len`).
        hashes.shrink_to_fit();
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

/// A token's hash: `fnv1a64-fmix64`, the default feature hash, which
/// [`Simhasher`] uses for the tokens of [`ShingleSet::with_fingerprint`] too.
fn token_hash(token: &str) -> u64 {
    FeatureHash::Fnv1a64Fmix64.hash(token.as_bytes())
}

/// The hashes of the `width`-token shingles of a text whose token hashes
/// are `token_hashes`, in text order, repeats included (one shingle of all
/// the tokens when there are fewer than `width`).
pub(crate) fn shingle_hashes(mut hashes: Vec<u64>, width: usize) -> Vec<u64> {
    let width = width.max(1);
    if hashes.len() < width {
        if !hashes.is_empty() {
            hashes = vec![combine(&hashes)];
        }
    } else {
        // In place: shingle `i` is made of tokens `i..i + width`, so token
        // `i` is no longer needed once it is written.
        let shingles = hashes.len() - width + 1;
        for i in 0..shingles {
            hashes[i] = combine(&hashes[i..i + width]);
        }
        hashes.truncate(shingles);
    }
    hashes
}

/// The number of distinct values in `hashes` (well-mixed 64-bit hashes),
/// by an open-addressing table rather than a sort.
fn count_distinct(hashes: &[u64]) -> usize {
    if hashes.is_empty() {
        return 0;
    }
    let bits = (hashes.len() * 2)
        .next_power_of_two()
        .trailing_zeros()
        .max(4);
    let mask = (1usize << bits) - 1;
    // 0 marks an empty slot; the hash 0 itself is counted on the side.
    let mut table = vec![0u64; 1 << bits];
    let mut zero = false;
    let mut distinct = 0;
    for &h in hashes {
        if h == 0 {
            zero = true;
            continue;
        }
        let mut i = (h >> (64 - bits)) as usize;
        loop {
            match table[i] {
                0 => {
                    table[i] = h;
                    distinct += 1;
                    break;
                }
                x if x == h => break,
                _ => i = (i + 1) & mask,
            }
        }
    }
    distinct + usize::from(zero)
}

/// About as many tokens as a text of this length has (a word and its
/// space take about six bytes), for the vectors that collect them.
pub(crate) fn tokens_in(text: &str) -> usize {
    text.len() / 6 + 8
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

/// A verification rule: keep a candidate pair when the Jaccard similarity
/// of the two texts' `width`-token shingles is at least `threshold`.
///
/// Written `jaccard:T` (width [`JaccardRule::DEFAULT_WIDTH`]) or
/// `jaccard:T:W`, with `0 <= T <= 1` and `W >= 1`:
///
/// ```
/// use simhashdb::recheck::JaccardRule;
/// let rule: JaccardRule = "jaccard:0.5".parse().unwrap();
/// assert_eq!(rule, JaccardRule { threshold: 0.5, width: 2 });
/// assert_eq!("jaccard:0.7:3".parse::<JaccardRule>().unwrap().width, 3);
/// assert_eq!(JaccardRule::default().to_string(), "jaccard:0.4:2");
/// assert!("jaccard:1.5".parse::<JaccardRule>().is_err());
/// ```
///
/// The default, word bigrams at 0.4, is the short-text setting measured in
/// `docs/QUALITY.md`: on its 50- and 140-character sets (up to 10 % of the
/// words edited), candidates at k = 5 to 13 checked with it reached
/// precision 1.000 at recall 0.90 or more. For long documents a stricter
/// `jaccard:0.6` removes more pairs that merely share a vocabulary.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JaccardRule {
    /// The smallest Jaccard similarity kept.
    pub threshold: f64,
    /// The shingle width in tokens.
    pub width: usize,
}

impl JaccardRule {
    /// The shingle width of `jaccard:T`.
    pub const DEFAULT_WIDTH: usize = 2;
    /// The threshold of [`JaccardRule::default`].
    pub const DEFAULT_THRESHOLD: f64 = 0.4;

    /// The Jaccard similarity of `a` and `b` under this rule's width, if it
    /// reaches the threshold.
    pub fn check(&self, hasher: &Simhasher, a: &str, b: &str) -> Option<f64> {
        let j = jaccard(hasher, a, b, self.width);
        (j >= self.threshold).then_some(j)
    }
}

impl Default for JaccardRule {
    fn default() -> Self {
        JaccardRule {
            threshold: JaccardRule::DEFAULT_THRESHOLD,
            width: JaccardRule::DEFAULT_WIDTH,
        }
    }
}

impl fmt::Display for JaccardRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "jaccard:{}:{}", self.threshold, self.width)
    }
}

/// Why a verification rule did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRuleError {
    input: String,
}

impl fmt::Display for ParseRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid verification rule {:?}: expected `jaccard:T` or `jaccard:T:W` \
             with 0 <= T <= 1 and a shingle width W >= 1",
            self.input
        )
    }
}

impl std::error::Error for ParseRuleError {}

impl FromStr for JaccardRule {
    type Err = ParseRuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseRuleError {
            input: s.to_owned(),
        };
        let rest = s.strip_prefix("jaccard:").ok_or_else(bad)?;
        let (t, w) = match rest.split_once(':') {
            Some((t, w)) => (t, Some(w)),
            None => (rest, None),
        };
        let plain_number =
            |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if !plain_number(t) {
            return Err(bad());
        }
        let threshold: f64 = t.parse().map_err(|_| bad())?;
        if !(0.0..=1.0).contains(&threshold) {
            return Err(bad());
        }
        let width = match w {
            None => JaccardRule::DEFAULT_WIDTH,
            Some(w) if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) => {
                match w.parse::<usize>() {
                    Ok(n) if n >= 1 => n,
                    _ => return Err(bad()),
                }
            }
            Some(_) => return Err(bad()),
        };
        Ok(JaccardRule { threshold, width })
    }
}

/// Keeps the candidate pairs `(i, j)` (indices into `texts`, e.g. from
/// [`find_all`](crate::batch::find_all)) whose texts pass `rule`, with their
/// Jaccard similarity, in the order given. Each text's shingles are computed
/// once, and only for texts that occur in a pair.
///
/// ```
/// use simhashdb::Simhasher;
/// use simhashdb::recheck::{JaccardRule, verify_pairs};
///
/// let texts = [
///     "the quick brown fox jumps over the lazy dog",
///     "the quick brown fox jumped over the lazy dog",
///     "pack my box with five dozen liquor jugs",
/// ];
/// let kept = verify_pairs(&Simhasher::default(), &texts, &[(0, 1), (0, 2)], JaccardRule::default());
/// assert_eq!(kept.len(), 1);
/// assert_eq!((kept[0].0, kept[0].1), (0, 1));
/// ```
///
/// # Panics
///
/// If a pair names an index out of range of `texts`.
pub fn verify_pairs<S: AsRef<str>>(
    hasher: &Simhasher,
    texts: &[S],
    pairs: &[(usize, usize)],
    rule: JaccardRule,
) -> Vec<(usize, usize, f64)> {
    let mut sets: Vec<Option<ShingleSet>> = vec![None; texts.len()];
    let mut out = Vec::new();
    for &(i, j) in pairs {
        for x in [i, j] {
            if sets[x].is_none() {
                sets[x] = Some(ShingleSet::from_text(hasher, texts[x].as_ref(), rule.width));
            }
        }
        let (Some(a), Some(b)) = (&sets[i], &sets[j]) else {
            unreachable!("both sets were just computed");
        };
        let jac = a.jaccard(b);
        if jac >= rule.threshold {
            out.push((i, j, jac));
        }
    }
    out
}

/// Keys that make a pair of shingle sets a candidate with a probability set
/// by their Jaccard similarity, so that candidates for an exact check can be
/// found by equal keys instead of a search: banded MinHash (Broder, "On the
/// resemblance and containment of documents", 1997; Leskovec, Rajaraman and
/// Ullman, *Mining of Massive Datasets*, ch. 3.4).
///
/// A set gets `bands × rows` minima of its hashed shingles, and one key per
/// band of `rows` minima. Two sets with Jaccard `j` have equal minima in one
/// place with probability `j`, so they share the key of some band with
/// probability
/// `1 − (1 − j^rows)^bands` ([`probability`](Self::probability)), plus a
/// chance collision of the 32-bit keys (2^-32 per band). The keys depend on
/// the shingle hashes only: the same text and width give the same keys in
/// every process and version of this crate that computes the same shingles.
///
/// ```
/// use simhashdb::recheck::{MinHashBands, ShingleSet};
/// use simhashdb::Simhasher;
///
/// let bands = MinHashBands::for_threshold(0.8);
/// assert_eq!((bands.bands, bands.rows), (20, 5));
/// assert!(bands.probability(0.8) > 0.999);
/// let h = Simhasher::default();
/// let a = ShingleSet::from_text(&h, "one two three four five six seven eight nine ten", 2);
/// assert_eq!(bands.keys(&a), bands.keys(&a.clone()));
/// assert_eq!(bands.keys(&a).len(), 20);
/// assert!(bands.keys(&ShingleSet::default()).is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinHashBands {
    /// Number of keys per set.
    pub bands: usize,
    /// Minima combined into one key.
    pub rows: usize,
}

impl MinHashBands {
    /// The probability a key of a candidate search must reach at the
    /// threshold for [`for_threshold`](Self::for_threshold).
    pub const RECALL_AT_THRESHOLD: f64 = 0.999;
    /// Bands used for thresholds of 0.3 and more.
    pub const BANDS: usize = 20;
    /// At most this many bands (for thresholds near 0).
    pub const MAX_BANDS: usize = 256;

    /// The bands that make a pair at Jaccard `threshold` a candidate with
    /// probability at least [`RECALL_AT_THRESHOLD`](Self::RECALL_AT_THRESHOLD)
    /// (more above it, less below): [`BANDS`](Self::BANDS) bands of as many
    /// rows as still reach it, so that pairs below the threshold are as
    /// rarely candidates as that allows. Thresholds below 0.3 get bands of
    /// one row, as many as reach it (at most [`MAX_BANDS`](Self::MAX_BANDS)).
    pub fn for_threshold(threshold: f64) -> MinHashBands {
        let threshold = threshold.clamp(0.0, 1.0);
        let mut best = None;
        for rows in 1..=16 {
            let b = MinHashBands {
                bands: Self::BANDS,
                rows,
            };
            if b.probability(threshold) >= Self::RECALL_AT_THRESHOLD {
                best = Some(b);
            }
        }
        best.unwrap_or_else(|| {
            // One row per band: 1 − (1 − t)^bands ≥ R.
            let miss = (1.0 - threshold).max(f64::MIN_POSITIVE);
            let need = ((1.0 - Self::RECALL_AT_THRESHOLD).ln() / miss.ln()).ceil();
            let bands = if need.is_finite() && need >= 1.0 {
                (need as usize).min(Self::MAX_BANDS)
            } else {
                Self::MAX_BANDS
            };
            MinHashBands { bands, rows: 1 }
        })
    }

    /// The probability that two sets of Jaccard similarity `jaccard` share
    /// at least one key (chance collisions of the keys aside).
    pub fn probability(&self, jaccard: f64) -> f64 {
        let j = jaccard.clamp(0.0, 1.0);
        1.0 - (1.0 - j.powi(self.rows as i32)).powi(self.bands as i32)
    }

    /// The `bands` keys of `set`, or none for an empty set.
    pub fn keys(&self, set: &ShingleSet) -> Vec<u32> {
        self.keys_of_hashes(set.hashes())
    }

    /// What a first pass over a dataset needs of a text, without sorting
    /// its shingles: its fingerprint and [`keys`](Self::keys) and its
    /// number of distinct `width`-token shingles, as
    /// [`ShingleSet::with_fingerprint`] and [`keys`](Self::keys) give them.
    ///
    /// ```
    /// use simhashdb::recheck::{MinHashBands, ShingleSet};
    /// use simhashdb::Simhasher;
    ///
    /// let bands = MinHashBands::for_threshold(0.8);
    /// let h = Simhasher::default();
    /// let text = "a rose is a rose is a rose is a rose";
    /// let (fingerprint, set) = ShingleSet::with_fingerprint(&h, text, 2);
    /// let sketch = bands.sketch(&h, text, 2);
    /// assert_eq!(sketch.fingerprint, fingerprint);
    /// assert_eq!(sketch.keys, bands.keys(&set));
    /// assert_eq!((sketch.shingles, set.len()), (3, 3));
    /// ```
    pub fn sketch(&self, hasher: &Simhasher, text: &str, width: usize) -> BandSketch {
        let (fingerprint, token_hashes) = hasher.fingerprint_and_token_hashes(text);
        let shingles = shingle_hashes(token_hashes, width);
        BandSketch {
            fingerprint,
            keys: self.keys_of_hashes(&shingles),
            shingles: count_distinct(&shingles),
        }
    }

    /// The keys of the set of `hashes` (in any order, repeats allowed).
    fn keys_of_hashes(&self, hashes: &[u64]) -> Vec<u32> {
        let slots = self.bands * self.rows;
        if hashes.is_empty() || slots == 0 {
            return Vec::new();
        }
        // One permutation hashing (Li, Owen and Zhang, NIPS 2012): each
        // shingle is hashed once, the hash's high bits choose its bin and
        // each bin keeps its least hash; a bin no shingle fell in takes the
        // value of the first filled bin on its own seeded probe sequence
        // ("optimal densification", Shrivastava, ICML 2017). Two sets then
        // agree on a bin with probability equal to their Jaccard, as with
        // `bands × rows` independent hash functions, at the cost of one.
        let mut bins = vec![u64::MAX; slots];
        let mut filled = vec![false; slots];
        for &x in hashes {
            let y = fmix64(x ^ 0x243f_6a88_85a3_08d3);
            let bin = bin_of(y, slots);
            bins[bin] = bins[bin].min(y);
            filled[bin] = true;
        }
        let value = |i: usize| -> u64 {
            if filled[i] {
                return bins[i];
            }
            for attempt in 1..=64 * slots as u64 {
                let j = bin_of(splitmix64((i as u64) << 32 | attempt), slots);
                if filled[j] {
                    return bins[j];
                }
            }
            // Not reached in practice (the probes cover every bin); the
            // next filled bin keeps the result a function of the set.
            (1..slots)
                .map(|d| (i + d) % slots)
                .find(|&j| filled[j])
                .map_or(0, |j| bins[j])
        };
        (0..self.bands)
            .map(|band| {
                let key = (band * self.rows..(band + 1) * self.rows)
                    .fold(0x6c62_272e_07bb_0142_u64, |acc, i| {
                        fmix64(acc ^ value(i)).rotate_left(17)
                    });
                (key ^ (key >> 32)) as u32
            })
            .collect()
    }
}

/// A text's fingerprint, MinHash band keys and shingle count
/// ([`MinHashBands::sketch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BandSketch {
    /// The fingerprint, `None` for a text without features.
    pub fingerprint: Option<u64>,
    /// The band keys; none for a text without shingles.
    pub keys: Vec<u32>,
    /// The number of distinct shingles.
    pub shingles: usize,
}

/// The bin of `slots` that hash `y` falls in, by its high bits.
fn bin_of(y: u64, slots: usize) -> usize {
    ((u128::from(y) * slots as u128) >> 64) as usize
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

    #[test]
    fn rules_parse_and_print() {
        let r: JaccardRule = "jaccard:0.25".parse().expect("valid");
        assert_eq!(
            r,
            JaccardRule {
                threshold: 0.25,
                width: 2
            }
        );
        let r: JaccardRule = "jaccard:1:5".parse().expect("valid");
        assert_eq!(
            r,
            JaccardRule {
                threshold: 1.0,
                width: 5
            }
        );
        assert_eq!(r.to_string().parse::<JaccardRule>(), Ok(r));
        assert_eq!(
            JaccardRule::default().to_string().parse::<JaccardRule>(),
            Ok(JaccardRule::default())
        );
        for bad in [
            "",
            "jaccard",
            "jaccard:",
            "jaccard:x",
            "jaccard:-0.1",
            "jaccard:1.01",
            "jaccard:0.5:0",
            "jaccard:0.5:",
            "jaccard:0.5:-2",
            "jaccard:0.5:2:1",
            "cosine:0.5",
            "jaccard:nan",
            "jaccard:inf",
            "jaccard:+0.5",
            "jaccard:1e-1",
        ] {
            let err = bad.parse::<JaccardRule>().expect_err(bad);
            assert!(err.to_string().contains("jaccard:T"), "{err}");
        }
    }

    #[test]
    fn verify_pairs_keeps_pairs_at_or_above_the_threshold() {
        let hasher = Simhasher::default();
        let texts = ["a b c d e", "a b c d f", "a b x y z", "q r s t u"];
        // Bigrams: {ab, bc, cd, de} vs {ab, bc, cd, df}: 3 / 5 = 0.6.
        let pairs = [(0, 1), (0, 2), (0, 3), (1, 0)];
        let rule = JaccardRule {
            threshold: 0.6,
            width: 2,
        };
        let kept = verify_pairs(&hasher, &texts, &pairs, rule);
        assert_eq!(kept.len(), 2);
        assert_eq!((kept[0].0, kept[0].1), (0, 1));
        assert_eq!((kept[1].0, kept[1].1), (1, 0));
        assert!((kept[0].2 - 0.6).abs() < 1e-12);
        let strict = JaccardRule {
            threshold: 0.61,
            width: 2,
        };
        assert!(verify_pairs(&hasher, &texts, &pairs, strict).is_empty());
        // Width 1: {a,b,c,d,e} vs {a,b,x,y,z} = 2 / 8.
        let loose = JaccardRule {
            threshold: 0.25,
            width: 1,
        };
        let kept = verify_pairs(&hasher, &texts, &[(0, 2), (2, 3)], loose);
        assert_eq!(
            kept.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>(),
            [(0, 2)]
        );
        assert_eq!(rule.check(&hasher, texts[0], texts[1]), Some(0.6));
        assert_eq!(strict.check(&hasher, texts[0], texts[1]), None);
    }

    fn set_of(hashes: impl IntoIterator<Item = u64>) -> ShingleSet {
        let mut hashes: Vec<u64> = hashes.into_iter().collect();
        hashes.sort_unstable();
        hashes.dedup();
        ShingleSet { hashes }
    }

    #[test]
    fn minhash_bands_reach_the_recall_at_their_threshold_with_the_most_rows() {
        for t in [0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0] {
            let b = MinHashBands::for_threshold(t);
            assert!(
                b.probability(t) >= MinHashBands::RECALL_AT_THRESHOLD
                    || b.bands == MinHashBands::MAX_BANDS,
                "{t}: {b:?}"
            );
            if b.bands == MinHashBands::BANDS && b.rows < 16 {
                let more = MinHashBands {
                    rows: b.rows + 1,
                    ..b
                };
                assert!(
                    more.probability(t) < MinHashBands::RECALL_AT_THRESHOLD,
                    "{t}: {b:?}"
                );
            }
        }
        assert_eq!(
            MinHashBands::for_threshold(0.8),
            MinHashBands { bands: 20, rows: 5 }
        );
        assert_eq!(
            MinHashBands::for_threshold(0.9),
            MinHashBands {
                bands: 20,
                rows: 11
            }
        );
        assert_eq!(MinHashBands::for_threshold(0.2).rows, 1);
        assert!(MinHashBands::for_threshold(0.2).bands > 20);
    }

    /// Pairs of random sets of `size` shingles with Jaccard `j` (as near as
    /// the size allows).
    fn pairs_of(size: u64, j: f64, trials: u64) -> Vec<(ShingleSet, ShingleSet)> {
        // |A ∩ B| = s, |A| = |B| = size: j = s / (2 size − s).
        let s = (2.0 * size as f64 * j / (1.0 + j)).round() as u64;
        (0..trials)
            .map(|t| {
                let h = |i: u64| splitmix64(t << 32 | i);
                let a = set_of((0..size).map(h));
                let b = set_of((0..s).map(h).chain((size..2 * size - s).map(h)));
                (a, b)
            })
            .collect()
    }

    fn pairs_at(j: f64, trials: u64) -> Vec<(ShingleSet, ShingleSet)> {
        pairs_of(600, j, trials)
    }

    #[test]
    fn minhash_band_keys_of_small_sets_fill_empty_bins_without_false_agreement() {
        let bands = MinHashBands::for_threshold(0.8);
        // 10 shingles in 100 bins: most bins are filled from others.
        for (j, trials) in [(1.0, 200u64), (0.8181, 2000), (0.0, 2000)] {
            let pairs = pairs_of(10, j, trials);
            let exact = pairs[0].0.jaccard(&pairs[0].1);
            let mut equal_bands = 0usize;
            for (a, b) in &pairs {
                let (ka, kb) = (bands.keys(a), bands.keys(b));
                equal_bands += ka.iter().zip(&kb).filter(|(x, y)| x == y).count();
            }
            let rate = equal_bands as f64 / (trials as usize * bands.bands) as f64;
            let expected = exact.powi(bands.rows as i32);
            let sd = (expected * (1.0 - expected) / (trials as f64 * bands.bands as f64)).sqrt();
            // Bins filled from the same donor agree together, so the
            // spread is wider than for independent bins.
            assert!(
                (rate - expected).abs() < 10.0 * sd + 0.01,
                "j {exact}: band agreement {rate}, expected {expected}"
            );
        }
        // A single shingle fills every bin.
        let one = set_of([42]);
        assert_eq!(bands.keys(&one).len(), bands.bands);
    }

    #[test]
    fn minhash_band_keys_agree_at_the_rate_their_jaccard_predicts() {
        let bands = MinHashBands::for_threshold(0.8);
        for (j, trials) in [(0.8, 300u64), (0.5, 300), (0.2, 300)] {
            let pairs = pairs_at(j, trials);
            let exact = pairs[0].0.jaccard(&pairs[0].1);
            assert!((exact - j).abs() < 0.01, "{exact} for {j}");
            let (mut equal_bands, mut candidates) = (0usize, 0usize);
            for (a, b) in &pairs {
                let (ka, kb) = (bands.keys(a), bands.keys(b));
                assert_eq!(ka.len(), bands.bands);
                let equal = ka.iter().zip(&kb).filter(|(x, y)| x == y).count();
                equal_bands += equal;
                candidates += usize::from(equal > 0);
            }
            // Each band's key is equal with probability j^rows.
            let rate = equal_bands as f64 / (trials as usize * bands.bands) as f64;
            let expected = exact.powi(bands.rows as i32);
            let sd = (expected * (1.0 - expected) / (trials as f64 * bands.bands as f64)).sqrt();
            assert!(
                (rate - expected).abs() < 5.0 * sd + 0.002,
                "j {j}: band agreement {rate}, expected {expected}"
            );
            let share = candidates as f64 / trials as f64;
            let p = bands.probability(exact);
            assert!(
                (share - p).abs() < 0.05 + 5.0 * (p * (1.0 - p) / trials as f64).sqrt(),
                "j {j}: {share} vs {p}"
            );
        }
        // Equal sets: equal keys; disjoint sets: almost never.
        let (a, _) = &pairs_at(0.8, 1)[0];
        assert_eq!(bands.keys(a), bands.keys(&a.clone()));
        let far = set_of((0..600).map(|i| splitmix64(u64::MAX - i)));
        let shared = bands
            .keys(a)
            .iter()
            .zip(bands.keys(&far))
            .filter(|(x, y)| **x == *y)
            .count();
        assert_eq!(shared, 0);
    }

    #[test]
    fn with_fingerprint_equals_the_fingerprint_and_the_shingles_in_every_configuration() {
        let texts = [
            "",
            "  ...  ",
            "one",
            "The quick brown fox jumps over the lazy dog; the dog sleeps.",
            "Ünïcode wörds and ASCII words, 3.14 and don't: mixed.",
            "中文文本 with some English words 中文",
        ];
        let configs = [
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64-fmix64",
            "v1 tokenizer=words shingle=1 weighting=binary hash=fnv1a64-fmix64",
            "v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64-fmix64",
            "v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64",
        ];
        for config in configs {
            let hasher = Simhasher::from_config(&config.parse().unwrap()).unwrap();
            for text in texts {
                for width in [1, 2, 5] {
                    let (fp, set) = ShingleSet::with_fingerprint(&hasher, text, width);
                    assert_eq!(fp, hasher.fingerprint_checked(text), "{config} {text:?}");
                    assert_eq!(
                        set,
                        ShingleSet::from_text(&hasher, text, width),
                        "{config} {text:?}"
                    );
                    let bands = MinHashBands::for_threshold(0.8);
                    let sketch = bands.sketch(&hasher, text, width);
                    assert_eq!(sketch.fingerprint, fp, "{config} {text:?}");
                    assert_eq!(sketch.keys, bands.keys(&set), "{config} {text:?}");
                    assert_eq!(sketch.shingles, set.len(), "{config} {text:?}");
                }
            }
        }
    }

    #[test]
    fn sketches_count_the_distinct_shingles_of_texts_with_repeats() {
        let hasher = Simhasher::default();
        let bands = MinHashBands::for_threshold(0.7);
        let vocabulary = ["a", "b", "c", "rose", "is", "A", "Rose"];
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for round in 0..3_000 {
            let words = round % 300;
            let text: Vec<&str> = (0..words)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    vocabulary[(x % vocabulary.len() as u64) as usize]
                })
                .collect();
            let text = text.join(" ");
            let width = 1 + round % 6;
            let set = ShingleSet::from_text(&hasher, &text, width);
            let sketch = bands.sketch(&hasher, &text, width);
            assert_eq!(sketch.shingles, set.len(), "{text:?} width {width}");
            assert_eq!(sketch.keys, bands.keys(&set), "{text:?} width {width}");
        }
        // The hash 0 is a value like any other.
        assert_eq!(count_distinct(&[0, 0, 5, 0, 5, 7]), 3);
        assert_eq!(count_distinct(&[]), 0);
        let many: Vec<u64> = (0..10_000u64).map(|i| fmix64(i % 3_000)).collect();
        assert_eq!(count_distinct(&many), 3_000);
    }
}
