"""The re-check helpers (shingles, jaccard, MinHashBands, sketch) against a
pure-Python computation of their definitions."""

import pickle

import numpy as np
import pytest

import simhashdb
from simhashdb import MinHashBands, Simhasher

M64 = (1 << 64) - 1


def fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & M64


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def combine(run):
    acc = 0x9E3779B97F4A7C15
    for h in run:
        acc = fmix64(rotl(acc, 23) ^ h)
    return acc


def ref_shingle_list(text, width, hasher=None):
    """Shingle hashes in text order, repeats included."""
    tokens = (hasher or Simhasher()).tokens(text)
    hashes = [fmix64(fnv1a64(t.encode())) for t in tokens]
    if not hashes:
        return []
    if len(hashes) < width:
        return [combine(hashes)]
    return [combine(hashes[i : i + width]) for i in range(len(hashes) - width + 1)]


def ref_shingles(text, width, hasher=None):
    return sorted(set(ref_shingle_list(text, width, hasher)))


def ref_jaccard(a, b):
    a, b = set(a), set(b)
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def ref_keys(hashes, bands, rows):
    slots = bands * rows
    if not hashes:
        return []
    bins = [M64] * slots
    filled = [False] * slots
    for x in hashes:
        y = fmix64(x ^ 0x243F6A8885A308D3)
        b = (y * slots) >> 64
        bins[b] = min(bins[b], y)
        filled[b] = True

    def value(i):
        if filled[i]:
            return bins[i]
        for attempt in range(1, 64 * slots + 1):
            j = (splitmix64(((i << 32) | attempt) & M64) * slots) >> 64
            if filled[j]:
                return bins[j]
        raise AssertionError("no filled bin")

    keys = []
    for band in range(bands):
        acc = 0x6C62272E07BB0142
        for i in range(band * rows, (band + 1) * rows):
            acc = rotl(fmix64(acc ^ value(i)), 17)
        keys.append((acc ^ (acc >> 32)) & 0xFFFFFFFF)
    return keys


def ref_sketch(text, hasher=None):
    hashes = ref_shingle_list(text, 5, hasher)
    out = bytearray(16)
    if not hashes:
        return bytes(out)
    mins = [M64] * 128
    filled = [False] * 128
    for x in hashes:
        y = fmix64(x ^ 0x5851F42D4C957F2D)
        b = (y * 128) >> 64
        mins[b] = min(mins[b], y)
        filled[b] = True
    for i in range(128):
        if filled[i]:
            v = mins[i]
        else:
            attempt = 1
            while True:
                j = (fmix64(((i << 32) | attempt) & M64) * 128) >> 64
                if filled[j]:
                    v = mins[j]
                    break
                attempt += 1
        bit = fmix64(v ^ ((i * 0x9E3779B97F4A7C15) & M64)) & 1
        out[i // 8] |= bit << (i % 8)
    return bytes(out)


TEXTS = [
    "",
    "   ...   ",
    "one",
    "one two",
    "a rose is a rose is a rose is a rose",
    "The quick brown fox jumps over the lazy dog; the dog sleeps.",
    "The quick brown fox jumped over the lazy dog; the dog sleeps.",
    "Ünïcode wörds and ASCII words, 3.14 and don't: mixed.",
    "中文文本 with some English words 中文",
    " ".join(f"w{i % 37}" for i in range(300)),
]


@pytest.mark.parametrize("width", [1, 2, 5])
def test_shingles_are_the_sorted_distinct_hashes_of_the_token_runs(width):
    for text in TEXTS:
        got = simhashdb.shingles(text, width=width)
        assert got.dtype == np.uint64
        assert got.tolist() == ref_shingles(text, width), text
    many = simhashdb.shingles_many(TEXTS, width=width)
    assert [s.tolist() for s in many] == [ref_shingles(t, width) for t in TEXTS]


def test_shingles_follow_the_hasher_tokenizer():
    hasher = Simhasher(tokenizer="chars:3")
    text = "abcdefgh abcdefgh"
    assert simhashdb.shingles(text, width=2, hasher=hasher).tolist() == ref_shingles(text, 2, hasher)
    assert simhashdb.shingles(text, width=2, hasher=hasher).tolist() != simhashdb.shingles(text, width=2).tolist()


@pytest.mark.parametrize("width", [1, 2, 5])
def test_jaccard_equals_the_set_definition_for_texts_and_arrays(width):
    for a in TEXTS:
        for b in TEXTS:
            want = ref_jaccard(ref_shingles(a, width), ref_shingles(b, width))
            assert simhashdb.jaccard(a, b, width=width) == pytest.approx(want, abs=1e-12)
            sa, sb = simhashdb.shingles(a, width=width), simhashdb.shingles(b, width=width)
            assert simhashdb.jaccard(sa, sb) == pytest.approx(want, abs=1e-12)
            assert simhashdb.jaccard(a, sb, width=width) == pytest.approx(want, abs=1e-12)
    lefts = [a for a in TEXTS for _ in TEXTS]
    rights = [b for _ in TEXTS for b in TEXTS]
    got = simhashdb.jaccard_many(lefts, rights, width=width)
    assert got.dtype == np.float64
    want = [ref_jaccard(ref_shingles(a, width), ref_shingles(b, width)) for a, b in zip(lefts, rights)]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_jaccard_of_the_bigram_example():
    # {ab, bc, cd, de} vs {ab, bc, cd, df}: 3 / 5.
    assert simhashdb.jaccard("a b c d e", "a b c d f", width=2) == pytest.approx(0.6)
    assert simhashdb.jaccard("", "") == 1.0
    assert simhashdb.jaccard("a b c d e", "") == 0.0


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9])
def test_minhash_keys_equal_the_reference_and_the_batch_form(threshold):
    bands = MinHashBands.for_threshold(threshold)
    hasher = Simhasher()
    fps, keys, sizes, blank = bands.sketch_many(TEXTS, width=5)
    assert keys.shape == (len(TEXTS), bands.bands) and keys.dtype == np.uint32
    for i, text in enumerate(TEXTS):
        want = ref_keys(ref_shingles(text, 5), bands.bands, bands.rows)
        assert bands.keys(text, width=5).tolist() == want, text
        is_blank = not any(c.isalnum() for c in text) or not want
        assert bool(blank[i]) == is_blank, text
        if is_blank:
            assert keys[i].tolist() == [0] * bands.bands
            assert int(fps[i]) == 0
        else:
            assert keys[i].tolist() == want
            assert int(fps[i]) == hasher.fingerprint(text)
        assert int(sizes[i]) == len(ref_shingles(text, 5)), text


def test_minhash_bands_are_dedups_choice_and_their_probability():
    b = MinHashBands.for_threshold(0.8)
    assert (b.bands, b.rows) == (20, 5)
    assert b.probability(0.8) > 0.999
    assert b.probability(0.8) == pytest.approx(1 - (1 - 0.8**5) ** 20)
    assert MinHashBands(20, 5) == b
    assert pickle.loads(pickle.dumps(b)) == b
    assert repr(b) == "MinHashBands(bands=20, rows=5)"
    near = "the quick brown fox jumps over the lazy dog and runs far away into the woods"
    assert bands_share(b, near, near)


def bands_share(b, x, y):
    return bool(set(b.keys(x).tolist()) & set(b.keys(y).tolist()))


def test_sketches_equal_the_reference_and_estimate_jaccard():
    rows = simhashdb.sketch_many(TEXTS)
    assert rows.shape == (len(TEXTS), 16) and rows.dtype == np.uint8
    for i, text in enumerate(TEXTS):
        want = ref_sketch(text)
        assert simhashdb.sketch(text) == want, text
        assert bytes(rows[i]) == want
    a = simhashdb.sketch(TEXTS[5])
    assert simhashdb.sketch_similarity(a, a) == 1.0
    differ = sum(bin(x ^ y).count("1") for x, y in zip(a, simhashdb.sketch(TEXTS[6])))
    want = max(0.0, 2 * (128 - differ) / 128 - 1)
    assert simhashdb.sketch_similarity(a, rows[6]) == pytest.approx(want)


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="width must be an integer from 1"):
        simhashdb.shingles("a b", width=0)
    with pytest.raises(TypeError, match="hasher must be a Simhasher"):
        simhashdb.shingles("a b", hasher="words")
    with pytest.raises(ValueError, match="sorted and without repeats"):
        simhashdb.jaccard(np.array([3, 2], dtype=np.uint64), "x")
    with pytest.raises(TypeError, match="a must be a str or an array"):
        simhashdb.jaccard(3.5, "x")
    with pytest.raises(ValueError, match="same length"):
        simhashdb.jaccard_many(["a"], ["a", "b"])
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str"):
        MinHashBands.for_threshold(0.8).sketch_many(["a", None])
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        MinHashBands.for_threshold(1.5)
    with pytest.raises(ValueError, match="bands must be an integer from 1 to 256"):
        MinHashBands(0, 5)
    with pytest.raises(ValueError, match="rows must be an integer from 1 to 64"):
        MinHashBands(20, 65)
    with pytest.raises(ValueError, match="must be 16 bytes long"):
        simhashdb.sketch_similarity(b"abc", simhashdb.sketch("x"))
