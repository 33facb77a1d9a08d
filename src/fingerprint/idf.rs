//! Inverse document frequency weights for features.

use fnv::{FnvHashMap, FnvHashSet};

use super::hash::fnv1a64;
use super::{FingerprintError, Simhasher};

/// Inverse document frequency per feature, keyed by the [`fnv1a64`] of the
/// feature's text (whatever [`FeatureHash`](super::FeatureHash) votes).
///
/// With a table attached ([`SimhasherBuilder::idf`](super::SimhasherBuilder::idf)),
/// a feature's weight is its [`Weighting`](super::Weighting) weight times its
/// idf; features not in the table get [`default_idf`](IdfTable::default_idf).
///
/// A table is tied to the tokenizer and shingle width that produced its
/// features; attaching it to a `Simhasher` configured differently is allowed
/// but mostly looks up unknown features. Its [`checksum`](IdfTable::checksum)
/// is recorded in the [`FingerprintConfig`](super::FingerprintConfig).
///
/// To store a table, write [`default_idf`](IdfTable::default_idf) and the
/// pairs of [`iter`](IdfTable::iter); [`IdfTable::from_hashed_pairs`] restores
/// it with the same checksum.
///
/// ```
/// use simhashdb::fingerprint::{IdfTable, Simhasher};
///
/// let docs = ["the cat sat", "the dog sat", "the bird sang"];
/// let hasher = Simhasher::default();
/// let idf = IdfTable::from_documents(&hasher, docs);
/// // "the" is in every document, "cat" in one.
/// let the = simhashdb::fingerprint::fnv1a64(b"the");
/// let cat = simhashdb::fingerprint::fnv1a64(b"cat");
/// assert!(idf.get(the) < idf.get(cat));
///
/// let weighted = Simhasher::builder().idf(idf).build()?;
/// assert!(weighted.config().to_string().contains(" idf="));
/// # Ok::<(), simhashdb::fingerprint::FingerprintError>(())
/// ```
#[derive(Clone)]
pub struct IdfTable {
    idf: FnvHashMap<u64, f64>,
    default_idf: f64,
    checksum: u64,
}

impl IdfTable {
    /// Smoothed idf from a corpus: each document's distinct features (as
    /// `hasher`'s tokenizer and shingle width produce them; its weighting and
    /// any idf table are not used) are counted once.
    ///
    /// `idf(f) = ln((1 + N) / (1 + df(f))) + 1` for `N` documents of which
    /// `df(f)` contain `f`; unknown features get `ln(1 + N) + 1`, the idf of
    /// a feature seen in no document. Every idf is at least 1.
    ///
    /// `f64::ln` comes from the platform's math library, whose last bit may
    /// differ between platforms: to reproduce fingerprints bit for bit
    /// elsewhere, store the table rather than rebuilding it.
    pub fn from_documents<I, S>(hasher: &Simhasher, documents: I) -> IdfTable
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut df: FnvHashMap<u64, u64> = FnvHashMap::default();
        let mut seen: FnvHashSet<u64> = FnvHashSet::default();
        let mut n: u64 = 0;
        for doc in documents {
            n += 1;
            seen.clear();
            hasher.for_each_feature(doc.as_ref(), &mut |feature| {
                let h = fnv1a64(feature.as_bytes());
                if seen.insert(h) {
                    *df.entry(h).or_insert(0) += 1;
                }
            });
        }
        // Counts are far below 2^53, so the conversions are exact.
        let smoothed_n = (n + 1) as f64;
        let idf = df
            .into_iter()
            .map(|(h, df)| (h, (smoothed_n / (df + 1) as f64).ln() + 1.0))
            .collect();
        IdfTable::new(idf, smoothed_n.ln() + 1.0)
    }

    /// A table from `(feature, idf)` pairs, each feature hashed with
    /// [`fnv1a64`](super::fnv1a64) (a shingle is its tokens joined by single
    /// spaces). A later pair for the same feature replaces an earlier one.
    ///
    /// Errors with [`FingerprintError::InvalidIdf`] if any idf or
    /// `default_idf` is negative, NaN or infinite.
    pub fn from_pairs<I, F>(pairs: I, default_idf: f64) -> Result<IdfTable, FingerprintError>
    where
        I: IntoIterator<Item = (F, f64)>,
        F: AsRef<[u8]>,
    {
        IdfTable::from_hashed_pairs(
            pairs.into_iter().map(|(f, idf)| (fnv1a64(f.as_ref()), idf)),
            default_idf,
        )
    }

    /// A table from `(fnv1a64 of feature, idf)` pairs, as [`IdfTable::iter`] yields
    /// them. Same rules as [`IdfTable::from_pairs`].
    pub fn from_hashed_pairs<I>(pairs: I, default_idf: f64) -> Result<IdfTable, FingerprintError>
    where
        I: IntoIterator<Item = (u64, f64)>,
    {
        let default_idf = check_idf(default_idf)?;
        let mut idf = FnvHashMap::default();
        for (h, value) in pairs {
            idf.insert(h, check_idf(value)?);
        }
        Ok(IdfTable::new(idf, default_idf))
    }

    fn new(idf: FnvHashMap<u64, f64>, default_idf: f64) -> IdfTable {
        let checksum = checksum(&idf, default_idf);
        IdfTable {
            idf,
            default_idf,
            checksum,
        }
    }

    /// The idf of the feature whose text has [`fnv1a64`] `feature`, or the
    /// default.
    #[inline]
    pub fn get(&self, feature: u64) -> f64 {
        self.idf.get(&feature).copied().unwrap_or(self.default_idf)
    }

    /// The idf of features not in the table.
    pub fn default_idf(&self) -> f64 {
        self.default_idf
    }

    /// Number of features in the table.
    pub fn len(&self) -> usize {
        self.idf.len()
    }

    /// Whether the table has no features (every feature gets the default).
    pub fn is_empty(&self) -> bool {
        self.idf.is_empty()
    }

    /// `(fnv1a64 of feature, idf)` pairs, sorted by hash.
    pub fn iter(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        let mut pairs: Vec<(u64, f64)> = self.idf.iter().map(|(&h, &v)| (h, v)).collect();
        pairs.sort_unstable_by_key(|&(h, _)| h);
        pairs.into_iter()
    }

    /// FNV-1a 64 of the table's canonical serialisation: the bytes `idf1`,
    /// the default idf, then every `(hash, idf)` pair sorted by hash, each
    /// number as 8 little-endian bytes (idf values as IEEE 754 bits). Two
    /// tables with equal checksums give the same weights.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }
}

impl std::fmt::Debug for IdfTable {
    /// Size and checksum only: a table can hold millions of features.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdfTable")
            .field("len", &self.idf.len())
            .field("default_idf", &self.default_idf)
            .field("checksum", &format_args!("{:016x}", self.checksum))
            .finish()
    }
}

/// Accepts finite, non-negative values; `-0.0` becomes `0.0` so that the
/// checksum depends on the value only.
fn check_idf(value: f64) -> Result<f64, FingerprintError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value + 0.0)
    } else {
        Err(FingerprintError::InvalidIdf { value })
    }
}

fn checksum(idf: &FnvHashMap<u64, f64>, default_idf: f64) -> u64 {
    let mut pairs: Vec<(u64, f64)> = idf.iter().map(|(&h, &v)| (h, v)).collect();
    pairs.sort_unstable_by_key(|&(h, _)| h);
    let mut bytes = Vec::with_capacity(12 + 16 * pairs.len());
    bytes.extend_from_slice(b"idf1");
    bytes.extend_from_slice(&default_idf.to_bits().to_le_bytes());
    for (h, v) in pairs {
        bytes.extend_from_slice(&h.to_le_bytes());
        bytes.extend_from_slice(&v.to_bits().to_le_bytes());
    }
    fnv1a64(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Tokenizer;

    #[test]
    fn from_documents_smoothed_idf() {
        let hasher = Simhasher::default();
        let idf = IdfTable::from_documents(&hasher, ["a b", "a c", "a a a"]);
        assert_eq!(idf.len(), 3);
        let get = |w: &str| idf.get(fnv1a64(w.as_bytes()));
        assert_eq!(get("a"), 1.0); // ln(4/4) + 1
        assert!((get("b") - ((4.0f64 / 2.0).ln() + 1.0)).abs() < 1e-12);
        assert_eq!(get("b"), get("c"));
        assert!((get("zzz") - (4.0f64.ln() + 1.0)).abs() < 1e-12);
        assert_eq!(get("zzz"), idf.default_idf());
    }

    #[test]
    fn from_documents_uses_shingles() {
        let hasher = Simhasher::builder()
            .tokenizer(Tokenizer::Words)
            .shingle(2)
            .build()
            .expect("valid config");
        let idf = IdfTable::from_documents(&hasher, ["a b c", "a b d"]);
        assert_eq!(idf.len(), 3);
        assert_eq!(idf.get(fnv1a64(b"a b")), 1.0);
        assert!(idf.get(fnv1a64(b"b c")) > 1.0);
    }

    #[test]
    fn pairs_and_checksum() {
        let a = IdfTable::from_pairs([("x", 2.0), ("y", 3.0)], 5.0).expect("valid");
        let b = IdfTable::from_pairs([("y", 3.0), ("x", 2.0)], 5.0).expect("valid");
        assert_eq!(a.checksum(), b.checksum());
        assert_eq!(a.get(fnv1a64(b"x")), 2.0);
        assert_eq!(a.get(fnv1a64(b"nope")), 5.0);
        let c = IdfTable::from_pairs([("x", 2.0), ("y", 3.5)], 5.0).expect("valid");
        assert_ne!(a.checksum(), c.checksum());
        let d = IdfTable::from_pairs([("x", 2.0), ("y", 3.0)], 4.0).expect("valid");
        assert_ne!(a.checksum(), d.checksum());
        let restored = IdfTable::from_hashed_pairs(a.iter(), a.default_idf()).expect("valid");
        assert_eq!(restored.checksum(), a.checksum());
        let zero = IdfTable::from_pairs([("x", 0.0)], 1.0).expect("valid");
        let neg_zero = IdfTable::from_pairs([("x", -0.0)], 1.0).expect("valid");
        assert_eq!(zero.checksum(), neg_zero.checksum());
    }

    #[test]
    fn debug_is_a_summary() {
        let t = IdfTable::from_pairs([("x", 2.0), ("y", 3.0)], 1.5).expect("valid");
        let debug = format!("{t:?}");
        assert!(debug.contains("len: 2"), "{debug}");
        assert!(debug.contains(&format!("{:016x}", t.checksum())), "{debug}");
    }

    #[test]
    fn later_pairs_replace_earlier() {
        let t = IdfTable::from_pairs([("x", 2.0), ("x", 7.0)], 1.0).expect("valid");
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(fnv1a64(b"x")), 7.0);
    }

    #[test]
    fn invalid_idf_values_are_errors() {
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(IdfTable::from_pairs([("x", bad)], 1.0).is_err(), "{bad}");
            assert!(
                IdfTable::from_pairs(std::iter::empty::<(&str, f64)>(), bad).is_err(),
                "{bad}"
            );
        }
        let empty = IdfTable::from_pairs(std::iter::empty::<(&str, f64)>(), 1.0).expect("valid");
        assert!(empty.is_empty());
    }
}
