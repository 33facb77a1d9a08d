//! Statistical behaviour of fingerprints on real text, with fixed seeds.
//!
//! Similar texts must land a few bits apart and unrelated texts about 32
//! bits apart (half of 64). The bounds below were calibrated by running the
//! tests and printing the measured means (run with `--nocapture`); they leave
//! a margin, but the seeds are fixed, so the measured values are exact and
//! reproducible.

mod common;

use simhashdb::fingerprint::{FeatureHash, Simhasher, Tokenizer};
use simhashdb::hamming;

use common::Rng;

/// The Apache License 2.0, verbatim (1581 words).
const APACHE: &str = include_str!("data/apache-2.0.txt");
/// The Mozilla Public License 2.0, verbatim (2435 words).
const MPL: &str = include_str!("data/mpl-2.0.txt");

fn hasher(tokenizer: Tokenizer, shingle: usize, hash: FeatureHash) -> Simhasher {
    Simhasher::builder()
        .tokenizer(tokenizer)
        .shingle(shingle)
        .hash(hash)
        .build()
        .expect("valid config")
}

/// Distinct lower-cased words of both licenses, in a seeded random order.
fn shuffled_vocabulary(rng: &mut Rng) -> Vec<String> {
    let words = Simhasher::default();
    let mut vocab = words.tokens(APACHE);
    vocab.extend(words.tokens(MPL));
    vocab.retain(|w| w.chars().all(char::is_alphabetic));
    vocab.sort();
    vocab.dedup();
    for i in (1..vocab.len()).rev() {
        vocab.swap(i, rng.index(i + 1));
    }
    vocab
}

/// Mean Hamming distance between the fingerprint of `text` and that of a
/// copy with `replaced` random word positions replaced by random other
/// words, over `edits` seeded edits.
fn mean_edit_distance(h: &Simhasher, text: &str, replaced: usize, edits: usize, seed: u64) -> f64 {
    let mut rng = Rng(seed);
    let vocab = shuffled_vocabulary(&mut rng);
    let words: Vec<&str> = text.split_whitespace().collect();
    let original = h.fingerprint(&words.join(" "));
    let mut total = 0u64;
    for _ in 0..edits {
        let mut edited = words.clone();
        for _ in 0..replaced {
            let i = rng.index(words.len());
            edited[i] = loop {
                let w = &vocab[rng.index(vocab.len())];
                if !words[i].eq_ignore_ascii_case(w) {
                    break w.as_str();
                }
            };
        }
        total += u64::from(hamming(original, h.fingerprint(&edited.join(" "))));
    }
    total as f64 / edits as f64
}

/// Mean Hamming distance between pairs of random texts of `len` words that
/// share no word: one drawn from each half of the vocabulary.
fn mean_unrelated_word_texts(h: &Simhasher, pairs: usize, len: usize, seed: u64) -> f64 {
    let mut rng = Rng(seed);
    let vocab = shuffled_vocabulary(&mut rng);
    let (left, right) = vocab.split_at(vocab.len() / 2);
    let text = |half: &[String], rng: &mut Rng| {
        (0..len)
            .map(|_| half[rng.index(half.len())].as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut total = 0u64;
    for _ in 0..pairs {
        let a = h.fingerprint(&text(left, &mut rng));
        let b = h.fingerprint(&text(right, &mut rng));
        total += u64::from(hamming(a, b));
    }
    total as f64 / pairs as f64
}

/// Mean Hamming distance between pairs of texts of `len` random "words" of
/// 2–8 random letters.
fn mean_random_letter_texts(h: &Simhasher, pairs: usize, len: usize, seed: u64) -> f64 {
    let mut rng = Rng(seed);
    let text = |rng: &mut Rng| {
        let mut s = String::new();
        for _ in 0..len {
            let n = 2 + rng.index(7);
            s.extend((0..n).map(|_| char::from(b'a' + rng.index(26) as u8)));
            s.push(' ');
        }
        s
    };
    let mut total = 0u64;
    for _ in 0..pairs {
        let a = h.fingerprint(&text(&mut rng));
        let b = h.fingerprint(&text(&mut rng));
        total += u64::from(hamming(a, b));
    }
    total as f64 / pairs as f64
}

/// Mean distance between 200-word chunks of the Apache license and 200-word
/// chunks of the MPL: unrelated documents of the same genre.
fn mean_cross_license_chunks(h: &Simhasher) -> f64 {
    let chunks = |text: &str| -> Vec<String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        words.chunks_exact(200).map(|c| c.join(" ")).collect()
    };
    let apache: Vec<u64> = chunks(APACHE).iter().map(|c| h.fingerprint(c)).collect();
    let mpl: Vec<u64> = chunks(MPL).iter().map(|c| h.fingerprint(c)).collect();
    let mut total = 0u64;
    for &a in &apache {
        for &m in &mpl {
            total += u64::from(hamming(a, m));
        }
    }
    total as f64 / (apache.len() * mpl.len()) as f64
}

#[test]
fn fixtures_are_real_texts_of_useful_size() {
    assert!(APACHE.split_whitespace().count() >= 1000);
    assert!(MPL.split_whitespace().count() >= 1000);
    assert!(APACHE.starts_with("\n                                 Apache License"));
}

#[test]
fn one_word_edit_moves_few_bits() {
    // The first 200 words of the Apache license: one edited word in 200.
    let chunk = APACHE
        .split_whitespace()
        .take(200)
        .collect::<Vec<_>>()
        .join(" ");
    // (tokenizer, shingle, hash, max mean for the whole text, max mean for
    // 200 words, min mean with a third replaced). Measured means, in order:
    // words/1/fnv1a64         0.000  1.015   6.020
    // words/3/fnv1a64         0.985  3.565  23.560
    // words/1/fnv1a64-fmix64  0.000  1.195  10.640
    // words/3/fnv1a64-fmix64  1.975  4.825  23.740
    // chars:3/fnv1a64         0.000  0.000   3.500
    // chars:3/fnv1a64-fmix64  0.000  1.610   9.700
    let cases = [
        (Tokenizer::Words, 1, FeatureHash::Fnv1a64, 1.0, 2.5, 4.0),
        (Tokenizer::Words, 3, FeatureHash::Fnv1a64, 2.5, 6.0, 16.0),
        (
            Tokenizer::Words,
            1,
            FeatureHash::Fnv1a64Fmix64,
            1.0,
            2.5,
            7.0,
        ),
        (
            Tokenizer::Words,
            3,
            FeatureHash::Fnv1a64Fmix64,
            3.5,
            7.0,
            16.0,
        ),
        (
            Tokenizer::CharNgrams(3),
            1,
            FeatureHash::Fnv1a64,
            1.0,
            1.5,
            2.0,
        ),
        (
            Tokenizer::CharNgrams(3),
            1,
            FeatureHash::Fnv1a64Fmix64,
            1.0,
            3.0,
            6.0,
        ),
    ];
    for (tokenizer, shingle, hash, max_whole, max_chunk, min_third) in cases {
        let h = hasher(tokenizer, shingle, hash);
        let whole = mean_edit_distance(&h, APACHE, 1, 200, 0x5eed_0001);
        let part = mean_edit_distance(&h, &chunk, 1, 200, 0x5eed_0001);
        // Replacing a third of the words must move the fingerprint far: the
        // one-word bounds are not met merely because nothing ever moves.
        let third = mean_edit_distance(&h, &chunk, 67, 50, 0x5eed_0001);
        println!(
            "{}: one-word edit mean {whole:.3} bits (whole text), {part:.3} bits (200 words); \
             a third of the words replaced: {third:.3} bits",
            h.config()
        );
        assert!(
            whole <= max_whole,
            "{}: whole-text mean {whole:.3}",
            h.config()
        );
        assert!(part <= max_chunk, "{}: 200-word mean {part:.3}", h.config());
        assert!(
            third >= min_third,
            "{}: a third replaced moved only {third:.3}",
            h.config()
        );
    }
}

/// Measured means: fnv1a64 29.900 (shingle 1), 31.772 (shingle 3);
/// fnv1a64-fmix64 32.874, 31.964.
#[test]
fn unrelated_word_texts_differ_in_about_half_the_bits() {
    for hash in [FeatureHash::Fnv1a64, FeatureHash::Fnv1a64Fmix64] {
        for shingle in [1, 3] {
            let h = hasher(Tokenizer::Words, shingle, hash);
            let mean = mean_unrelated_word_texts(&h, 500, 100, 0x5eed_0002);
            println!("unrelated word texts, {}: mean {mean:.3} bits", h.config());
            assert!(
                (28.0..=36.0).contains(&mean),
                "{}: mean {mean:.3}",
                h.config()
            );
        }
    }
}

/// Random short words expose plain FNV-1a's weak mixing (see `FeatureHash`).
/// Measured means: fnv1a64 22.772, fnv1a64-fmix64 32.312.
#[test]
fn random_letter_texts() {
    let fnv = mean_random_letter_texts(
        &hasher(Tokenizer::Words, 1, FeatureHash::Fnv1a64),
        500,
        100,
        0x5eed_0003,
    );
    let fmix = mean_random_letter_texts(
        &hasher(Tokenizer::Words, 1, FeatureHash::Fnv1a64Fmix64),
        500,
        100,
        0x5eed_0003,
    );
    println!("random letter texts: fnv1a64 mean {fnv:.3}, fnv1a64-fmix64 mean {fmix:.3}");
    assert!(
        (28.0..=36.0).contains(&fmix),
        "fnv1a64-fmix64: mean {fmix:.3}"
    );
    assert!(fnv < fmix - 4.0);
}

/// Unrelated documents of one genre share their frequent words, which
/// dominate term-frequency weights of single words; shingles do not share.
/// Measured means:
/// words/1 fnv1a64 14.440, fnv1a64-fmix64 17.869;
/// words/3 fnv1a64 31.667, fnv1a64-fmix64 31.250;
/// chars:3 fnv1a64 9.345, fnv1a64-fmix64 20.655.
#[test]
fn cross_license_chunks() {
    for (tokenizer, shingle, min_fnv, min_fmix) in [
        (Tokenizer::Words, 1, 11.0, 14.0),
        (Tokenizer::Words, 3, 28.0, 28.0),
        (Tokenizer::CharNgrams(3), 1, 6.0, 16.0),
    ] {
        let fnv = mean_cross_license_chunks(&hasher(tokenizer, shingle, FeatureHash::Fnv1a64));
        let fmix =
            mean_cross_license_chunks(&hasher(tokenizer, shingle, FeatureHash::Fnv1a64Fmix64));
        println!(
            "apache vs mpl 200-word chunks, {tokenizer} shingle={shingle}: \
             fnv1a64 mean {fnv:.3} bits, fnv1a64-fmix64 mean {fmix:.3} bits"
        );
        assert!(
            (min_fnv..=36.0).contains(&fnv),
            "{tokenizer}/{shingle}: {fnv:.3}"
        );
        assert!(
            (min_fmix..=36.0).contains(&fmix),
            "{tokenizer}/{shingle}: {fmix:.3}"
        );
    }
}

/// Chinese prose (original text written for these tests, 2094 characters).
#[cfg(feature = "chinese")]
const ZH_PROSE: &str = include_str!("data/zh-prose.txt");

/// The Chinese tokenizer on Chinese prose: replacing one word (as jieba cuts
/// the text) moves few bits; random word sequences over disjoint halves of
/// the vocabulary differ in about 32. Measured means (one-word edit,
/// unrelated): shingle 1 fnv1a64 0.260, 25.113; shingle 3 fnv1a64 2.490,
/// 31.960; shingle 1 fnv1a64-fmix64 0.315, 31.587; shingle 3 fnv1a64-fmix64
/// 1.790, 31.840.
#[cfg(feature = "chinese")]
#[test]
fn chinese_edits_and_unrelated_texts() {
    let cases = [
        // Plain FNV-1a on single Chinese words (3–12 bytes of UTF-8 with
        // similar lead bytes) shows the same weak mixing as short Latin words.
        (1, FeatureHash::Fnv1a64, 1.0, 22.0..=36.0),
        (3, FeatureHash::Fnv1a64, 4.0, 28.0..=36.0),
        (1, FeatureHash::Fnv1a64Fmix64, 1.0, 28.0..=36.0),
        (3, FeatureHash::Fnv1a64Fmix64, 3.5, 28.0..=36.0),
    ];
    for (shingle, hash, max_edit, bounds) in cases {
        let h = hasher(Tokenizer::Chinese, shingle, hash);
        let tokens = h.tokens(ZH_PROSE);
        assert!(tokens.len() >= 1000, "{} tokens", tokens.len());
        let mut vocab = tokens.clone();
        vocab.sort();
        vocab.dedup();
        let mut rng = Rng(0x5eed_0004);
        for i in (1..vocab.len()).rev() {
            vocab.swap(i, rng.index(i + 1));
        }

        let original = h.fingerprint(&tokens.concat());
        let edits = 200;
        let mut total = 0u64;
        for _ in 0..edits {
            let i = rng.index(tokens.len());
            let mut edited = tokens.clone();
            edited[i] = loop {
                let w = &vocab[rng.index(vocab.len())];
                if *w != tokens[i] {
                    break w.clone();
                }
            };
            total += u64::from(hamming(original, h.fingerprint(&edited.concat())));
        }
        let edit_mean = total as f64 / edits as f64;

        let (left, right) = vocab.split_at(vocab.len() / 2);
        let text = |half: &[String], rng: &mut Rng| -> String {
            (0..200)
                .map(|_| half[rng.index(half.len())].as_str())
                .collect()
        };
        let pairs = 300;
        let mut total = 0u64;
        for _ in 0..pairs {
            let a = h.fingerprint(&text(left, &mut rng));
            let b = h.fingerprint(&text(right, &mut rng));
            total += u64::from(hamming(a, b));
        }
        let unrelated_mean = total as f64 / pairs as f64;
        println!(
            "{}: one-word edit mean {edit_mean:.3} bits, unrelated mean {unrelated_mean:.3} bits",
            h.config()
        );
        assert!(
            edit_mean <= max_edit,
            "{}: edit mean {edit_mean:.3}",
            h.config()
        );
        assert!(
            bounds.contains(&unrelated_mean),
            "{}: {unrelated_mean:.3}",
            h.config()
        );
    }
}
