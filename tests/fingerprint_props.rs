//! Property tests: no input text makes fingerprinting panic, and the
//! fingerprint always agrees with the vote over the reported features.

use proptest::prelude::*;
use simhashdb::fingerprint::{FeatureHash, Simhasher, Tokenizer, Weighting, simhash};

fn hashers() -> Vec<Simhasher> {
    let mut tokenizers = vec![
        Tokenizer::Words,
        Tokenizer::Letters,
        Tokenizer::CharNgrams(1),
        Tokenizer::CharNgrams(3),
    ];
    if cfg!(feature = "chinese") {
        tokenizers.push(Tokenizer::Chinese);
    }
    let mut out = Vec::new();
    for tokenizer in tokenizers {
        let shingles: &[usize] = match tokenizer {
            Tokenizer::CharNgrams(_) => &[1],
            _ => &[1, 2, 3],
        };
        for &shingle in shingles {
            for weighting in [Weighting::TermFrequency, Weighting::Binary] {
                for hash in [FeatureHash::Fnv1a64, FeatureHash::Fnv1a64Fmix64] {
                    out.push(
                        Simhasher::builder()
                            .tokenizer(tokenizer)
                            .shingle(shingle)
                            .weighting(weighting)
                            .hash(hash)
                            .build()
                            .expect("valid config"),
                    );
                }
            }
        }
    }
    out
}

/// Text mixing ASCII, Chinese, punctuation, whitespace, combining marks,
/// control and format characters, and arbitrary code points.
fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z0-9 .,'!?-]{0,12}",
        "[\u{4e00}-\u{4e80}，。！ ]{0,12}",
        Just("我们中出了一个叛徒".to_owned()),
        Just("\u{301}\u{200D}\u{FEFF}\u{0}\u{1F}\r\n\t".to_owned()),
        Just("ΣΑΣ İ ǅ Straße".to_owned()),
        any::<String>(),
    ];
    prop::collection::vec(piece, 0..8).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn fingerprint_is_the_vote_over_features(text in text()) {
        for h in hashers() {
            let fp = h.fingerprint(&text);
            prop_assert_eq!(fp, simhash(h.features(&text)), "{}", h.config());
            prop_assert_eq!(fp, h.fingerprint(&text));
            if h.features(&text).is_empty() {
                prop_assert_eq!(fp, 0);
            }
        }
    }

    #[test]
    fn fingerprint_checked_is_none_exactly_for_texts_without_features(text in text()) {
        for h in hashers() {
            let expected = (!h.features(&text).is_empty()).then(|| h.fingerprint(&text));
            prop_assert_eq!(h.fingerprint_checked(&text), expected, "{}", h.config());
        }
    }

    #[test]
    fn weights_match_the_weighting(text in text()) {
        for h in hashers() {
            let features = h.features(&text);
            let mut details = Vec::new();
            for f in h.feature_details(&text) {
                prop_assert_eq!(f.hash, h.config().hash().hash(f.text.as_bytes()));
                details.push((f.hash, f.weight));
            }
            prop_assert_eq!(&details, &features);
            for &(_, w) in &features {
                match h.config().weighting() {
                    Weighting::Binary => prop_assert_eq!(w, 1.0),
                    _ => prop_assert!(w >= 1.0 && w.fract() == 0.0),
                }
            }
        }
    }

    #[test]
    fn weighted_api_never_panics(
        features in prop::collection::vec((any::<Vec<u8>>(), any::<f64>()), 0..16)
    ) {
        let h = Simhasher::default();
        let fp = h.fingerprint_weighted(features.iter().map(|(f, w)| (f, *w)));
        let usable = features.iter().any(|(_, w)| w.is_finite() && *w > 0.0);
        if !usable {
            prop_assert_eq!(fp, 0);
        }
    }
}
