"""hamming, find_all and clusters against a brute-force numpy scan."""

import numpy as np
import pytest
from conftest import brute_labels, brute_pairs, planted, popcount

from simhashdb import clusters, find_all, hamming


def test_hamming_is_the_popcount_of_the_xor(rng):
    a = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
    b = rng.integers(0, 2**64, size=2000, dtype=np.uint64)
    expected = popcount(a ^ b)
    assert [hamming(int(x), int(y)) for x, y in zip(a, b)] == expected.tolist()
    # numpy scalars are accepted as they are.
    assert hamming(a[0], b[0]) == expected[0]
    assert hamming(0, 2**64 - 1) == 64
    assert hamming(5, 5) == 0


@pytest.mark.parametrize("k", [0, 1, 2, 3, 4])
def test_find_all_equals_brute_force(rng, k):
    fps = planted(rng, 1500, max_flip=k + 2)
    expected = brute_pairs(fps, k)
    got = find_all(fps, k=k)
    assert got.dtype == np.int64 and got.shape == expected.shape
    assert np.array_equal(got, expected)
    assert len(expected) > 0


@pytest.mark.parametrize("blocks", [4, 5, 6, 8])
def test_find_all_with_fixed_blocks_equals_brute_force(rng, blocks):
    fps = planted(rng, 1000)
    assert np.array_equal(find_all(fps, k=3, blocks=blocks), brute_pairs(fps, 3))


def test_exact_duplicates_and_distance_exactly_k_are_pairs():
    base = 0x0123_4567_89AB_CDEF
    fps = [base, base ^ 0b111, base, base ^ 0b1111, 7]
    assert find_all(fps, k=3).tolist() == [[0, 1], [0, 2], [1, 2], [1, 3]]
    assert find_all(fps, k=0).tolist() == [[0, 2]]
    assert find_all(fps, k=4).tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]


def test_dense_runs_of_near_duplicates_are_all_found(rng):
    # Fingerprints differing only in their 12 lowest bits: a dense run.
    fps = (np.uint64(0xABCD_0000_0000_0000) | rng.integers(0, 4096, size=600, dtype=np.uint64))
    assert np.array_equal(find_all(fps, k=3), brute_pairs(fps, 3))


def test_clusters_are_connected_components_labelled_by_first_member(rng):
    fps = planted(rng, 1200)
    pairs = brute_pairs(fps, 3)
    labels = clusters(fps, k=3)
    assert labels.dtype == np.int64 and labels.shape == (1200,)
    assert np.array_equal(labels, brute_labels(1200, pairs))
    # One document of each cluster: the positions labelled with themselves.
    keep = labels == np.arange(1200)
    assert keep.sum() == len(set(labels.tolist()))
    assert keep.sum() < 1200


def test_chains_join_into_one_cluster():
    # 0 - 1 - 2 are a chain: 0 and 2 are 6 bits apart, yet one cluster.
    fps = [0, 0b111, 0b111111, 0xFFFF_0000_FFFF_0000]
    assert clusters(fps, k=3).tolist() == [0, 0, 0, 3]
    assert clusters(fps, k=3, blocks=6).tolist() == [0, 0, 0, 3]


def test_every_input_form_gives_the_same_answer(rng):
    fps = planted(rng, 300)
    expected = brute_pairs(fps, 3)
    forms = [
        fps,
        fps.tolist(),
        tuple(int(x) for x in fps),
        fps.astype(np.int64) & np.int64(2**62 - 1),  # non-negative int64 (values changed)
    ]
    assert np.array_equal(find_all(forms[0]), expected)
    assert np.array_equal(find_all(forms[1]), expected)
    assert np.array_equal(find_all(forms[2]), expected)
    masked = (fps & np.uint64(2**62 - 1))
    assert np.array_equal(find_all(forms[3]), brute_pairs(masked, 3))
    # A strided (non-contiguous) view, and other unsigned widths.
    doubled = np.repeat(fps, 2)[::2]
    assert not doubled.flags.c_contiguous
    assert np.array_equal(find_all(doubled), expected)
    small = (fps & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
    assert np.array_equal(find_all(small), brute_pairs(small.astype(np.uint64), 3))
    # An object array of Python ints (as pandas holds values above 2**63).
    assert np.array_equal(find_all(np.array(fps.tolist(), dtype=object)), expected)


def test_the_input_array_is_read_in_place_and_not_changed(rng):
    fps = planted(rng, 500)
    before = fps.copy()
    find_all(fps)
    clusters(fps)
    assert np.array_equal(fps, before)


def test_empty_and_single_inputs():
    assert find_all([]).shape == (0, 2)
    assert find_all(np.array([], dtype=np.uint64)).shape == (0, 2)
    assert find_all([5]).shape == (0, 2)
    assert clusters([]).shape == (0,)
    assert clusters([5]).tolist() == [0]


@pytest.mark.parametrize(
    "call,error,fragment",
    [
        (lambda: hamming(-1, 0), ValueError, "a must be in [0, 2**64), got -1"),
        (lambda: hamming(0, 2**64), ValueError, "b must be in [0, 2**64), got 18446744073709551616"),
        (lambda: hamming(1.5, 0), TypeError, "a must be an int in [0, 2**64), got float 1.5"),
        (lambda: hamming("1", 0), TypeError, "got str '1'"),
        (lambda: hamming(True, 0), TypeError, "got bool True"),
        (lambda: hamming(None, 0), TypeError, "got NoneType None"),
        (lambda: find_all([1, -2]), ValueError, "fingerprints[1] must be in [0, 2**64), got -2"),
        (lambda: find_all(np.array([1, -2])), ValueError, "fingerprints[1] must be in [0, 2**64), got -2"),
        (lambda: find_all([1, 2.5]), TypeError, "fingerprints[1] must be an int in [0, 2**64), got float 2.5"),
        (lambda: find_all(np.array([1.0, 2.0])), TypeError, "got an array of float64"),
        (lambda: find_all(np.array([True])), TypeError, "got an array of bool"),
        (lambda: find_all(np.zeros((2, 2), dtype=np.uint64)), ValueError, "must be 1-D, got an array of shape [2, 2]"),
        (lambda: find_all("123"), TypeError, "fingerprints must be a sequence of ints, got str '123'"),
        (lambda: find_all(123), TypeError, "got int 123"),
        (lambda: find_all([1], k=-1), ValueError, "k must be a non-negative int below 2**32, got -1"),
        (lambda: find_all([1], k=65), ValueError, "65"),
        (lambda: find_all([1], k="3"), TypeError, "k must be an int, got str '3'"),
        (lambda: find_all([1], k=3, blocks=3), ValueError, "3"),
        (lambda: find_all([1], k=3, blocks=-4), ValueError, "blocks must be a non-negative int below 2**32, got -4"),
        (lambda: clusters([1], k=3, blocks=99), ValueError, "99"),
        (lambda: clusters([2**64]), ValueError, "fingerprints[0] must be in [0, 2**64), got 18446744073709551616"),
    ],
)
def test_bad_arguments_raise_naming_the_value(call, error, fragment):
    with pytest.raises(error) as raised:
        call()
    assert fragment in str(raised.value)
