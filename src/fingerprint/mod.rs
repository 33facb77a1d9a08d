//! Text → features → 64-bit simhash.
//!
//! A [`Simhasher`] turns a text into a 64-bit fingerprint in four steps:
//!
//! 1. **Tokenize** ([`Tokenizer`]): Unicode words (default), letter runs,
//!    Chinese dictionary words (jieba) or character n-grams; lower-cased.
//! 2. **Shingle**: width `w` joins each `w` consecutive tokens with single
//!    spaces into one feature (`"the quick brown"`). No token contains a
//!    space, so the joined string is unambiguous. A text with fewer than `w`
//!    tokens (but at least one) gives one feature: all its tokens joined.
//!    Width 1 (the default) uses the tokens themselves.
//! 3. **Weight** ([`Weighting`], optional [`IdfTable`]): each distinct feature
//!    gets its count (term frequency, default) or 1 (binary), times its idf if
//!    a table is attached.
//! 4. **Hash and vote**: each feature's UTF-8 bytes are hashed with FNV-1a 64
//!    ([`fnv1a64`], optionally finalised: [`FeatureHash`]) and the weighted
//!    hashes vote bit by bit ([`simhash`],
//!    Charikar): bit `j` is 1 iff the weights of features with bit `j` set
//!    outweigh those with it clear. **A tie gives 0**, so an empty or
//!    whitespace-only text fingerprints to `0`.
//!
//! Similar texts get fingerprints that differ in few bits
//! ([`hamming`](crate::hamming)); unrelated texts differ in about 32.
//!
//! ```
//! use simhashdb::Simhasher;
//! use simhashdb::fingerprint::{Tokenizer, Weighting};
//!
//! let hasher = Simhasher::default();
//! let a = hasher.fingerprint("The quick brown fox jumps over the lazy dog, again and again and again.");
//! let b = hasher.fingerprint("The quick brown fox jumped over the lazy dog, again and again and again.");
//! let c = hasher.fingerprint("Completely unrelated words make a different fingerprint altogether.");
//! assert!(simhashdb::hamming(a, b) < simhashdb::hamming(a, c));
//! assert_eq!(hasher.fingerprint("   "), 0);
//!
//! // Three-word shingles over Chinese words, each distinct shingle counted once.
//! let chinese = Simhasher::builder()
//!     .tokenizer(Tokenizer::Chinese)
//!     .shingle(3)
//!     .weighting(Weighting::Binary)
//!     .build()?;
//! assert_eq!(
//!     chinese.config().to_string(),
//!     "v1 tokenizer=chinese shingle=3 weighting=binary hash=fnv1a64-fmix64",
//! );
//! let fp = chinese.fingerprint("我们中出了一个叛徒");
//! assert_ne!(fp, 0);
//! # Ok::<(), simhashdb::fingerprint::FingerprintError>(())
//! ```
//!
//! # Stability
//!
//! The fingerprint of a text under a [`FingerprintConfig`] never changes
//! within a [`FINGERPRINT_CONFIG_VERSION`]; golden tests pin it. The
//! tokenizers depend on Unicode tables (word boundaries from
//! `unicode-segmentation`, lower-casing from the standard library) and the
//! Chinese one on jieba's dictionary, so upgrading those is checked by the
//! same tests.

mod config;
mod error;
mod hash;
mod idf;
mod tokenize;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use fnv::{FnvHashMap, FnvHashSet};

pub use config::{FINGERPRINT_CONFIG_VERSION, FingerprintConfig};
pub use error::FingerprintError;
pub use hash::{FeatureHash, fmix64, fnv1a64, simhash};
pub use idf::IdfTable;
pub use tokenize::{DEFAULT_CHAR_NGRAM, Tokenizer};

use hash::{CountVote, WeightedVote};

/// How each distinct feature of a text is weighted before the vote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Weighting {
    /// The number of times the feature occurs in the text. Written `tf`.
    /// The default.
    #[default]
    TermFrequency,
    /// 1 for every distinct feature, however often it occurs. Written
    /// `binary`.
    Binary,
}

impl fmt::Display for Weighting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Weighting::TermFrequency => f.write_str("tf"),
            Weighting::Binary => f.write_str("binary"),
        }
    }
}

impl FromStr for Weighting {
    type Err = FingerprintError;

    /// Parses `tf` or `binary`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tf" => Ok(Weighting::TermFrequency),
            "binary" => Ok(Weighting::Binary),
            _ => Err(FingerprintError::Parse {
                what: "weighting",
                input: s.to_owned(),
                expected: "`tf` or `binary`",
            }),
        }
    }
}

/// One distinct feature of a text, as [`Simhasher::feature_details`]
/// reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Feature {
    /// The feature: a lower-cased token, a shingle (tokens joined by single
    /// spaces) or a character n-gram.
    pub text: String,
    /// The hash it votes with: [`FeatureHash::hash`] of `text`'s UTF-8
    /// bytes under the `Simhasher`'s feature hash.
    pub hash: u64,
    /// Its weight in the vote.
    pub weight: f64,
}

/// Computes 64-bit simhash fingerprints of texts under one configuration.
///
/// Cheap to clone (an IDF table is shared), `Send + Sync`; computing a
/// fingerprint never panics, whatever the text.
#[derive(Clone, Debug)]
pub struct Simhasher {
    tokenizer: Tokenizer,
    shingle: usize,
    weighting: Weighting,
    hash: FeatureHash,
    idf: Option<Arc<IdfTable>>,
}

impl Default for Simhasher {
    /// `v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64`.
    fn default() -> Self {
        // The builder's defaults are the single source of truth.
        let b = SimhasherBuilder::default();
        Simhasher {
            tokenizer: b.tokenizer,
            shingle: b.shingle,
            weighting: b.weighting,
            hash: b.hash,
            idf: None,
        }
    }
}

/// Builds a [`Simhasher`]; every setting starts at its default.
#[derive(Clone, Debug)]
pub struct SimhasherBuilder {
    tokenizer: Tokenizer,
    shingle: usize,
    weighting: Weighting,
    hash: FeatureHash,
    idf: Option<IdfTable>,
}

impl Default for SimhasherBuilder {
    fn default() -> Self {
        SimhasherBuilder {
            tokenizer: Tokenizer::Words,
            shingle: 1,
            weighting: Weighting::TermFrequency,
            hash: FeatureHash::default(),
            idf: None,
        }
    }
}

impl SimhasherBuilder {
    /// The tokenizer (default [`Tokenizer::Words`]).
    pub fn tokenizer(mut self, tokenizer: Tokenizer) -> Self {
        self.tokenizer = tokenizer;
        self
    }

    /// The shingle width: how many consecutive tokens make one feature
    /// (default 1, single tokens; must be at least 1).
    pub fn shingle(mut self, width: usize) -> Self {
        self.shingle = width;
        self
    }

    /// The weighting (default [`Weighting::TermFrequency`]).
    pub fn weighting(mut self, weighting: Weighting) -> Self {
        self.weighting = weighting;
        self
    }

    /// The feature hash (default [`FeatureHash::Fnv1a64Fmix64`]).
    pub fn hash(mut self, hash: FeatureHash) -> Self {
        self.hash = hash;
        self
    }

    /// Multiplies each feature's weight by its idf (default: no table).
    pub fn idf(mut self, table: IdfTable) -> Self {
        self.idf = Some(table);
        self
    }

    /// Checks the settings and builds the `Simhasher`.
    ///
    /// Errors: shingle width 0 ([`FingerprintError::ZeroShingle`]),
    /// `CharNgrams(0)` ([`FingerprintError::ZeroNgram`]), character n-grams
    /// with a shingle width other than 1
    /// ([`FingerprintError::ShingledNgrams`]), and [`Tokenizer::Chinese`] in
    /// a build without the `chinese` feature
    /// ([`FingerprintError::FeatureDisabled`]).
    pub fn build(self) -> Result<Simhasher, FingerprintError> {
        validate(self.tokenizer, self.shingle, true)?;
        Ok(Simhasher {
            tokenizer: self.tokenizer,
            shingle: self.shingle,
            weighting: self.weighting,
            hash: self.hash,
            idf: self.idf.map(Arc::new),
        })
    }
}

/// Checks a tokenizer and shingle width; with `features`, also that this
/// build can run the tokenizer.
pub(crate) fn validate(
    tokenizer: Tokenizer,
    shingle: usize,
    features: bool,
) -> Result<(), FingerprintError> {
    if shingle == 0 {
        return Err(FingerprintError::ZeroShingle);
    }
    match tokenizer {
        Tokenizer::CharNgrams(0) => Err(FingerprintError::ZeroNgram),
        Tokenizer::CharNgrams(_) if shingle != 1 => {
            Err(FingerprintError::ShingledNgrams { shingle })
        }
        Tokenizer::Chinese if features && cfg!(not(feature = "chinese")) => {
            Err(FingerprintError::FeatureDisabled {
                tokenizer,
                feature: "chinese",
            })
        }
        _ => Ok(()),
    }
}

impl Simhasher {
    /// A builder starting from the default configuration.
    pub fn builder() -> SimhasherBuilder {
        SimhasherBuilder::default()
    }

    /// A `Simhasher` for a configuration without an IDF table, e.g. one read
    /// back from its string form.
    ///
    /// Errors: [`FingerprintError::IdfRequired`] if the configuration uses
    /// an IDF table (see [`Simhasher::from_config_with_idf`]),
    /// [`FingerprintError::UnsupportedVersion`], and the errors of
    /// [`SimhasherBuilder::build`].
    pub fn from_config(config: &FingerprintConfig) -> Result<Simhasher, FingerprintError> {
        if let Some(checksum) = config.idf_checksum() {
            return Err(FingerprintError::IdfRequired { checksum });
        }
        Simhasher::from_config_parts(config, None)
    }

    /// A `Simhasher` for a configuration that uses an IDF table, given that
    /// table.
    ///
    /// Errors: [`FingerprintError::IdfMismatch`] if the table's checksum is
    /// not the one recorded, [`FingerprintError::IdfNotUsed`] if the
    /// configuration uses no table, and those of [`Simhasher::from_config`].
    pub fn from_config_with_idf(
        config: &FingerprintConfig,
        idf: IdfTable,
    ) -> Result<Simhasher, FingerprintError> {
        match config.idf_checksum() {
            None => Err(FingerprintError::IdfNotUsed),
            Some(expected) if expected != idf.checksum() => Err(FingerprintError::IdfMismatch {
                expected,
                got: idf.checksum(),
            }),
            Some(_) => Simhasher::from_config_parts(config, Some(idf)),
        }
    }

    fn from_config_parts(
        config: &FingerprintConfig,
        idf: Option<IdfTable>,
    ) -> Result<Simhasher, FingerprintError> {
        if config.version() != FINGERPRINT_CONFIG_VERSION {
            return Err(FingerprintError::UnsupportedVersion {
                supported: FINGERPRINT_CONFIG_VERSION,
                got: config.version(),
            });
        }
        let builder = SimhasherBuilder {
            tokenizer: config.tokenizer(),
            shingle: config.shingle(),
            weighting: config.weighting(),
            hash: config.hash(),
            idf,
        };
        builder.build()
    }

    /// The configuration: everything that determines a fingerprint.
    pub fn config(&self) -> FingerprintConfig {
        FingerprintConfig::new(
            self.tokenizer,
            self.shingle,
            self.weighting,
            self.hash,
            self.idf.as_ref().map(|t| t.checksum()),
        )
    }

    /// The 64-bit simhash of `text`.
    ///
    /// Equal to `simhash(self.features(text))` ([`simhash`],
    /// [`Simhasher::features`]); an empty or whitespace-only text (no
    /// features) gives 0. Never panics.
    pub fn fingerprint(&self, text: &str) -> u64 {
        self.fingerprint_and_features(text).0
    }

    /// The 64-bit simhash of `text`, or `None` if the text is blank: it
    /// yields no feature (empty, whitespace or punctuation only for the word
    /// tokenizers, no letter for [`Tokenizer::Letters`]), so its fingerprint
    /// would be 0 and every blank text a duplicate of every other. An index
    /// that checks documents for duplicates should leave blank ones out.
    ///
    /// ```
    /// use simhashdb::Simhasher;
    /// let hasher = Simhasher::default();
    /// assert_eq!(hasher.fingerprint_checked("  ...\n"), None);
    /// assert_eq!(hasher.fingerprint_checked("a word"), Some(hasher.fingerprint("a word")));
    /// ```
    pub fn fingerprint_checked(&self, text: &str) -> Option<u64> {
        match self.fingerprint_and_features(text) {
            (fp, true) => Some(fp),
            (_, false) => None,
        }
    }

    /// The fingerprint of `text`, and whether it had any feature.
    fn fingerprint_and_features(&self, text: &str) -> (u64, bool) {
        let mut any = false;
        let fp = match (&self.idf, self.weighting) {
            // Unit votes per occurrence sum to the term frequency weights.
            (None, Weighting::TermFrequency) => {
                let mut vote = CountVote::new();
                let hash = self.hash;
                self.for_each_feature_fnv(text, &mut |fnv| {
                    any = true;
                    vote.add(hash.finish(fnv));
                });
                vote.finish()
            }
            (None, Weighting::Binary) => {
                let mut vote = CountVote::new();
                let mut seen = FnvHashSet::default();
                let hash = self.hash;
                self.for_each_feature_fnv(text, &mut |fnv| {
                    any = true;
                    let h = hash.finish(fnv);
                    if seen.insert(h) {
                        vote.add(h);
                    }
                });
                vote.finish()
            }
            (Some(_), _) => {
                let mut vote = WeightedVote::new();
                for (h, w) in self.features(text) {
                    any = true;
                    vote.add(h, w);
                }
                vote.finish()
            }
        };
        (fp, any)
    }

    /// The simhash of caller-chosen features and weights, e.g. title words
    /// weighted above body words.
    ///
    /// Each feature's bytes are hashed with this `Simhasher`'s
    /// [`FeatureHash`] and voted with its weight as given: its tokenizer,
    /// shingles, weighting and IDF table are not applied. Pairs are not merged (a feature given twice
    /// votes twice). Negative, NaN and infinite weights are ignored (treated
    /// as 0); the tie rule of [`simhash`] applies, so no features give 0.
    ///
    /// ```
    /// use simhashdb::Simhasher;
    /// let hasher = Simhasher::default();
    /// let title = hasher.tokens("Rust Programming");
    /// let body = hasher.tokens("a language empowering everyone to build reliable software");
    /// let fp = hasher.fingerprint_weighted(
    ///     title.iter().map(|w| (w, 3.0)).chain(body.iter().map(|w| (w, 1.0))),
    /// );
    /// assert_ne!(fp, 0);
    /// // One heavy feature decides every bit.
    /// assert_eq!(
    ///     hasher.fingerprint_weighted([("rust", 10.0), ("a", 1.0), ("b", 1.0)]),
    ///     simhashdb::fingerprint::FeatureHash::default().hash(b"rust"),
    /// );
    /// ```
    pub fn fingerprint_weighted<I, F>(&self, features: I) -> u64
    where
        I: IntoIterator<Item = (F, f64)>,
        F: AsRef<[u8]>,
    {
        let mut vote = WeightedVote::new();
        for (feature, weight) in features {
            vote.add(self.hash.hash(feature.as_ref()), weight);
        }
        vote.finish()
    }

    /// The distinct features of `text` as `(hash, weight)` pairs, in order of
    /// first occurrence: the input of the vote, so that
    /// `simhash(self.features(text)) == self.fingerprint(text)`. The hash is
    /// [`FeatureHash::hash`] of the feature's text.
    ///
    /// Features are identified by their hash (two strings with the same
    /// 64-bit hash count as one feature). Useful for debugging and for
    /// verifying a near-duplicate by weighted Jaccard similarity.
    pub fn features(&self, text: &str) -> Vec<(u64, f64)> {
        let mut order: Vec<(u64, u64)> = Vec::new();
        let mut index: FnvHashMap<u64, usize> = FnvHashMap::default();
        self.for_each_feature(text, &mut |f| {
            let h = fnv1a64(f.as_bytes());
            let next = order.len();
            let i = *index.entry(h).or_insert(next);
            match order.get_mut(i) {
                Some((_, count)) => *count += 1,
                None => order.push((h, 1)),
            }
        });
        order
            .into_iter()
            .map(|(h, count)| (self.hash.finish(h), self.weight(h, count)))
            .collect()
    }

    /// Like [`Simhasher::features`], with each feature's text.
    pub fn feature_details(&self, text: &str) -> Vec<Feature> {
        let mut order: Vec<(String, u64, u64)> = Vec::new();
        let mut index: FnvHashMap<u64, usize> = FnvHashMap::default();
        self.for_each_feature(text, &mut |f| {
            let h = fnv1a64(f.as_bytes());
            let next = order.len();
            let i = *index.entry(h).or_insert(next);
            match order.get_mut(i) {
                Some((_, _, count)) => *count += 1,
                None => order.push((f.to_owned(), h, 1)),
            }
        });
        order
            .into_iter()
            .map(|(text, fnv, count)| Feature {
                text,
                hash: self.hash.finish(fnv),
                weight: self.weight(fnv, count),
            })
            .collect()
    }

    /// The tokens of `text` before shingling, in order (for
    /// [`Tokenizer::CharNgrams`], the n-grams).
    pub fn tokens(&self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.for_each_token(text, &mut |t| out.push(t.to_owned()));
        out
    }

    /// [`fingerprint_checked`](Self::fingerprint_checked) of `text`, and the
    /// `fnv1a64-fmix64` hash of each of its [`tokens`](Self::tokens), in
    /// order. When those hashes are the features (one-token shingles, term
    /// frequency, no IDF table, `fnv1a64-fmix64`, a word or letter
    /// tokenizer: the default), the text is tokenized once for both.
    pub(crate) fn fingerprint_and_token_hashes(&self, text: &str) -> (Option<u64>, Vec<u64>) {
        let token_hash = |fnv: u64| FeatureHash::Fnv1a64Fmix64.finish(fnv);
        let mut hashes = Vec::with_capacity(crate::recheck::tokens_in(text));
        let tokens_are_features = self.idf.is_none()
            && self.weighting == Weighting::TermFrequency
            && self.shingle <= 1
            && self.hash == FeatureHash::Fnv1a64Fmix64
            && !matches!(self.tokenizer, Tokenizer::CharNgrams(_));
        if tokens_are_features {
            let mut vote = CountVote::new();
            self.for_each_token_fnv(text, &mut |fnv| {
                let h = token_hash(fnv);
                vote.add(h);
                hashes.push(h);
            });
            let fp = vote.finish();
            ((!hashes.is_empty()).then_some(fp), hashes)
        } else {
            self.for_each_token_fnv(text, &mut |fnv| hashes.push(token_hash(fnv)));
            (self.fingerprint_checked(text), hashes)
        }
    }

    /// Calls `emit` with each of [`tokens`](Self::tokens), without
    /// allocating them.
    pub(crate) fn for_each_token(&self, text: &str, emit: &mut impl FnMut(&str)) {
        match self.tokenizer {
            Tokenizer::CharNgrams(n) => tokenize::for_each_char_ngram(n, text, emit),
            tokenizer => tokenize::for_each_token(tokenizer, text, emit),
        }
    }

    /// Calls `emit` with the [`fnv1a64`] of each of [`tokens`](Self::tokens),
    /// hashing ASCII words as they are scanned.
    pub(crate) fn for_each_token_fnv(&self, text: &str, emit: &mut impl FnMut(u64)) {
        match self.tokenizer {
            Tokenizer::CharNgrams(n) => {
                tokenize::for_each_char_ngram(n, text, &mut |t| emit(fnv1a64(t.as_bytes())))
            }
            tokenizer => tokenize::for_each_token_fnv(tokenizer, text, emit),
        }
    }

    /// Calls `emit` with the [`fnv1a64`] of every feature
    /// [`for_each_feature`](Self::for_each_feature) gives, in order.
    fn for_each_feature_fnv(&self, text: &str, emit: &mut impl FnMut(u64)) {
        match self.tokenizer {
            Tokenizer::CharNgrams(_) => {}
            _ if self.shingle <= 1 => return self.for_each_token_fnv(text, emit),
            _ => {}
        }
        self.for_each_feature(text, &mut |f| emit(fnv1a64(f.as_bytes())));
    }

    /// The weight of the feature whose [`fnv1a64`] is `fnv`.
    fn weight(&self, fnv: u64, count: u64) -> f64 {
        let tf = match self.weighting {
            // Exact: no text has 2^53 features.
            Weighting::TermFrequency => count as f64,
            Weighting::Binary => 1.0,
        };
        match &self.idf {
            Some(idf) => tf * idf.get(fnv),
            None => tf,
        }
    }

    /// Calls `emit` with every feature of `text` (token, shingle or n-gram),
    /// in order, repeats included.
    pub(crate) fn for_each_feature(&self, text: &str, emit: &mut impl FnMut(&str)) {
        match self.tokenizer {
            Tokenizer::CharNgrams(n) => tokenize::for_each_char_ngram(n, text, emit),
            tokenizer if self.shingle <= 1 => tokenize::for_each_token(tokenizer, text, emit),
            tokenizer => {
                let mut shingler = Shingler::new(self.shingle);
                tokenize::for_each_token(tokenizer, text, &mut |token| {
                    if let Some(shingle) = shingler.push(token) {
                        emit(shingle);
                    }
                });
                if let Some(short) = shingler.short_text() {
                    emit(short);
                }
            }
        }
    }
}

/// Slides a window of `width` tokens over a token stream.
struct Shingler {
    width: usize,
    /// The tokens of the window joined by single spaces.
    joined: String,
    /// Byte length of each token in the window, oldest first.
    lens: std::collections::VecDeque<usize>,
    emitted: bool,
}

impl Shingler {
    fn new(width: usize) -> Self {
        Shingler {
            width,
            joined: String::new(),
            lens: std::collections::VecDeque::new(),
            emitted: false,
        }
    }

    /// Adds a token; returns the shingle once the window is full.
    fn push(&mut self, token: &str) -> Option<&str> {
        if self.lens.len() == self.width
            && let Some(oldest) = self.lens.pop_front()
        {
            // The oldest token and the space after it.
            let cut = (oldest + 1).min(self.joined.len());
            self.joined.drain(..cut);
        }
        if !self.lens.is_empty() {
            self.joined.push(' ');
        }
        self.joined.push_str(token);
        self.lens.push_back(token.len());
        if self.lens.len() == self.width {
            self.emitted = true;
            Some(&self.joined)
        } else {
            None
        }
    }

    /// For a text with fewer tokens than the width (but some): all of them.
    fn short_text(&self) -> Option<&str> {
        (!self.emitted && !self.lens.is_empty()).then_some(self.joined.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default feature hash of a feature's bytes.
    fn feature_hash(feature: &[u8]) -> u64 {
        FeatureHash::default().hash(feature)
    }

    fn hasher(tokenizer: Tokenizer, shingle: usize, weighting: Weighting) -> Simhasher {
        Simhasher::builder()
            .tokenizer(tokenizer)
            .shingle(shingle)
            .weighting(weighting)
            .build()
            .expect("valid config")
    }

    fn feature_texts(h: &Simhasher, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        h.for_each_feature(text, &mut |f| out.push(f.to_owned()));
        out
    }

    #[test]
    fn blank_texts_have_no_checked_fingerprint() {
        let words = Simhasher::default();
        for blank in ["", "   ", "\n\t\r", "\u{a0}\u{3000}", "... -- !?", "<>"] {
            assert_eq!(words.fingerprint(blank), 0, "{blank:?}");
            assert_eq!(words.fingerprint_checked(blank), None, "{blank:?}");
        }
        assert_eq!(
            words.fingerprint_checked("42"),
            Some(words.fingerprint("42"))
        );
        let shingled = hasher(Tokenizer::Words, 3, Weighting::Binary);
        assert_eq!(shingled.fingerprint_checked(" , "), None);
        assert_eq!(
            shingled.fingerprint_checked("two words"),
            Some(shingled.fingerprint("two words"))
        );
        // Digits are no letters: blank for the letter-run tokenizer.
        let letters = hasher(Tokenizer::Letters, 1, Weighting::TermFrequency);
        assert_eq!(letters.fingerprint_checked("123 456"), None);
    }

    #[test]
    fn shingles_slide_over_tokens() {
        let h = hasher(Tokenizer::Words, 3, Weighting::TermFrequency);
        assert_eq!(feature_texts(&h, "A b, C d e"), ["a b c", "b c d", "c d e"]);
        assert_eq!(feature_texts(&h, "one two three"), ["one two three"]);
        let h2 = hasher(Tokenizer::Letters, 2, Weighting::TermFrequency);
        assert_eq!(feature_texts(&h2, "don't stop"), ["don t", "t stop"]);
    }

    #[test]
    fn short_texts_give_one_feature() {
        let h = hasher(Tokenizer::Words, 3, Weighting::TermFrequency);
        assert_eq!(feature_texts(&h, "Hello, world"), ["hello world"]);
        assert_eq!(feature_texts(&h, "hello"), ["hello"]);
        assert!(feature_texts(&h, "  !! ").is_empty());
        assert_eq!(h.fingerprint("hello world"), feature_hash(b"hello world"));
        assert_ne!(h.fingerprint("hello"), 0);
        let huge = hasher(Tokenizer::Words, usize::MAX, Weighting::TermFrequency);
        assert_eq!(feature_texts(&huge, "a b c"), ["a b c"]);
    }

    #[test]
    fn empty_and_whitespace_fingerprint_to_zero() {
        let mut hashers = vec![
            Simhasher::default(),
            hasher(Tokenizer::Letters, 2, Weighting::Binary),
            hasher(Tokenizer::CharNgrams(3), 1, Weighting::TermFrequency),
        ];
        if cfg!(feature = "chinese") {
            hashers.push(hasher(Tokenizer::Chinese, 3, Weighting::TermFrequency));
        }
        for h in hashers {
            for text in ["", " ", " \t\r\n\u{3000}\u{A0}"] {
                assert_eq!(h.fingerprint(text), 0, "{:?} {text:?}", h.config());
                assert!(h.features(text).is_empty());
            }
        }
    }

    #[test]
    fn single_token_fingerprint_is_its_hash() {
        assert_eq!(
            Simhasher::default().fingerprint("Hello!"),
            feature_hash(b"hello")
        );
    }

    #[test]
    fn tf_weights_count_repeats_and_binary_does_not() {
        let tf = Simhasher::default();
        assert_eq!(
            tf.features("b a b b"),
            [(feature_hash(b"b"), 3.0), (feature_hash(b"a"), 1.0)]
        );
        let binary = hasher(Tokenizer::Words, 1, Weighting::Binary);
        assert_eq!(
            binary.features("b a b b"),
            [(feature_hash(b"b"), 1.0), (feature_hash(b"a"), 1.0)]
        );
        // With term frequency "b" decides every bit; with binary weights the
        // two features tie wherever they disagree.
        assert_eq!(tf.fingerprint("b a b b"), feature_hash(b"b"));
        assert_eq!(
            binary.fingerprint("b a b b"),
            feature_hash(b"a") & feature_hash(b"b")
        );
    }

    #[test]
    fn fingerprint_equals_vote_over_features() {
        let text = "It was the best of times, it was the worst of times, it was the age of \
                    wisdom, it was the age of foolishness. 我们中出了一个叛徒，我们的叛徒。";
        let idf =
            IdfTable::from_pairs([("it", 0.5), ("was", 0.25), ("times", 3.0)], 1.5).expect("valid");
        let tokenizers = [
            Tokenizer::Words,
            Tokenizer::Letters,
            Tokenizer::Chinese,
            Tokenizer::CharNgrams(2),
        ];
        let runnable = tokenizers
            .into_iter()
            .filter(|&t| t != Tokenizer::Chinese || cfg!(feature = "chinese"));
        for tokenizer in runnable {
            let shingles: &[usize] = match tokenizer {
                Tokenizer::CharNgrams(_) => &[1],
                _ => &[1, 2, 3],
            };
            for &shingle in shingles {
                for weighting in [Weighting::TermFrequency, Weighting::Binary] {
                    for hash in [FeatureHash::Fnv1a64, FeatureHash::Fnv1a64Fmix64] {
                        for with_idf in [false, true] {
                            let mut b = Simhasher::builder()
                                .tokenizer(tokenizer)
                                .shingle(shingle)
                                .weighting(weighting)
                                .hash(hash);
                            if with_idf {
                                b = b.idf(idf.clone());
                            }
                            let h = b.build().expect("valid");
                            let fp = h.fingerprint(text);
                            assert_eq!(fp, simhash(h.features(text)), "{}", h.config());
                            let details = h.feature_details(text);
                            let pairs: Vec<(u64, f64)> =
                                details.iter().map(|f| (f.hash, f.weight)).collect();
                            assert_eq!(pairs, h.features(text));
                            for f in &details {
                                assert_eq!(f.hash, hash.hash(f.text.as_bytes()));
                            }
                            assert_ne!(fp, 0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn feature_details_report_texts() {
        let h = hasher(Tokenizer::Words, 2, Weighting::TermFrequency);
        let d = h.feature_details("to be or not to be");
        let texts: Vec<&str> = d.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["to be", "be or", "or not", "not to"]);
        assert_eq!(d.first().map(|f| f.weight), Some(2.0));
        assert_eq!(d.first().map(|f| f.hash), Some(feature_hash(b"to be")));
    }

    #[test]
    fn idf_scales_weights() {
        let idf = IdfTable::from_pairs([("rare", 10.0), ("common", 0.1)], 2.0).expect("valid");
        let h = Simhasher::builder().idf(idf).build().expect("valid");
        assert_eq!(
            h.features("common rare common other"),
            [
                (feature_hash(b"common"), 0.2),
                (feature_hash(b"rare"), 10.0),
                (feature_hash(b"other"), 2.0)
            ]
        );
        assert_eq!(
            h.fingerprint("common rare common other"),
            feature_hash(b"rare")
        );
        // An idf of 0 removes a feature from the vote.
        let zero = IdfTable::from_pairs([("noise", 0.0)], 1.0).expect("valid");
        let h = Simhasher::builder().idf(zero).build().expect("valid");
        assert_eq!(h.fingerprint("noise signal noise"), feature_hash(b"signal"));
    }

    #[test]
    fn fmix_hash_votes_with_finalised_hashes_and_fnv_idf_keys() {
        let idf = IdfTable::from_pairs([("rare", 10.0)], 1.0).expect("valid");
        let h = Simhasher::builder()
            .hash(FeatureHash::Fnv1a64Fmix64)
            .idf(idf)
            .build()
            .expect("valid");
        assert_eq!(
            h.features("rare common"),
            [
                (fmix64(fnv1a64(b"rare")), 10.0),
                (fmix64(fnv1a64(b"common")), 1.0)
            ]
        );
        assert_eq!(h.fingerprint("rare common"), fmix64(fnv1a64(b"rare")));
        assert_eq!(h.fingerprint_weighted([("x", 1.0)]), fmix64(fnv1a64(b"x")));
        assert_eq!(
            h.config().to_string(),
            format!(
                "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64 idf={:016x}",
                h.config().idf_checksum().unwrap_or_default()
            )
        );
        let plain = Simhasher::builder()
            .hash(FeatureHash::Fnv1a64Fmix64)
            .build()
            .expect("valid");
        assert_eq!(plain.fingerprint("Word"), fmix64(fnv1a64(b"word")));
        assert_eq!(plain.fingerprint(""), 0);
    }

    #[test]
    fn weighted_feature_dominates() {
        let h = Simhasher::default();
        let fp = h.fingerprint_weighted([
            ("heavy", 10.0),
            ("a", 1.0),
            ("b", 1.0),
            ("c", 1.0),
            ("d", 1.0),
        ]);
        assert_eq!(fp, feature_hash(b"heavy"));
        let fp = h.fingerprint_weighted([("heavy", 1.0), ("a", 1.0), ("b", 1.0), ("c", 1.0)]);
        assert_ne!(fp, feature_hash(b"heavy"));
        // Byte features work too, and equal unit weights match the text path.
        let bytes: [(&[u8], f64); 2] = [(b"x", 1.0), (b"x", 1.0)];
        assert_eq!(h.fingerprint_weighted(bytes), h.fingerprint("x x"));
        assert_eq!(h.fingerprint_weighted(std::iter::empty::<(&str, f64)>()), 0);
    }

    #[test]
    fn weighted_ignores_bad_weights() {
        let h = Simhasher::default();
        let fp = h.fingerprint_weighted([
            ("a", 1.0),
            ("b", f64::NAN),
            ("c", -5.0),
            ("d", f64::INFINITY),
            ("e", f64::NEG_INFINITY),
        ]);
        assert_eq!(fp, feature_hash(b"a"));
    }

    #[test]
    fn bad_builds_are_errors() {
        assert_eq!(
            Simhasher::builder().shingle(0).build().err(),
            Some(FingerprintError::ZeroShingle)
        );
        assert_eq!(
            Simhasher::builder()
                .tokenizer(Tokenizer::CharNgrams(0))
                .build()
                .err(),
            Some(FingerprintError::ZeroNgram)
        );
        assert_eq!(
            Simhasher::builder()
                .tokenizer(Tokenizer::CharNgrams(3))
                .shingle(2)
                .build()
                .err(),
            Some(FingerprintError::ShingledNgrams { shingle: 2 })
        );
        let chinese = Simhasher::builder().tokenizer(Tokenizer::Chinese).build();
        assert_eq!(chinese.is_ok(), cfg!(feature = "chinese"));
    }

    #[test]
    fn config_round_trips_through_from_config() {
        let h = hasher(Tokenizer::Letters, 2, Weighting::Binary);
        let config = h.config();
        assert_eq!(
            config.to_string(),
            "v1 tokenizer=letters shingle=2 weighting=binary hash=fnv1a64-fmix64"
        );
        let parsed: FingerprintConfig = config.to_string().parse().expect("valid");
        let again = Simhasher::from_config(&parsed).expect("valid");
        assert_eq!(again.config(), config);
        assert_eq!(
            again.fingerprint("to be or not"),
            h.fingerprint("to be or not")
        );
    }

    #[test]
    fn idf_configs_need_the_table() {
        let idf = IdfTable::from_pairs([("x", 2.0)], 1.0).expect("valid");
        let checksum = idf.checksum();
        let h = Simhasher::builder()
            .idf(idf.clone())
            .build()
            .expect("valid");
        let config = h.config();
        assert_eq!(config.idf_checksum(), Some(checksum));
        assert_eq!(
            Simhasher::from_config(&config).err(),
            Some(FingerprintError::IdfRequired { checksum })
        );
        let again = Simhasher::from_config_with_idf(&config, idf.clone()).expect("valid");
        assert_eq!(again.fingerprint("x y x"), h.fingerprint("x y x"));
        let other = IdfTable::from_pairs([("x", 3.0)], 1.0).expect("valid");
        assert_eq!(
            Simhasher::from_config_with_idf(&config, other.clone()).err(),
            Some(FingerprintError::IdfMismatch {
                expected: checksum,
                got: other.checksum()
            })
        );
        assert_eq!(
            Simhasher::from_config_with_idf(&Simhasher::default().config(), idf).err(),
            Some(FingerprintError::IdfNotUsed)
        );
    }

    #[test]
    fn weighting_names_round_trip() {
        for w in [Weighting::TermFrequency, Weighting::Binary] {
            assert_eq!(w.to_string().parse::<Weighting>(), Ok(w));
        }
        assert!("TF".parse::<Weighting>().is_err());
        assert!("".parse::<Weighting>().is_err());
    }

    #[test]
    fn simhasher_is_send_sync() {
        fn check<T: Send + Sync + Clone>() {}
        check::<Simhasher>();
        check::<FingerprintConfig>();
        check::<IdfTable>();
    }
}
