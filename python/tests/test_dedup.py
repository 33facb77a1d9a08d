"""simhashdb.dedup: the verified deduplication of a column of texts, checked
against the command line's `simhashdb dedup` on the same records written as
JSON lines, and against brute force; every kind of column it takes."""

import ctypes
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simhashdb
from conftest import cli_binary

ROOT = Path(__file__).resolve().parents[2]

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "xi", "ba", "de", "fu", "go", "hi", "ju", "pe", "so"]


def word(rng):
    return "".join(SYLLABLES[int(i)] for i in rng.integers(0, 16, size=3))


def corpus(n=400, seed=5):
    """Texts of 40 to 120 words, about a third near copies of earlier ones
    (0 to 3 words changed, some extended), a few blank and a few empty."""
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(n):
        if i % 53 == 7:
            texts.append(" -- ")
        elif i % 71 == 9:
            texts.append("")
        elif texts and rng.random() < 0.35:
            words = texts[int(rng.integers(len(texts)))].split(" ")
            for _ in range(int(rng.integers(0, 4))):
                words[int(rng.integers(len(words)))] = word(rng)
            if rng.random() < 0.5:
                words.append(word(rng))
            texts.append(" ".join(words))
        else:
            texts.append(" ".join(word(rng) for _ in range(int(rng.integers(40, 121)))))
    return texts


def cli_dedup(tmp_path, texts, *args):
    """`simhashdb dedup --emit drop` on the texts as JSON lines (ids 0..n-1):
    {dropped id: (duplicate_of, similarity)}."""
    cli = cli_binary()
    if cli is None:
        pytest.skip("no simhashdb command built (cargo build --release)")
    path = tmp_path / "docs.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    out = subprocess.run(
        [cli, "dedup", str(path), "--id-field", "id", "--emit", "drop", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    drops = {}
    for line in out.splitlines():
        d = json.loads(line)
        drops[d["id"]] = (d["duplicate_of"], d["similarity"])
    return drops


def as_drops(result):
    drops = {}
    for i in np.flatnonzero(~result.keep):
        s = float(result.similarity[i])
        drops[int(i)] = (int(result.duplicate_of[i]), None if math.isnan(s) else s)
    return drops


@pytest.mark.parametrize(
    "options, flags",
    [
        ({}, []),
        ({"keep": "longest"}, ["--keep", "longest"]),
        ({"threshold": 0.6, "shingle": 3}, ["--verify", "jaccard:0.6:3"]),
        ({"distance": 12}, ["-d", "12"]),
        ({"verify": False}, ["--no-verify"]),
        ({"verify": False, "distance": 6, "keep": "longest"}, ["--no-verify", "-d", "6", "--keep", "longest"]),
    ],
)
def test_dedup_of_a_dataframe_equals_the_command_line_on_the_same_records(tmp_path, options, flags):
    pd = pytest.importorskip("pandas")
    texts = corpus()
    df = pd.DataFrame({"id": range(len(texts)), "text": texts})
    result = simhashdb.dedup(df["text"], **options)
    expected = cli_dedup(tmp_path, texts, *flags)
    assert len(expected) > 20
    assert as_drops(result) == expected
    assert result.keep.dtype == np.bool_ and result.duplicate_of.dtype == np.int64
    assert result.similarity.dtype == np.float64
    assert result.dropped == len(expected) and result.kept == len(texts) - len(expected)
    assert (result.duplicate_of[result.keep] == -1).all()
    assert np.isnan(result.similarity[result.keep]).all()


def test_dedup_drops_only_verified_duplicates_of_earlier_kept_texts():
    texts = corpus(seed=9)
    result = simhashdb.dedup(texts)
    hasher = simhashdb.Simhasher()

    def shingles(t):
        tokens = hasher.tokens(t)
        return {tuple(tokens[i : i + 5]) for i in range(max(len(tokens) - 4, 0))} or (
            {tuple(tokens)} if tokens else set()
        )

    for i in np.flatnonzero(~result.keep):
        j = int(result.duplicate_of[i])
        assert j < i and result.keep[j]
        a, b = shingles(texts[i]), shingles(texts[j])
        exact = len(a & b) / len(a | b)
        assert exact >= 0.8
        assert result.similarity[i] == pytest.approx(exact, abs=1e-12)
    # No two kept texts are equal (exact copies share every band).
    kept = [t for t, k in zip(texts, result.keep) if k and re.search(r"\w", t)]
    assert len(kept) == len(set(kept))


def column_kinds(texts):
    """The same texts as every kind of column `dedup` takes."""
    pd = pytest.importorskip("pandas")
    pa = pytest.importorskip("pyarrow")
    kinds = {
        "list": list(texts),
        "tuple": tuple(texts),
        "numpy object array": np.array(texts, dtype=object),
        "pandas Series": pd.Series(texts),
        "pandas Series string[pyarrow]": pd.Series(texts, dtype="string[pyarrow]"),
        "pyarrow string": pa.array(texts, pa.string()),
        "pyarrow large_string": pa.array(texts, pa.large_string()),
        "pyarrow ChunkedArray": pa.chunked_array([texts[:100], texts[100:101], texts[101:]]),
        "pyarrow slice": pa.array(["x", "y"] + list(texts)).slice(2),
        "pyarrow string_view": pa.array(texts, pa.string_view()),
        "pyarrow dictionary": pa.array(texts).dictionary_encode(),
    }
    try:
        import polars as pl

        kinds["polars Series"] = pl.Series(texts)
    except ImportError:
        pass
    try:
        import datasets

        ds = datasets.Dataset.from_dict({"text": list(reversed(texts))})
        # select reorders the rows: the column follows the dataset's order.
        kinds["datasets column"] = ds.select(range(len(texts) - 1, -1, -1))["text"]
    except ImportError:
        pass
    return kinds


def test_dedup_and_fingerprint_many_take_every_kind_of_column_alike():
    texts = corpus(n=300, seed=3)
    expected = simhashdb.dedup(texts)
    fps = simhashdb.Simhasher().fingerprint_many(texts)
    kinds = column_kinds(texts)
    for name, column in kinds.items():
        got = simhashdb.dedup(column)
        assert (got.keep == expected.keep).all(), name
        assert (got.duplicate_of == expected.duplicate_of).all(), name
        np.testing.assert_array_equal(got.similarity, expected.similarity, err_msg=name)
        assert (simhashdb.Simhasher().fingerprint_many(column) == fps).all(), name
    assert {"polars Series", "datasets column"} <= set(kinds), "polars and datasets are installed for the tests"


def test_dedup_refuses_nulls_and_non_strings_naming_the_position():
    pa = pytest.importorskip("pyarrow")
    with pytest.raises(ValueError, match=r"texts\[2\] is null"):
        simhashdb.dedup(pa.chunked_array([["a", "b"], ["c", None]]).combine_chunks().slice(1))
    with pytest.raises(ValueError, match=r"texts\[3\] is null"):
        simhashdb.dedup(pa.chunked_array([["a", "b"], ["c", None]]))
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got NoneType"):
        simhashdb.dedup(["a", None])
    with pytest.raises(TypeError, match="Arrow array of type int64"):
        simhashdb.dedup(pa.array([1, 2]))
    with pytest.raises(TypeError, match="sequence of str"):
        simhashdb.dedup("one text")
    with pytest.raises(ValueError, match=r"texts\[1\] is null"):
        simhashdb.Simhasher().fingerprint_many(pa.array(["a", None]))


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"threshold": 1.5}, simhashdb.InvalidArgumentError, "threshold must be between 0 and 1"),
        ({"threshold": float("nan")}, simhashdb.InvalidArgumentError, "threshold must be between 0 and 1"),
        ({"threshold": "0.8"}, TypeError, "threshold must be a float"),
        ({"shingle": 0}, simhashdb.InvalidArgumentError, "shingle width must be at least 1"),
        ({"shingle": -1}, ValueError, "shingle"),
        ({"keep": "newest"}, simhashdb.InvalidArgumentError, 'keep must be "first" or "longest"'),
        ({"keep": 1}, TypeError, "keep must be a str"),
        ({"verify": "yes"}, TypeError, "verify must be a bool"),
        ({"distance": 64}, simhashdb.InvalidArgumentError, "distance 64"),
        ({"tokenizer": "nope"}, ValueError, "tokenizer"),
    ],
)
def test_dedup_refuses_bad_options_naming_them(options, error, message):
    with pytest.raises(error, match=re.escape(message)):
        simhashdb.dedup(["a text", "another text"], **options)


def test_dedup_of_nothing_and_of_blank_texts_keeps_everything():
    assert len(simhashdb.dedup([])) == 0
    result = simhashdb.dedup(["", "  ", "--", "", "..."])
    assert result.keep.all() and (result.duplicate_of == -1).all()


# Syllables in other scripts (2, 3 and 4 bytes of UTF-8): a `str` holding
# any of them is not ASCII, and CPython keeps it as 2 or 4 bytes a character.
OTHER_SCRIPTS = {"ka": "ká", "lo": "λο", "mi": "ми", "ne": "ね", "ru": "r😀"}


def other_scripts(texts):
    """Every third text with some syllables in other scripts."""
    out = []
    for i, t in enumerate(texts):
        if i % 3 == 0:
            for a, b in OTHER_SCRIPTS.items():
                t = t.replace(a, b)
        out.append(t)
    return out


def test_dedup_of_texts_in_many_chunks_and_other_scripts_equals_the_command_line(tmp_path):
    # 20,000 texts, 11 MB: read a chunk at a time, both to sketch and to
    # check; a third of them not ASCII.
    texts = other_scripts(corpus(n=20000, seed=9))
    assert sum(not t.isascii() for t in texts) > 6000
    expected = cli_dedup(tmp_path, texts)
    assert len(expected) > 2000
    assert as_drops(simhashdb.dedup(texts)) == expected
    pa = pytest.importorskip("pyarrow")
    assert as_drops(simhashdb.dedup(pa.array(texts))) == expected


def test_dedup_and_fingerprint_many_leave_no_utf8_copy_inside_the_callers_strs():
    # A str that is not ASCII keeps its characters in 2 or 4 bytes each; a
    # UTF-8 copy cached inside it (PyUnicode_AsUTF8AndSize) would live, and
    # grow sys.getsizeof, as long as the str does.
    texts = other_scripts(corpus(n=600, seed=4))
    sizes = [sys.getsizeof(t) for t in texts]
    result = simhashdb.dedup(texts)
    assert result.dropped > 50
    assert [sys.getsizeof(t) for t in texts] == sizes
    fingerprints = simhashdb.Simhasher().fingerprint_many(texts)
    assert [sys.getsizeof(t) for t in texts] == sizes
    assert list(fingerprints) == [simhashdb.Simhasher().fingerprint(t) for t in texts]
    # The check sees such a copy: CPython's own call caches it.
    as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
    as_utf8.argtypes = [ctypes.py_object, ctypes.c_void_p]
    as_utf8.restype = ctypes.c_void_p
    for t in texts:
        as_utf8(t, None)
    assert [sys.getsizeof(t) for t in texts] != sizes


def test_dedup_releases_the_gil():
    from test_threads import ticks_inside

    texts = corpus(n=20000, seed=1)
    assert ticks_inside(lambda: simhashdb.dedup(texts)) > 0


def test_the_readme_dedup_examples_run_and_keep_what_they_say(tmp_path, monkeypatch):
    pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    pytest.importorskip("datasets")
    readme = (ROOT / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "simhashdb.dedup(" in b]
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    scopes = []
    for block in blocks:
        scope = {}
        exec(compile(block, "README.md", "exec"), scope)
        scopes.append(scope)
    assert scopes[0]["deduped"]["id"].tolist() == [1, 3]
    assert scopes[0]["dropped"]["duplicate_of"].tolist() == [0]
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "docs.dedup.parquet")["id"].to_pylist() == [1, 3]
    assert scopes[2]["ds"]["id"] == [1, 3]
