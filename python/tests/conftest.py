"""Brute-force references (numpy popcount) and data for the tests."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

_BYTE_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 in ``x`` (any shape)."""
    x = np.ascontiguousarray(x, dtype=np.uint64)
    return _BYTE_POPCOUNT[x.view(np.uint8)].reshape(x.shape + (8,)).sum(axis=-1).astype(np.int64)


def distances(fps: np.ndarray, query: int) -> np.ndarray:
    """Hamming distance of every fingerprint from ``query``."""
    return popcount(np.asarray(fps, dtype=np.uint64) ^ np.uint64(query))


def brute_pairs(fps: np.ndarray, k: int) -> np.ndarray:
    """Every (i, j), i < j, within distance k, sorted: an (m, 2) int64 array."""
    fps = np.asarray(fps, dtype=np.uint64)
    found = []
    for i in range(len(fps) - 1):
        d = popcount(fps[i + 1 :] ^ fps[i])
        for j in np.nonzero(d <= k)[0]:
            found.append((i, i + 1 + int(j)))
    return np.array(found, dtype=np.int64).reshape(-1, 2)


def brute_labels(n: int, pairs: np.ndarray) -> np.ndarray:
    """Connected components of ``pairs`` over 0..n, each labelled by its
    smallest member."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        a, b = root(int(i)), root(int(j))
        if a != b:
            parent[max(a, b)] = min(a, b)
    return np.array([root(i) for i in range(n)], dtype=np.int64)


def flip_bits(rng: np.random.Generator, fp: int, bits: int) -> int:
    """``fp`` with ``bits`` distinct random bits flipped."""
    for b in rng.choice(64, size=bits, replace=False):
        fp ^= 1 << int(b)
    return fp


def planted(rng: np.random.Generator, n: int, max_flip: int = 5) -> np.ndarray:
    """``n`` fingerprints: random ones, and about a third near copies of
    earlier ones (0 to ``max_flip`` bits away), so that every distance up to
    k is represented."""
    fps = []
    for _ in range(n):
        if fps and rng.random() < 0.35:
            base = fps[int(rng.integers(len(fps)))]
            fps.append(flip_bits(rng, base, int(rng.integers(0, max_flip + 1))))
        else:
            fps.append(int(rng.integers(0, 2**64, dtype=np.uint64)))
    return np.array(fps, dtype=np.uint64)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261123)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"


def cli_binary():
    """The command-line tool built by `cargo test --release`/`cargo build
    --release`, for tests that check the package against it: the path in
    $SIMHASHDB_CLI (which must exist), else target/release/simhashdb if
    present, else None."""
    given = os.environ.get("SIMHASHDB_CLI")
    if given:
        assert Path(given).is_file(), f"SIMHASHDB_CLI={given} does not exist"
        return given
    default = Path(__file__).resolve().parents[2] / "target" / "release" / "simhashdb"
    if default.is_file():
        return str(default)
    return shutil.which("simhashdb")


def require_spark():
    """Skips the calling module when pyspark, pyarrow or Java is missing,
    unless SIMHASHDB_REQUIRE_SPARK=1 (as in CI), where their absence fails
    the module's imports instead."""
    if os.environ.get("SIMHASHDB_REQUIRE_SPARK") != "1":
        pytest.importorskip("pyspark", reason="pyspark is not installed (pip install './python[spark]')")
        pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install './python[spark]')")
        if shutil.which("java") is None:
            pytest.skip("Spark needs Java (17), and java is not on PATH", allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    """A Spark session in local mode with two executor threads, one per
    test module."""
    import sys

    from pyspark.sql import SparkSession

    # Python workers run this interpreter, which has simhashdb installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("simhashdb-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
