//! The verification values compared: what each document would store next
//! to its fingerprint, and the similarity two stored values estimate.

use simhashdb::Simhasher;
use simhashdb::Weighting;
use simhashdb::fingerprint::{Tokenizer, fmix64};
use simhashdb::recheck::ShingleSet;

/// One kind of stored value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    /// A second 64-bit simhash of word `shingle`-shingles (default
    /// tokenizer), term-frequency or binary weights; compared by Hamming
    /// distance.
    Simhash { shingle: usize, binary: bool },
    /// b-bit MinHash of the word 5-shingles: `bins` minima by one permutation
    /// hashing with optimal densification (as `recheck::MinHashBands`), the
    /// lowest `bits` bits of each kept; compared by the share of equal bins,
    /// corrected for chance collisions of b bits (Li and König, 2010).
    BBit { bins: usize, bits: u32 },
}

impl Kind {
    pub(crate) fn all() -> Vec<Kind> {
        vec![
            Kind::Simhash {
                shingle: 3,
                binary: false,
            },
            Kind::Simhash {
                shingle: 3,
                binary: true,
            },
            Kind::Simhash {
                shingle: 5,
                binary: true,
            },
            Kind::BBit { bins: 16, bits: 8 },
            Kind::BBit { bins: 32, bits: 4 },
            Kind::BBit { bins: 64, bits: 2 },
            Kind::BBit { bins: 128, bits: 1 },
            Kind::BBit { bins: 16, bits: 4 },
            Kind::BBit { bins: 32, bits: 2 },
        ]
    }

    pub(crate) fn name(self) -> String {
        match self {
            Kind::Simhash { shingle, binary } => format!(
                "simhash of word {shingle}-shingles, {}",
                if binary { "binary" } else { "tf" }
            ),
            Kind::BBit { bins, bits } => format!("MinHash {bins} × {bits} bits"),
        }
    }

    pub(crate) fn short(self) -> String {
        match self {
            Kind::Simhash { shingle, binary } => {
                format!("sim{shingle}{}", if binary { "b" } else { "" })
            }
            Kind::BBit { bins, bits } => format!("mh{bins}x{bits}"),
        }
    }

    pub(crate) fn bytes(self) -> usize {
        match self {
            Kind::Simhash { .. } => 8,
            Kind::BBit { bins, bits } => (bins * bits as usize).div_ceil(8),
        }
    }

    /// Thresholds tried: the largest distance (simhash) or the smallest
    /// estimated Jaccard, in hundredths (MinHash).
    pub(crate) fn thresholds(self) -> &'static [u32] {
        match self {
            Kind::Simhash { .. } => &[6, 8, 10, 12, 14],
            Kind::BBit { .. } => &[40, 50, 60, 70, 80],
        }
    }

    pub(crate) fn threshold_label(self, t: u32) -> String {
        match self {
            Kind::Simhash { .. } => format!("d2 <= {t}"),
            Kind::BBit { .. } => format!("Ĵ >= {:.2}", f64::from(t) / 100.0),
        }
    }
}

/// A document's value of one kind.
#[derive(Clone, Debug)]
pub(crate) enum Value {
    Simhash(u64),
    /// One entry per bin (its low `bits` bits); empty for a text without
    /// shingles.
    Bins(Vec<u8>),
}

/// Computes values from texts.
pub(crate) struct Maker {
    words: Simhasher,
    simhashers: Vec<(usize, bool, Simhasher)>,
}

impl Maker {
    pub(crate) fn new() -> Maker {
        let mut simhashers = Vec::new();
        for k in Kind::all() {
            if let Kind::Simhash { shingle, binary } = k {
                let h = Simhasher::builder()
                    .tokenizer(Tokenizer::Words)
                    .shingle(shingle)
                    .weighting(if binary {
                        Weighting::Binary
                    } else {
                        Weighting::TermFrequency
                    })
                    .build()
                    .expect("valid");
                simhashers.push((shingle, binary, h));
            }
        }
        Maker {
            words: Simhasher::default(),
            simhashers,
        }
    }

    /// The word 5-shingle hashes of `text` (the default tokenizer's words).
    pub(crate) fn shingles(&self, text: &str) -> ShingleSet {
        ShingleSet::from_text(&self.words, text, 5)
    }

    pub(crate) fn value(&self, kind: Kind, text: &str, shingles: &ShingleSet) -> Value {
        match kind {
            Kind::Simhash { shingle, binary } => {
                let h = &self
                    .simhashers
                    .iter()
                    .find(|(s, b, _)| *s == shingle && *b == binary)
                    .expect("made")
                    .2;
                Value::Simhash(h.fingerprint(text))
            }
            Kind::BBit { bins, bits } => Value::Bins(bbit(shingles.hashes(), bins, bits)),
        }
    }
}

/// The similarity two values estimate: for a simhash, the Hamming distance
/// (as a negative number, so that larger is closer); for MinHash, the
/// estimated Jaccard in [0, 1] (clamped).
pub(crate) fn similarity(kind: Kind, a: &Value, b: &Value) -> f64 {
    match (a, b) {
        (Value::Simhash(x), Value::Simhash(y)) => -f64::from((x ^ y).count_ones()),
        (Value::Bins(x), Value::Bins(y)) => {
            let Kind::BBit { bits, .. } = kind else {
                unreachable!()
            };
            if x.is_empty() || y.is_empty() {
                return if x.is_empty() && y.is_empty() {
                    1.0
                } else {
                    0.0
                };
            }
            let equal = x.iter().zip(y).filter(|(p, q)| p == q).count();
            estimate(equal, x.len(), bits)
        }
        _ => unreachable!("values of one kind"),
    }
}

/// Whether a similarity passes threshold `t` of `kind`.
pub(crate) fn passes(kind: Kind, sim: f64, t: u32) -> bool {
    match kind {
        Kind::Simhash { .. } => -sim <= f64::from(t),
        Kind::BBit { .. } => sim >= f64::from(t) / 100.0 - 1e-9,
    }
}

/// Li and König's estimator with sets much smaller than the hash space:
/// two bins agree by chance with probability 2^-b, so
/// P(equal) = J + (1 − J) 2^-b and Ĵ = (P̂ − 2^-b) / (1 − 2^-b).
pub(crate) fn estimate(equal: usize, bins: usize, bits: u32) -> f64 {
    let c = 0.5f64.powi(bits as i32);
    let p = equal as f64 / bins as f64;
    ((p - c) / (1.0 - c)).clamp(0.0, 1.0)
}

/// b-bit one-permutation MinHash of a set of well-mixed 64-bit hashes.
pub(crate) fn bbit(hashes: &[u64], bins: usize, bits: u32) -> Vec<u8> {
    if hashes.is_empty() {
        return Vec::new();
    }
    let mut mins = vec![u64::MAX; bins];
    let mut filled = vec![false; bins];
    for &x in hashes {
        let y = fmix64(x ^ 0x5851_f42d_4c95_7f2d);
        let bin = ((u128::from(y) * bins as u128) >> 64) as usize;
        mins[bin] = mins[bin].min(y);
        filled[bin] = true;
    }
    let mask = ((1u32 << bits) - 1) as u8;
    (0..bins)
        .map(|i| {
            let v = if filled[i] {
                mins[i]
            } else {
                // Optimal densification: the first filled bin on bin i's own
                // probe sequence.
                let mut attempt = 1u64;
                loop {
                    let j = ((u128::from(fmix64(((i as u64) << 32) | attempt)) * bins as u128)
                        >> 64) as usize;
                    if filled[j] {
                        break mins[j];
                    }
                    attempt += 1;
                }
            };
            // The bits kept are hashed with the bin's number: a bin that
            // copied another's minimum then collides by chance
            // independently of it (for a set with fewer shingles than
            // bins, most bins are copies).
            (fmix64(v ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) as u8) & mask
        })
        .collect()
}
