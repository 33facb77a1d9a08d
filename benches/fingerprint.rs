//! Fingerprinting throughput (bytes of text per second) on real English and
//! Chinese text, for the default configuration and the common alternatives.
//!
//! `cargo bench --bench fingerprint` runs every case; the corpora are the
//! test fixtures: the Apache License 2.0 (11 KB, one document, and repeated
//! to about 100 KB) and Chinese prose (6 KB, repeated to about 100 KB).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput};
use simhashdb::fingerprint::{FeatureHash, Simhasher, Tokenizer, Weighting};

const APACHE: &str = include_str!("../tests/data/apache-2.0.txt");
const ZH_PROSE: &str = include_str!("../tests/data/zh-prose.txt");

/// `text` repeated (separated by blank lines) until it is at least `bytes` long.
fn repeated(text: &str, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + text.len());
    while out.len() < bytes {
        out.push_str(text);
        out.push_str("\n\n");
    }
    out
}

fn hasher(
    tokenizer: Tokenizer,
    shingle: usize,
    weighting: Weighting,
    hash: FeatureHash,
) -> Simhasher {
    Simhasher::builder()
        .tokenizer(tokenizer)
        .shingle(shingle)
        .weighting(weighting)
        .hash(hash)
        .build()
        .expect("valid config")
}

fn bench_group(
    c: &mut Criterion,
    group: &str,
    corpora: &[(&str, String)],
    configs: &[(&str, Simhasher)],
) {
    let mut g = c.benchmark_group(group);
    for (corpus, text) in corpora {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for (name, h) in configs {
            // Warm the jieba dictionary outside the measurement.
            black_box(h.fingerprint(text));
            g.bench_with_input(BenchmarkId::new(*name, corpus), text, |b, text| {
                b.iter(|| h.fingerprint(black_box(text)))
            });
        }
    }
    g.finish();
}

fn english(c: &mut Criterion) {
    let corpora = [
        ("apache-11KB", APACHE.to_owned()),
        ("apache-100KB", repeated(APACHE, 100_000)),
    ];
    let hash = FeatureHash::default();
    let configs = [
        ("words", Simhasher::default()),
        (
            "words-shingle3",
            hasher(Tokenizer::Words, 3, Weighting::TermFrequency, hash),
        ),
        (
            "words-binary",
            hasher(Tokenizer::Words, 1, Weighting::Binary, hash),
        ),
        (
            "words-plain-fnv1a64",
            hasher(
                Tokenizer::Words,
                1,
                Weighting::TermFrequency,
                FeatureHash::Fnv1a64,
            ),
        ),
        (
            "letters",
            hasher(Tokenizer::Letters, 1, Weighting::TermFrequency, hash),
        ),
        (
            "chars3",
            hasher(Tokenizer::CharNgrams(3), 1, Weighting::TermFrequency, hash),
        ),
    ];
    bench_group(c, "fingerprint/english", &corpora, &configs);
}

fn chinese(c: &mut Criterion) {
    let corpora = [("zh-prose-100KB", repeated(ZH_PROSE, 100_000))];
    let hash = FeatureHash::default();
    let configs = [
        (
            "chinese",
            hasher(Tokenizer::Chinese, 1, Weighting::TermFrequency, hash),
        ),
        (
            "chinese-shingle3",
            hasher(Tokenizer::Chinese, 3, Weighting::TermFrequency, hash),
        ),
        ("words", Simhasher::default()),
        (
            "chars3",
            hasher(Tokenizer::CharNgrams(3), 1, Weighting::TermFrequency, hash),
        ),
    ];
    bench_group(c, "fingerprint/chinese", &corpora, &configs);
}

criterion::criterion_group!(benches, english, chinese);
criterion::criterion_main!(benches);
