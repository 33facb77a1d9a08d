//! Golden fingerprints.
//!
//! THESE VALUES MUST NEVER CHANGE. Fingerprints are stored and compared
//! across years of data; a fingerprint that silently changes between
//! releases breaks every index built before it. If a test here fails, the
//! algorithm (tokenizers, Unicode tables, jieba's dictionary, shingling,
//! weighting, hashing or the vote) has changed: restore the old behaviour,
//! or keep it under the current `FINGERPRINT_CONFIG_VERSION` and put the new
//! behaviour under a new version with its own golden values.

use simhashdb::Simhasher;
use simhashdb::fingerprint::{
    FINGERPRINT_CONFIG_VERSION, FeatureHash, FingerprintConfig, IdfTable, Tokenizer, Weighting,
};

const ENGLISH: &str = "The quick brown fox jumps over the lazy dog. Pack my box with \
                       five dozen liquor jugs! How vexingly quick daft zebras jump.";
const CHINESE: &str =
    "我们中出了一个叛徒，他把消息告诉了敌人。今天北京的天气很好，我们去公园散步吧。";
const MIXED: &str = "我们使用Rust语言和SimHash算法来检测近似重复的网页（near-duplicate web pages），\
                     每天处理数百万个URL。Don't panic!";
const EMPTY: &str = "";
const WHITESPACE: &str = " \t\r\n \u{3000}\u{A0} \n";
const APACHE: &str = include_str!("data/apache-2.0.txt");
const ZH_PROSE: &str = include_str!("data/zh-prose.txt");

/// About 1 MB of varied English sentences, generated deterministically.
fn long_text() -> String {
    const SUBJECTS: [&str; 7] = [
        "The crawler",
        "A reader",
        "Our index",
        "The old server",
        "Every shard",
        "This segment",
        "The merge",
    ];
    const VERBS: [&str; 5] = ["fetched", "compared", "stored", "rejected", "compacted"];
    const OBJECTS: [&str; 6] = [
        "page",
        "fingerprint",
        "document",
        "table",
        "block",
        "manifest",
    ];
    let mut text = String::with_capacity(1 << 20);
    let mut i: u64 = 0;
    while text.len() < 1 << 20 {
        let s = SUBJECTS[(i % 7) as usize];
        let v = VERBS[(i / 7 % 5) as usize];
        let o = OBJECTS[(i * 13 % 6) as usize];
        text.push_str(&format!(
            "{s} {v} {o} number {} on day {} before noon. ",
            i * 7919 % 100_003,
            i % 365
        ));
        if i.is_multiple_of(11) {
            text.push('\n');
        }
        i += 1;
    }
    text
}

fn hasher(config: &str) -> Simhasher {
    let config: FingerprintConfig = config.parse().expect("golden config parses");
    Simhasher::from_config(&config).expect("golden config builds")
}

/// `(config, text name, fingerprint)`.
#[rustfmt::skip]
const GOLDEN: &[(&str, &str, u64)] = &[
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "english", 0xca2f_191d_7461_c5dd),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "chinese", 0x1b5d_d01b_6681_6bd7),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "mixed", 0x3e40_191b_6500_2a3f),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "empty", 0),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "whitespace", 0),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "apache", 0x0cf0_5c0d_3555_f1a4),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "zh-prose", 0x1a55_d51b_6680_2dd1),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64", "long", 0x08b0_b809_f566_eb76),
    ("v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64", "english", 0x1182_f488_c1f0_9a40),
    ("v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64", "mixed", 0x6e93_74df_e033_001c),
    ("v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64", "apache", 0x58ea_2eed_5bbd_3d7f),
    ("v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64", "long", 0x404c_c9e0_daff_1ffc),
    ("v1 tokenizer=words shingle=2 weighting=tf hash=fnv1a64", "empty", 0),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64", "english", 0x0ac1_da5b_097f_d58e),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64", "mixed", 0x8a2a_2ce0_7935_1da5),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64", "apache", 0x10d0_3ef2_8914_d47a),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64", "long", 0xa5b7_32ba_fbeb_f08d),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64", "whitespace", 0),
    ("v1 tokenizer=words shingle=1 weighting=binary hash=fnv1a64", "english", 0xea2f_191d_7c70_c0cd),
    ("v1 tokenizer=words shingle=1 weighting=binary hash=fnv1a64", "apache", 0x0ef3_8c0d_3541_e080),
    ("v1 tokenizer=words shingle=3 weighting=binary hash=fnv1a64", "apache", 0x34d0_36e2_c994_d43a),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64", "english", 0xca2f_191d_7461_c5dd),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64", "mixed", 0xeea1_e18f_ca46_0eb7),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64", "apache", 0x0cf0_5c0d_3555_f1a4),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64", "empty", 0),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64", "long", 0x88b0_b809_f566_eb76),
    ("v1 tokenizer=letters shingle=3 weighting=tf hash=fnv1a64", "english", 0x0ac1_da5b_097f_d58e),
    ("v1 tokenizer=letters shingle=3 weighting=tf hash=fnv1a64", "apache", 0x14d0_3ef2_9915_d43a),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "chinese", 0x1a49_5e1b_6425_eb93),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "mixed", 0x7dce_83bf_656a_0a15),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "zh-prose", 0x1fd4_d11b_6723_6f50),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "english", 0xca2f_191d_7461_c5dd),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "empty", 0),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "whitespace", 0),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64", "long", 0x08b0_b809_f566_eb76),
    ("v1 tokenizer=chinese shingle=2 weighting=tf hash=fnv1a64", "chinese", 0x1e17_c1c8_c659_ffac),
    ("v1 tokenizer=chinese shingle=2 weighting=tf hash=fnv1a64", "zh-prose", 0x70e2_3eb6_7cee_201b),
    ("v1 tokenizer=chinese shingle=3 weighting=tf hash=fnv1a64", "chinese", 0x8260_02d5_fea6_5504),
    ("v1 tokenizer=chinese shingle=3 weighting=tf hash=fnv1a64", "mixed", 0xfac1_24ba_5678_3dbc),
    ("v1 tokenizer=chinese shingle=3 weighting=tf hash=fnv1a64", "zh-prose", 0xc6a0_c545_25ac_6724),
    ("v1 tokenizer=chinese shingle=1 weighting=binary hash=fnv1a64", "zh-prose", 0x1e79_561b_6604_8c70),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "english", 0xc291_a119_4dff_300e),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "chinese", 0x503f_e3ac_4df1_8e82),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "mixed", 0xc2c2_a219_7778_c447),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "empty", 0),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "whitespace", 0),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "apache", 0xc291_8719_65d3_ec28),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64", "long", 0xc28b_9119_6553_ebb2),
    ("v1 tokenizer=chars:5 shingle=1 weighting=binary hash=fnv1a64", "english", 0xa434_1e3f_1f0d_292f),
    ("v1 tokenizer=chars:5 shingle=1 weighting=binary hash=fnv1a64", "apache", 0x76d7_187d_5912_dfad),
    ("v1 tokenizer=chars:1 shingle=1 weighting=tf hash=fnv1a64", "english", 0xaf63_ed4c_8601_817f),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "english", 0xdbbc_8c55_9eab_6a12),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "chinese", 0xa81e_4d31_063e_f64a),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "mixed", 0xc85b_ae11_559c_1636),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "empty", 0),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "whitespace", 0),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "apache", 0x8a0e_b565_3888_ef99),
    ("v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64", "long", 0x8d74_e915_a99d_1c8d),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64-fmix64", "english", 0x5557_83da_20d2_498e),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64-fmix64", "apache", 0xa607_e154_d3ac_5686),
    ("v1 tokenizer=words shingle=3 weighting=tf hash=fnv1a64-fmix64", "long", 0x4e35_a83d_540a_2aab),
    ("v1 tokenizer=words shingle=1 weighting=binary hash=fnv1a64-fmix64", "apache", 0xa31d_f528_3430_a289),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64-fmix64", "english", 0xdbbc_8c55_9eab_6a12),
    ("v1 tokenizer=letters shingle=1 weighting=tf hash=fnv1a64-fmix64", "apache", 0x8a0e_b524_3888_ef99),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64-fmix64", "chinese", 0x129f_479b_6d1b_a341),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64-fmix64", "mixed", 0x89ef_2ea4_ed35_171d),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64-fmix64", "zh-prose", 0x447c_f699_792b_8a32),
    ("v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64-fmix64", "empty", 0),
    ("v1 tokenizer=chinese shingle=3 weighting=tf hash=fnv1a64-fmix64", "zh-prose", 0xde66_f731_1f9e_32c5),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64", "english", 0xb3f0_a920_5b81_e400),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64", "chinese", 0xe8de_9063_b3ef_fa9c),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64", "apache", 0x5a05_b56c_aa20_c001),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64", "whitespace", 0),
    ("v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64", "long", 0xce76_b650_bbe0_cb97),
];

/// The golden cases this build can run (`chinese` needs its crate feature).
fn runnable() -> impl Iterator<Item = &'static (&'static str, &'static str, u64)> {
    GOLDEN
        .iter()
        .filter(|(config, _, _)| cfg!(feature = "chinese") || !config.contains("tokenizer=chinese"))
}

fn text(name: &str, long: &str) -> String {
    match name {
        "english" => ENGLISH.to_owned(),
        "chinese" => CHINESE.to_owned(),
        "mixed" => MIXED.to_owned(),
        "empty" => EMPTY.to_owned(),
        "whitespace" => WHITESPACE.to_owned(),
        "apache" => APACHE.to_owned(),
        "zh-prose" => ZH_PROSE.to_owned(),
        "long" => long.to_owned(),
        other => panic!("unknown golden text {other}"),
    }
}

#[test]
fn golden_fingerprints() {
    let long = long_text();
    assert!(long.len() >= 1 << 20);
    let mut failures = Vec::new();
    for &(config, name, expected) in runnable() {
        let got = hasher(config).fingerprint(&text(name, &long));
        if got != expected {
            failures.push(format!("    (\"{config}\", \"{name}\", {got:#018x}),"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden fingerprints changed; actual values:\n{}",
        failures.len(),
        runnable().count(),
        failures.join("\n")
    );
}

#[test]
fn golden_empty_and_whitespace_are_zero() {
    let long = long_text();
    for &(config, name, expected) in runnable() {
        if name == "empty" || name == "whitespace" {
            assert_eq!(expected, 0, "{config} {name}");
            assert_eq!(hasher(config).fingerprint(&text(name, &long)), 0);
        }
    }
}

/// An IDF table with exactly representable values, so that the weighted
/// (`f64`) vote is pinned too. (Tables from `IdfTable::from_documents` use
/// `f64::ln`, whose last bit is up to the platform's math library.)
fn golden_idf() -> IdfTable {
    IdfTable::from_pairs(
        [
            ("the", 0.25),
            ("quick", 3.5),
            ("fox", 2.0),
            ("dog", 1.25),
            ("lazy", 0.5),
        ],
        1.0,
    )
    .expect("valid table")
}

#[test]
fn golden_idf_fingerprints() {
    assert_eq!(golden_idf().checksum(), 0x5eb8_085d_9ccb_7be2);
    let h = Simhasher::builder()
        .hash(FeatureHash::Fnv1a64)
        .idf(golden_idf())
        .build()
        .expect("valid config");
    assert_eq!(
        h.config().to_string(),
        "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64 idf=5eb8085d9ccb7be2"
    );
    assert_eq!(h.fingerprint(ENGLISH), 0x4b2e_bd1c_3365_eddc);
    assert_eq!(h.fingerprint(APACHE), 0x08f0_5c0f_355e_6084);

    let config =
        "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64 idf=5eb8085d9ccb7be2";
    let h = Simhasher::from_config_with_idf(&config.parse().expect("parses"), golden_idf())
        .expect("checksum matches");
    assert_eq!(h.fingerprint(ENGLISH), 0xfef4_0d51_ddfb_4a2a);
    assert_eq!(h.fingerprint(APACHE), 0x0a00_b168_3c88_66d9);
}

#[test]
fn golden_weighted_fingerprints() {
    let features = [
        ("title words", 3.0),
        ("body", 1.0),
        ("more body", 1.0),
        ("footer", 0.5),
        ("noise", 0.25),
    ];
    let plain = Simhasher::builder()
        .hash(FeatureHash::Fnv1a64)
        .build()
        .expect("valid config");
    assert_eq!(plain.fingerprint_weighted(features), 0xb0a2_9a76_cc81_59cc);
    let fmix = Simhasher::builder()
        .hash(FeatureHash::Fnv1a64Fmix64)
        .build()
        .expect("valid config");
    assert_eq!(fmix.fingerprint_weighted(features), 0x2bd8_ce84_bf48_6efa);
}

#[test]
fn golden_config_strings() {
    assert_eq!(FINGERPRINT_CONFIG_VERSION, 1);
    let cases: [(Tokenizer, usize, Weighting, &str); 6] = [
        (
            Tokenizer::Words,
            1,
            Weighting::TermFrequency,
            "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64",
        ),
        (
            Tokenizer::Words,
            3,
            Weighting::Binary,
            "v1 tokenizer=words shingle=3 weighting=binary hash=fnv1a64-fmix64",
        ),
        (
            Tokenizer::Letters,
            2,
            Weighting::TermFrequency,
            "v1 tokenizer=letters shingle=2 weighting=tf hash=fnv1a64-fmix64",
        ),
        (
            Tokenizer::Chinese,
            1,
            Weighting::TermFrequency,
            "v1 tokenizer=chinese shingle=1 weighting=tf hash=fnv1a64-fmix64",
        ),
        (
            Tokenizer::CharNgrams(3),
            1,
            Weighting::TermFrequency,
            "v1 tokenizer=chars:3 shingle=1 weighting=tf hash=fnv1a64-fmix64",
        ),
        (
            Tokenizer::CharNgrams(5),
            1,
            Weighting::Binary,
            "v1 tokenizer=chars:5 shingle=1 weighting=binary hash=fnv1a64-fmix64",
        ),
    ];
    for (tokenizer, shingle, weighting, line) in cases {
        if tokenizer == Tokenizer::Chinese && !cfg!(feature = "chinese") {
            continue;
        }
        let h = Simhasher::builder()
            .tokenizer(tokenizer)
            .shingle(shingle)
            .weighting(weighting)
            .build()
            .expect("valid config");
        assert_eq!(h.config().to_string(), line);
        assert_eq!(line.parse::<FingerprintConfig>(), Ok(h.config()));
    }
    assert_eq!(
        Simhasher::default().config().to_string(),
        "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64"
    );
    let fmix = Simhasher::builder()
        .tokenizer(Tokenizer::CharNgrams(4))
        .hash(FeatureHash::Fnv1a64Fmix64)
        .build()
        .expect("valid config");
    assert_eq!(
        fmix.config().to_string(),
        "v1 tokenizer=chars:4 shingle=1 weighting=tf hash=fnv1a64-fmix64"
    );
}
