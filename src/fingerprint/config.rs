//! The recorded description of how fingerprints are computed.

use std::fmt;
use std::str::FromStr;

use super::{FeatureHash, FingerprintError, Tokenizer, Weighting};

/// Version of the fingerprint algorithm: tokenizers, shingling, weighting,
/// feature hash and vote as this build implements them.
///
/// Fingerprints are compared across years of stored data, so the fingerprint
/// of a given text under a given configuration never changes within a
/// version; any change to the algorithm needs a new version number.
pub const FINGERPRINT_CONFIG_VERSION: u32 = 1;

/// Everything that determines a fingerprint: algorithm version, tokenizer,
/// shingle width, weighting, feature hash, and the checksum of the IDF table
/// if one is used.
///
/// Its [`Display`](fmt::Display) form is a single line that [`FromStr`]
/// parses back to an equal value, for storing next to fingerprints:
///
/// ```text
/// v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64
/// v1 tokenizer=chars:3 shingle=1 weighting=binary hash=fnv1a64-fmix64 idf=0123456789abcdef
/// ```
///
/// `idf=` (16 lower-case hex digits) is present only when an IDF table is
/// used. Parsing accepts the keys in any order separated by ASCII whitespace,
/// each exactly once; an unknown version is
/// [`FingerprintError::UnsupportedVersion`]. Compare configurations with
/// `==`, not as strings.
///
/// ```
/// use simhashdb::fingerprint::{FingerprintConfig, Simhasher, Tokenizer};
///
/// let hasher = Simhasher::builder().tokenizer(Tokenizer::Letters).shingle(3).build()?;
/// let line = hasher.config().to_string();
/// assert_eq!(line, "v1 tokenizer=letters shingle=3 weighting=tf hash=fnv1a64-fmix64");
///
/// let config: FingerprintConfig = line.parse()?;
/// let again = Simhasher::from_config(&config)?;
/// assert_eq!(again.fingerprint("Some text"), hasher.fingerprint("Some text"));
/// # Ok::<(), simhashdb::fingerprint::FingerprintError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FingerprintConfig {
    version: u32,
    tokenizer: Tokenizer,
    shingle: usize,
    weighting: Weighting,
    hash: FeatureHash,
    idf_checksum: Option<u64>,
}

impl FingerprintConfig {
    pub(crate) fn new(
        tokenizer: Tokenizer,
        shingle: usize,
        weighting: Weighting,
        hash: FeatureHash,
        idf_checksum: Option<u64>,
    ) -> Self {
        FingerprintConfig {
            version: FINGERPRINT_CONFIG_VERSION,
            tokenizer,
            shingle,
            weighting,
            hash,
            idf_checksum,
        }
    }

    /// The algorithm version ([`FINGERPRINT_CONFIG_VERSION`] for every value
    /// this build creates or parses).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> Tokenizer {
        self.tokenizer
    }

    /// The shingle width (1 = single tokens).
    pub fn shingle(&self) -> usize {
        self.shingle
    }

    /// The weighting.
    pub fn weighting(&self) -> Weighting {
        self.weighting
    }

    /// The feature hash.
    pub fn hash(&self) -> FeatureHash {
        self.hash
    }

    /// The [`IdfTable::checksum`](super::IdfTable::checksum) of the IDF
    /// table, if one is used.
    pub fn idf_checksum(&self) -> Option<u64> {
        self.idf_checksum
    }
}

impl fmt::Display for FingerprintConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "v{} tokenizer={} shingle={} weighting={} hash={}",
            self.version, self.tokenizer, self.shingle, self.weighting, self.hash
        )?;
        if let Some(checksum) = self.idf_checksum {
            write!(f, " idf={checksum:016x}")?;
        }
        Ok(())
    }
}

const CONFIG_EXPECTED: &str = "`v1 tokenizer=<name> shingle=<n> weighting=<tf|binary> \
                               hash=<fnv1a64|fnv1a64-fmix64> [idf=<16 hex digits>]`";

impl FromStr for FingerprintConfig {
    type Err = FingerprintError;

    /// Parses the [`Display`](fmt::Display) form; see the type's docs.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |expected: &'static str| FingerprintError::Parse {
            what: "fingerprint configuration",
            input: s.to_owned(),
            expected,
        };
        let mut fields = s.split_ascii_whitespace();
        let version = fields
            .next()
            .and_then(|v| v.strip_prefix('v'))
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| bad(CONFIG_EXPECTED))?;
        let version: u32 = version.parse().map_err(|_| bad(CONFIG_EXPECTED))?;
        if version != FINGERPRINT_CONFIG_VERSION {
            return Err(FingerprintError::UnsupportedVersion {
                supported: FINGERPRINT_CONFIG_VERSION,
                got: version,
            });
        }

        let mut tokenizer = None;
        let mut shingle = None;
        let mut weighting = None;
        let mut hash = None;
        let mut idf = None;
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| bad("`key=value` fields after the version"))?;
            let duplicate = match key {
                "tokenizer" => tokenizer.replace(value.parse::<Tokenizer>()?).is_some(),
                "shingle" => shingle.replace(parse_shingle(value)?).is_some(),
                "weighting" => weighting.replace(value.parse::<Weighting>()?).is_some(),
                "hash" => hash.replace(value.parse::<FeatureHash>()?).is_some(),
                "idf" => idf.replace(parse_checksum(value)?).is_some(),
                _ => {
                    return Err(bad(
                        "only the keys tokenizer, shingle, weighting, hash and idf",
                    ));
                }
            };
            if duplicate {
                return Err(bad("each key at most once"));
            }
        }
        let (Some(tokenizer), Some(shingle), Some(weighting), Some(hash)) =
            (tokenizer, shingle, weighting, hash)
        else {
            return Err(bad("all of tokenizer=, shingle=, weighting= and hash="));
        };
        super::validate(tokenizer, shingle, false)?;
        Ok(FingerprintConfig {
            version,
            tokenizer,
            shingle,
            weighting,
            hash,
            idf_checksum: idf,
        })
    }
}

fn parse_shingle(value: &str) -> Result<usize, FingerprintError> {
    let bad = || FingerprintError::Parse {
        what: "shingle width",
        input: value.to_owned(),
        expected: "a decimal integer >= 1",
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    match value.parse::<usize>() {
        Ok(0) => Err(FingerprintError::ZeroShingle),
        Ok(n) => Ok(n),
        Err(_) => Err(bad()),
    }
}

fn parse_checksum(value: &str) -> Result<u64, FingerprintError> {
    let ok = value.len() == 16
        && value
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| u64::from_str_radix(value, 16).ok())
        .flatten()
        .ok_or_else(|| FingerprintError::Parse {
            what: "IDF table checksum",
            input: value.to_owned(),
            expected: "16 lower-case hex digits",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_from_str_round_trip() {
        let configs = [
            FingerprintConfig::new(
                Tokenizer::Words,
                1,
                Weighting::TermFrequency,
                FeatureHash::Fnv1a64,
                None,
            ),
            FingerprintConfig::new(
                Tokenizer::Letters,
                3,
                Weighting::Binary,
                FeatureHash::Fnv1a64Fmix64,
                None,
            ),
            FingerprintConfig::new(
                Tokenizer::Chinese,
                2,
                Weighting::TermFrequency,
                FeatureHash::Fnv1a64,
                Some(0),
            ),
            FingerprintConfig::new(
                Tokenizer::CharNgrams(4),
                1,
                Weighting::Binary,
                FeatureHash::Fnv1a64Fmix64,
                Some(0xfedc_ba98_7654_3210),
            ),
        ];
        for config in configs {
            let line = config.to_string();
            assert!(!line.contains('\n'));
            assert_eq!(line.parse::<FingerprintConfig>(), Ok(config), "{line}");
        }
    }

    #[test]
    fn display_format() {
        let c = FingerprintConfig::new(
            Tokenizer::Words,
            1,
            Weighting::TermFrequency,
            FeatureHash::Fnv1a64,
            None,
        );
        assert_eq!(
            c.to_string(),
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64"
        );
        let c = FingerprintConfig::new(
            Tokenizer::CharNgrams(3),
            1,
            Weighting::Binary,
            FeatureHash::Fnv1a64Fmix64,
            Some(0xab),
        );
        assert_eq!(
            c.to_string(),
            "v1 tokenizer=chars:3 shingle=1 weighting=binary hash=fnv1a64-fmix64 idf=00000000000000ab"
        );
    }

    #[test]
    fn parse_accepts_any_key_order_and_spacing() {
        let c: FingerprintConfig =
            "  v1\thash=fnv1a64 weighting=binary shingle=2   tokenizer=letters "
                .parse()
                .expect("valid");
        assert_eq!(
            c,
            FingerprintConfig::new(
                Tokenizer::Letters,
                2,
                Weighting::Binary,
                FeatureHash::Fnv1a64,
                None
            )
        );
    }

    #[test]
    fn unknown_version_is_an_error() {
        for (line, got) in [
            ("v2 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", 2),
            ("v0 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", 0),
            ("v4294967295", u32::MAX),
        ] {
            assert_eq!(
                line.parse::<FingerprintConfig>(),
                Err(FingerprintError::UnsupportedVersion { supported: 1, got })
            );
        }
    }

    #[test]
    fn bad_configs_are_errors() {
        for line in [
            "",
            "v1",
            "1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v+1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v99999999999 tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle=1 weighting=tf",
            "v1 tokenizer=words shingle=0 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle=-1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle= weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle=1 weighting=idf hash=fnv1a64",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fmix64",
            "v1 tokenizer=word shingle=1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=chars:0 shingle=1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=chars:3 shingle=2 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words tokenizer=words shingle=1 weighting=tf hash=fnv1a64",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 color=red",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 idf",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 idf=abc",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 idf=00000000000000AB",
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 idf=+0000000000000ab",
            "v1 tokenizer = words shingle=1 weighting=tf hash=fnv1a64",
        ] {
            assert!(
                line.parse::<FingerprintConfig>().is_err(),
                "{line:?} parsed"
            );
        }
    }
}
