"""Simhasher: the same fingerprints as the Rust library (its golden values),
one by one and in parallel."""

import numpy as np
import pytest

import simhashdb
from simhashdb import Simhasher

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. Pack my box with "
    "five dozen liquor jugs! How vexingly quick daft zebras jump."
)
CHINESE = "我们中出了一个叛徒，他把消息告诉了敌人。今天北京的天气很好，我们去公园散步吧。"
MIXED = (
    "我们使用Rust语言和SimHash算法来检测近似重复的网页（near-duplicate web pages），"
    "每天处理数百万个URL。Don't panic!"
)

# From tests/fingerprint_golden.rs: these values never change.
GOLDEN = [
    ("words", 1, "tf", ENGLISH, 0xDBBC_8C55_9EAB_6A12),
    ("words", 1, "tf", CHINESE, 0xA81E_4D31_063E_F64A),
    ("words", 1, "tf", MIXED, 0xC85B_AE11_559C_1636),
    ("words", 3, "tf", ENGLISH, 0x5557_83DA_20D2_498E),
    ("letters", 1, "tf", ENGLISH, 0xDBBC_8C55_9EAB_6A12),
    ("chinese", 1, "tf", CHINESE, 0x129F_479B_6D1B_A341),
    ("chinese", 1, "tf", MIXED, 0x89EF_2EA4_ED35_171D),
]


@pytest.mark.parametrize("tokenizer,shingle,weighting,text,expected", GOLDEN)
def test_fingerprints_are_the_rust_librarys_golden_values(tokenizer, shingle, weighting, text, expected):
    hasher = Simhasher(tokenizer=tokenizer, shingle=shingle, weighting=weighting)
    assert hasher.fingerprint(text) == expected
    assert hasher.fingerprint_many([text, text])[1] == expected


def test_defaults_are_words_single_tf():
    assert Simhasher().config == "v1 tokenizer=words shingle=1 weighting=tf hash=fnv1a64-fmix64"
    assert Simhasher() == Simhasher(tokenizer="words", shingle=1, weighting="tf")
    assert Simhasher() != Simhasher(shingle=2)
    assert hash(Simhasher()) == hash(Simhasher(tokenizer="words"))
    assert repr(Simhasher(tokenizer="chars:4", weighting="binary")) == (
        "Simhasher(tokenizer='chars:4', shingle=1, weighting='binary')"
    )


def test_config_round_trips_through_from_config():
    for hasher in [Simhasher(), Simhasher("chinese", 2, "binary"), Simhasher(tokenizer="chars")]:
        again = Simhasher.from_config(hasher.config)
        assert again == hasher
        assert again.fingerprint(MIXED) == hasher.fingerprint(MIXED)


def test_fingerprint_many_equals_one_by_one_for_every_input_form(rng):
    hasher = Simhasher(shingle=2)
    words = ["alpha", "beta", "gamma", "delta", "页面", "crawler", "index", "😀"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 40)))) for _ in range(500)]
    expected = np.array([hasher.fingerprint(t) for t in texts], dtype=np.uint64)
    for form in (texts, tuple(texts), iter(texts), (t for t in texts)):
        got = hasher.fingerprint_many(form)
        assert got.dtype == np.uint64 and got.shape == (500,)
        assert np.array_equal(got, expected)
    assert hasher.fingerprint_many([]).shape == (0,)


def test_a_long_text_is_fingerprinted_like_its_copy():
    hasher = Simhasher()
    text = "storage engines write ahead logs and segments " * 20000
    assert hasher.fingerprint(text) == hasher.fingerprint_many([text])[0]
    assert hasher.fingerprint(text) == hasher.fingerprint(str(text))


def test_near_identical_texts_are_near():
    hasher = Simhasher()
    a = hasher.fingerprint(ENGLISH + " A final remark about lighthouses and keepers.")
    b = hasher.fingerprint(ENGLISH + " A final remark about lighthouses and their keepers.")
    c = hasher.fingerprint(CHINESE)
    assert simhashdb.hamming(a, b) < simhashdb.hamming(a, c)


def test_tokens_show_what_is_hashed():
    assert Simhasher().tokens("Don't panic!") == ["don't", "panic"]
    assert Simhasher(tokenizer="letters").tokens("Don't panic, 42x!") == ["don", "t", "panic", "x"]


@pytest.mark.parametrize(
    "kwargs,error,fragment",
    [
        ({"tokenizer": "wordz"}, ValueError, "wordz"),
        ({"tokenizer": "chars:0"}, ValueError, "chars:0"),
        ({"weighting": "idf"}, ValueError, "idf"),
        ({"shingle": 0}, ValueError, "shingle"),
        ({"shingle": -1}, ValueError, "-1"),
        ({"shingle": 2.5}, TypeError, "2.5"),
        ({"tokenizer": 3}, TypeError, "3"),
        ({"tokenizer": "chars:3", "shingle": 2}, ValueError, "shingle width 2"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(kwargs, error, fragment):
    with pytest.raises(error) as raised:
        Simhasher(**kwargs)
    assert fragment in str(raised.value)


def test_texts_must_be_str():
    hasher = Simhasher()
    with pytest.raises(TypeError, match=r"text must be a str, got bytes b'abc' \(decode bytes first\)"):
        hasher.fingerprint(b"abc")
    with pytest.raises(TypeError, match="text must be a str, got NoneType None"):
        hasher.fingerprint(None)
    with pytest.raises(TypeError, match=r"texts\[2\] must be a str, got int 7"):
        hasher.fingerprint_many(["a", "b", 7])
    with pytest.raises(TypeError, match="texts must be a sequence of str, got str 'abc'"):
        hasher.fingerprint_many("abc")
    with pytest.raises(TypeError, match="got int 5"):
        hasher.fingerprint_many(5)
    with pytest.raises(ValueError, match="version 9 is not supported"):
        Simhasher.from_config("v9 tokenizer=words shingle=1 weighting=tf hash=fnv1a64")


def test_texts_that_are_not_valid_unicode_are_value_errors():
    hasher = Simhasher()
    with pytest.raises(ValueError, match=r"texts\[1\] is not valid Unicode"):
        hasher.fingerprint_many(["fine", "lone \ud800 surrogate"])
    with pytest.raises(ValueError):
        hasher.fingerprint("lone \ud800 surrogate")


def test_non_ascii_texts_in_bulk_equal_one_by_one():
    hasher = Simhasher(tokenizer="chinese")
    texts = [CHINESE, MIXED, "ünïcödé wörds ünd mörë", "", "😀 emoji 😀"] * 50
    assert hasher.fingerprint_many(texts).tolist() == [hasher.fingerprint(t) for t in texts]
