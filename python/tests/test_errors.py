"""Bad arguments, a closed index, and exceptions: TypeError or ValueError
naming the value, simhashdb.Error for the rest, never a Rust panic."""

import datetime
import itertools
import os

import numpy as np
import pytest

import simhashdb
from simhashdb import Index, Simhasher


@pytest.fixture
def index(index_dir):
    with Index.open(index_dir) as index:
        index.insert(1, 0xABCD, "one")
        yield index


BAD_CALLS = [
    (lambda i: i.insert(-1, 5), ValueError, "id must be in [0, 2**64), got -1"),
    (lambda i: i.insert(2**64, 5), ValueError, "id must be in [0, 2**64), got 18446744073709551616"),
    (lambda i: i.insert("7", 5), TypeError, "id must be an int in [0, 2**64), got str '7'"),
    (lambda i: i.insert(7, 5.0), TypeError, "fingerprint must be an int in [0, 2**64), got float 5.0"),
    (lambda i: i.insert(7, -5), ValueError, "fingerprint must be in [0, 2**64), got -5"),
    (lambda i: i.insert(7, 5, b"name"), TypeError, "name must be a str, got bytes b'name'"),
    (lambda i: i.insert(7, 5, 12), TypeError, "name must be a str, got int 12"),
    (lambda i: i.insert_many([1, 2], [3]), ValueError, "ids has 2 values but fingerprints has 1"),
    (lambda i: i.insert_many([1, -2], [3, 4]), ValueError, "ids[1] must be in [0, 2**64), got -2"),
    (lambda i: i.insert_many([1], [3], ["a", "b"]), ValueError, "names has 2 items, but there are 1 ids"),
    (lambda i: i.insert_many([1], [3], [5]), TypeError, "names[0] must be a str, got int 5"),
    (lambda i: i.insert_many([1], np.array([3.5])), TypeError, "fingerprints must hold unsigned 64-bit integers"),
    (lambda i: i.insert_many(np.zeros((1, 1), dtype=np.uint64), [3]), ValueError, "ids must be 1-D"),
    (lambda i: i.delete(None), TypeError, "id must be an int in [0, 2**64), got NoneType None"),
    (lambda i: i.get(-3), ValueError, "id must be in [0, 2**64), got -3"),
    (lambda i: i.get_doc(1.0), TypeError, "got float 1.0"),
    (lambda i: -1 in i, ValueError, "got -1"),
    (lambda i: i.query(-1), ValueError, "fingerprint must be in [0, 2**64), got -1"),
    (lambda i: i.query("abc"), TypeError, "fingerprint must be an int in [0, 2**64), got str 'abc'"),
    (lambda i: i.query(1, k=-1), ValueError, "k must be a non-negative int below 2**32, got -1"),
    (lambda i: i.query(1, k=1.5), TypeError, "k must be an int, got float 1.5"),
    (lambda i: i.query(1, k=4), simhashdb.DistanceError, "distance 4 exceeds the index's k = 3"),
    (lambda i: i.query_many([1, "x"]), TypeError, "fingerprints[1] must be an int in [0, 2**64), got str 'x'"),
    (lambda i: i.query_many(3), TypeError, "fingerprints must be a sequence of ints, got int 3"),
    (lambda i: i.insert_if_new(1, -1), ValueError, "fingerprint must be in [0, 2**64), got -1"),
    (lambda i: i.insert_if_new(1, 1, k=99), simhashdb.DistanceError, "distance 99"),
    (lambda i: i.add(None, "text"), TypeError, "name must be a str, got NoneType None"),
    (lambda i: i.add("name", b"text"), TypeError, "text must be a str, got bytes b'text'"),
    (lambda i: i.add_many(["a"], ["b", "c"]), ValueError, "names has 1 items but texts has 2"),
    (lambda i: i.check("name", 5), TypeError, "text must be a str, got int 5"),
    (lambda i: i.check("name", "t", k=9), simhashdb.DistanceError, "distance 9"),
    (lambda i: i.add("x" * (simhashdb.MAX_NAME_BYTES + 1), "t"), simhashdb.InvalidArgumentError, "65537 bytes"),
]


@pytest.mark.parametrize("call,error,fragment", BAD_CALLS)
def test_bad_arguments_raise_naming_the_value_and_write_nothing(index, call, error, fragment):
    before = index.stats()
    with pytest.raises(error) as raised:
        call(index)
    assert fragment in str(raised.value)
    assert len(index) == 1 and index.get(1) == 0xABCD
    after = index.stats()
    assert after["memtable_docs"] == before["memtable_docs"]


@pytest.mark.parametrize(
    "kwargs,error,fragment",
    [
        ({"k": -1}, ValueError, "k must be a non-negative int below 2**32, got -1"),
        ({"k": 64}, ValueError, "64"),
        ({"durability": "fsync"}, ValueError, "durability must be \"buffered\" or \"sync\", got 'fsync'"),
        ({"durability": True}, TypeError, "got bool True"),
        ({"retention": 0}, ValueError, "retention must be a positive duration, got 0"),
        ({"retention": -2.5}, ValueError, "got -2.5"),
        ({"retention": "48h"}, TypeError, "retention must be seconds (int or float) or a datetime.timedelta, got str '48h'"),
        ({"retention": True}, TypeError, "got bool True"),
        ({"retention": float("nan")}, ValueError, "retention must be a positive duration, got nan"),
        ({"retention": -datetime.timedelta(days=1)}, ValueError, "retention must be a positive duration"),
        ({"retention": datetime.timedelta(0)}, ValueError, "retention must be a positive duration"),
        ({"retention": 1e20}, ValueError, "retention must be at most 999999999 days (datetime.timedelta.max"),
        ({"retention": float("inf")}, ValueError, "retention must be at most 999999999 days"),
        ({"retention": 10**30}, ValueError, "retention must be at most 999999999 days"),
        ({"retention": 10**400}, ValueError, "retention must be at most 999999999 days"),
        ({"retention": 86_400 * 10**9}, ValueError, "retention must be at most 999999999 days"),
        ({"expected_n": -5}, ValueError, "expected_n must be in [0, 2**64), got -5"),
        ({"blocks": 2}, ValueError, "2"),
        ({"tokenizer": "klingon"}, ValueError, "klingon"),
        ({"memtable_bytes": 0}, ValueError, "memtable_bytes must be at least 1, got 0"),
        ({"merge_fan_in": 1}, ValueError, "merge_fan_in must be between 2 and 64, got 1"),
        ({"merge_fan_in": 65}, ValueError, "got 65"),
    ],
)
def test_bad_open_arguments_are_refused_before_anything_is_created(tmp_path, kwargs, error, fragment):
    path = tmp_path / "never"
    with pytest.raises(error) as raised:
        Index.open(path, **kwargs)
    assert fragment in str(raised.value)
    assert not path.exists()


def test_a_bad_path_type_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got int 5"):
        Index.open(5)
    with pytest.raises(TypeError, match="path must be a str or os.PathLike, got NoneType None"):
        Index.open_read_only(None)


def test_every_call_on_a_closed_index_raises_closed_error(index_dir):
    index = Index.open(index_dir)
    index.insert(1, 2)
    index.close()
    assert index.closed
    assert "closed" in repr(index)
    calls = [
        lambda: index.insert(1, 2),
        lambda: index.insert_many([1], [2]),
        lambda: index.delete(1),
        lambda: index.get(1),
        lambda: index.get_doc(1),
        lambda: 1 in index,
        lambda: index.query(2),
        lambda: index.query_many([2]),
        lambda: index.insert_if_new(3, 4),
        lambda: index.add("a", "b"),
        lambda: index.add_many(["a"], ["b"]),
        lambda: index.check("a", "b"),
        index.flush,
        index.sync,
        index.compact,
        index.verify,
        index.stats,
        lambda: len(index),
    ]
    for call in calls:
        with pytest.raises(simhashdb.ClosedError, match=f"the index at {index_dir} is closed"):
            call()
    # Closing twice is fine; the lock was released by the first close.
    index.close()
    with Index.open(index_dir) as again:
        assert again.get(1) == 2
    # Properties recorded at open stay readable.
    assert (index.k, index.path, index.read_only) == (3, str(index_dir), False)


def test_with_block_closes_even_on_error(index_dir):
    with pytest.raises(RuntimeError):
        with Index.open(index_dir) as index:
            index.insert(1, 2)
            raise RuntimeError("crawler failed")
    assert index.closed
    with Index.open(index_dir) as again:
        assert again.get(1) == 2


def test_damage_is_reported_as_corrupted_error_naming_the_file(index_dir):
    with Index.open(index_dir) as index:
        index.insert_many(np.arange(500, dtype=np.uint64), np.arange(500, dtype=np.uint64) * 31)
        index.flush()
    segment = next(p for p in sorted(os.listdir(index_dir)) if p.endswith(".seg"))
    path = index_dir / segment
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(simhashdb.CorruptedError) as raised:
        with Index.open(index_dir) as index:
            index.verify()
    assert raised.value.path == str(path)
    assert isinstance(raised.value.offset, int)
    assert isinstance(raised.value, simhashdb.Error)


def test_exceptions_form_one_hierarchy():
    for name in [
        "LockedError", "CorruptedError", "MismatchError", "DistanceError", "InvalidArgumentError",
        "PoisonedError", "ReadOnlyError", "ClosedError", "FileSystemError", "ForkedError",
    ]:
        cls = getattr(simhashdb, name)
        assert issubclass(cls, simhashdb.Error) and cls.__module__ == "simhashdb", name
    for cls in (simhashdb.MismatchError, simhashdb.DistanceError, simhashdb.InvalidArgumentError, simhashdb.ClosedError):
        assert issubclass(cls, ValueError)
    assert issubclass(simhashdb.FileSystemError, OSError)
    assert not issubclass(simhashdb.LockedError, ValueError)


ODD_VALUES = [
    None, True, -1, 0, 1, 2**63, 2**64 - 1, 2**64, 2**100, -(2**70), 1.5, float("nan"), "", "x" * 70000,
    b"bytes", [], [1, 2], [-1], [2**64], (3,), {1: 2}, object(), np.uint64(5), np.int64(-5),
    np.array([1, 2], dtype=np.uint64), np.array([[1]]), np.array([1.5]), np.array(["a"]),
    np.array([], dtype=np.float32), range(3), iter([1, 2]),
]


def test_no_argument_makes_a_rust_panic_reach_python(index_dir):
    """Every call with odd values: each raises TypeError, ValueError or
    simhashdb.Error (or succeeds), never pyo3's PanicException (a
    BaseException that `except Exception` would not catch)."""
    hasher = Simhasher()
    with Index.open(index_dir, k=3) as index:
        calls = {
            "hamming": lambda a, b: simhashdb.hamming(a, b),
            "find_all": lambda a, b: simhashdb.find_all(a, k=b),
            "clusters": lambda a, b: simhashdb.clusters(a, blocks=b),
            "fingerprint": lambda a, b: hasher.fingerprint(a),
            "fingerprint_many": lambda a, b: hasher.fingerprint_many(a),
            "Simhasher": lambda a, b: Simhasher(tokenizer=a, shingle=b),
            "doc_id": lambda a, b: simhashdb.doc_id(a),
            "insert": lambda a, b: index.insert(a, b, None),
            "insert named": lambda a, b: index.insert(1, a, b),
            "insert_many": lambda a, b: index.insert_many(a, b),
            "query": lambda a, b: index.query(a, b),
            "query_many": lambda a, b: index.query_many(a, b),
            "insert_if_new": lambda a, b: index.insert_if_new(a, 1, None, b),
            "get": lambda a, b: index.get(a),
            "delete": lambda a, b: index.delete(a),
            "add": lambda a, b: index.add(a, b),
            "check": lambda a, b: index.check(a, b),
            "Match": lambda a, b: simhashdb.Match(a, b, 0),
        }
        outcomes = set()
        for (name, call), a, b in itertools.product(calls.items(), ODD_VALUES, ODD_VALUES[:12]):
            try:
                call(a, b)
                outcomes.add("ok")
            except (TypeError, ValueError, simhashdb.Error) as e:
                outcomes.add(type(e).__name__)
            except BaseException as e:  # noqa: BLE001 - this is what the test is about
                pytest.fail(f"{name}({a!r:.40}, {b!r:.40}) raised {type(e).__module__}.{type(e).__name__}: {e}")
        assert {"ok", "TypeError", "ValueError"} <= outcomes
        index.verify()


class _Interrupting:
    """An int-like whose conversion is interrupted (Ctrl-C in its __index__)."""

    def __index__(self):
        raise KeyboardInterrupt


def test_an_interrupt_while_an_argument_converts_goes_up_unchanged(index_dir):
    with Index.open(index_dir) as index:
        with pytest.raises(KeyboardInterrupt):
            index.insert(_Interrupting(), 1)
        with pytest.raises(KeyboardInterrupt):
            index.insert_many([1, _Interrupting()], [1, 2])
        with pytest.raises(KeyboardInterrupt):
            index.query(1, k=_Interrupting())
        assert len(index) == 0
