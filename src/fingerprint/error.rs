//! Errors of the fingerprinting layer.

use std::fmt;

use super::Tokenizer;

/// A fingerprint configuration that cannot be built, parsed or matched.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum FingerprintError {
    /// Shingle width 0; use 1 for plain tokens.
    ZeroShingle,
    /// `Tokenizer::CharNgrams(0)`; n-grams need at least one character.
    ZeroNgram,
    /// Character n-grams with a shingle width other than 1: n-grams are
    /// already overlapping windows, so widen `n` instead.
    ShingledNgrams {
        /// The shingle width that was asked for.
        shingle: usize,
    },
    /// The tokenizer needs a crate feature this build does not have.
    FeatureDisabled {
        /// The tokenizer asked for.
        tokenizer: Tokenizer,
        /// The crate feature that provides it.
        feature: &'static str,
    },
    /// A configuration written by a different fingerprint algorithm version.
    UnsupportedVersion {
        /// The version this build implements.
        supported: u32,
        /// The version found.
        got: u32,
    },
    /// A tokenizer, weighting or configuration string that does not parse.
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The offending input.
        input: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// The configuration weights features by an IDF table, which a
    /// configuration string does not contain: use
    /// [`Simhasher::from_config_with_idf`](super::Simhasher::from_config_with_idf).
    IdfRequired {
        /// Checksum of the table the configuration was made with.
        checksum: u64,
    },
    /// An IDF table was supplied for a configuration that uses none.
    IdfNotUsed,
    /// The supplied IDF table is not the one the configuration was made with.
    IdfMismatch {
        /// Checksum recorded in the configuration.
        expected: u64,
        /// Checksum of the supplied table.
        got: u64,
    },
    /// An idf value that is negative, NaN or infinite.
    InvalidIdf {
        /// The offending value.
        value: f64,
    },
}

impl fmt::Display for FingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintError::ZeroShingle => {
                f.write_str("shingle width must be at least 1 (1 means single tokens)")
            }
            FingerprintError::ZeroNgram => {
                f.write_str("character n-gram size must be at least 1 (e.g. `chars:3`)")
            }
            FingerprintError::ShingledNgrams { shingle } => write!(
                f,
                "character n-grams cannot be shingled (shingle width {shingle}); \
                 use shingle width 1 and a larger n-gram size instead"
            ),
            FingerprintError::FeatureDisabled { tokenizer, feature } => write!(
                f,
                "the `{tokenizer}` tokenizer needs simhashdb to be built with the `{feature}` feature"
            ),
            FingerprintError::UnsupportedVersion { supported, got } => write!(
                f,
                "fingerprint configuration version {got} is not supported \
                 (this build implements version {supported})"
            ),
            FingerprintError::Parse {
                what,
                input,
                expected,
            } => write!(f, "invalid {what} {input:?}: expected {expected}"),
            FingerprintError::IdfRequired { checksum } => write!(
                f,
                "the fingerprint configuration uses an IDF table (checksum {checksum:016x}); \
                 supply that table"
            ),
            FingerprintError::IdfNotUsed => {
                f.write_str("an IDF table was supplied but the fingerprint configuration uses none")
            }
            FingerprintError::IdfMismatch { expected, got } => write!(
                f,
                "IDF table checksum mismatch: the configuration expects {expected:016x}, \
                 the supplied table has {got:016x}"
            ),
            FingerprintError::InvalidIdf { value } => write!(
                f,
                "invalid idf value {value}: idf values must be finite and non-negative"
            ),
        }
    }
}

impl std::error::Error for FingerprintError {}
