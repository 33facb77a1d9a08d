"""simhashdb.spark in Spark local mode against the single-node find_all and
clusters: exact duplicates, planted pairs at distance exactly k, a skewed
prefix (split across tasks), and long chains of near-duplicates.

Needs pyspark, pyarrow and Java; .ci/test installs them and sets
SIMHASHDB_REQUIRE_SPARK=1, which turns a missing one into a failure rather
than a skip."""

import os
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import flip_bits, require_spark

import simhashdb

require_spark()

from simhashdb import Plan  # noqa: E402
from simhashdb import spark as sspark  # noqa: E402


def corpus(seed: int, k: int) -> np.ndarray:
    """Random fingerprints, exact duplicates, pairs at distance exactly k
    (and k + 1, which must not be found), a skewed prefix (400 values that
    differ only in their 16 lowest bits) and a chain of near-duplicates
    whose ends are far apart."""
    rng = np.random.default_rng(seed)
    fps = [int(x) for x in rng.integers(0, 2**64, size=1500, dtype=np.uint64)]
    for _ in range(60):
        fps.append(fps[int(rng.integers(len(fps)))])
    for _ in range(60):
        base = int(rng.integers(0, 2**64, dtype=np.uint64))
        fps += [base, flip_bits(rng, base, k), flip_bits(rng, base, k + 1)]
    dense = 0x0F0F_F0F0_3C3C_0000
    fps += [dense | int(x) for x in rng.integers(0, 1 << 16, size=400)]
    fps += [fps[-1]] * 5
    # A chain: each link flips k fresh bits, so the ends are far apart.
    link = int(rng.integers(0, 2**64, dtype=np.uint64))
    bits = [int(b) for b in rng.permutation(64)]
    for step in range(64 // max(k, 1)):
        for b in bits[step * k : (step + 1) * k]:
            link ^= 1 << b
        fps.append(link)
    return np.array(fps, dtype=np.uint64)


def frame(spark, fps: np.ndarray, seed: int):
    """A DataFrame [id, fingerprint] with shuffled, partly negative ids."""
    rng = np.random.default_rng(seed)
    ids = (rng.permutation(len(fps)).astype(np.int64) - 700) * 7919
    rows = list(zip(ids.tolist(), fps.view(np.int64).tolist()))
    return spark.createDataFrame(rows, "id long, fingerprint long").repartition(3), ids


def expected_pairs(fps, ids, k, blocks=None):
    pairs = simhashdb.find_all(fps, k=k, blocks=blocks)
    out = set()
    for i, j in pairs.tolist():
        a, b = int(ids[i]), int(ids[j])
        out.add((min(a, b), max(a, b), simhashdb.hamming(fps[i], fps[j])))
    return out


def spark_pairs(result):
    rows = [(r.id_a, r.id_b, r.distance) for r in result.collect()]
    assert len(rows) == len(set(rows)), "a pair was reported twice"
    return set(rows)


@pytest.mark.parametrize("k", [3, 0])
def test_find_all_equals_the_single_node_kernel(spark, k):
    fps = corpus(1, k)
    df, ids = frame(spark, fps, 2)
    result = sspark.find_all(df, k=k)
    assert result.columns == ["id_a", "id_b", "distance"]
    got = spark_pairs(result)
    expected = expected_pairs(fps, ids, k)
    assert got == expected
    assert any(d == k for _, _, d in expected) and any(d == 0 for _, _, d in expected)


@pytest.mark.parametrize("max_group_rows", [64, 250])
def test_a_skewed_prefix_is_split_across_tasks_and_nothing_changes(spark, max_group_rows):
    fps = corpus(3, 3)
    df, ids = frame(spark, fps, 4)
    plan = Plan(5, k=3)
    base = sspark._columns(df, "fingerprint", "id")
    heavy = sspark._heavy_groups(base, plan, len(fps), max_group_rows, 0)
    if max_group_rows == 64:
        # Every row is counted (the sample would hold 200 rows per 64). The
        # 400 values sharing their top 48 bits form a heavy group in every
        # table whose prefix lies in those bits.
        assert len(heavy) >= 1
        assert max(int(chunks.max()) for _, chunks in heavy.values()) >= 8
    got = spark_pairs(
        sspark.find_all(df, k=3, plan=plan, max_group_rows=max_group_rows, num_partitions=5)
    )
    assert got == expected_pairs(fps, ids, 3, blocks=5)


def test_find_all_with_a_nested_plan_and_custom_columns(spark):
    fps = corpus(5, 3)
    df, ids = frame(spark, fps, 6)
    df = df.withColumnRenamed("id", "doc").withColumnRenamed("fingerprint", "fp64")
    plan = Plan.nested(4, 4, 3)
    got = spark_pairs(sspark.find_all(df, "fp64", "doc", k=3, plan=plan, max_group_rows=100))
    assert got == expected_pairs(fps, ids, 3)


def test_clusters_equal_the_single_node_clusters(spark):
    fps = corpus(7, 3)
    df, ids = frame(spark, fps, 8)
    result = sspark.clusters(df, k=3, max_group_rows=64)
    assert result.columns == ["id", "cluster"]
    got = {r.id: r.cluster for r in result.collect()}
    assert len(got) == len(fps)
    labels = simhashdb.clusters(fps, k=3)
    smallest = {}
    for position, label in enumerate(labels.tolist()):
        smallest[label] = min(smallest.get(label, ids[position]), ids[position])
    expected = {int(ids[p]): int(smallest[label]) for p, label in enumerate(labels.tolist())}
    assert got == expected
    # The chain is one cluster although its ends are far apart.
    chain = list(range(len(fps) - 21, len(fps)))
    assert len({got[int(ids[p])] for p in chain}) == 1
    assert simhashdb.hamming(fps[chain[0]], fps[chain[-1]]) > 3


def test_bad_columns_are_refused_with_their_names(spark):
    df = spark.createDataFrame([(1, "x")], "id long, fingerprint string")
    with pytest.raises(TypeError, match="'fingerprint' must be LongType"):
        sspark.find_all(df)
    with pytest.raises(ValueError, match="'fp' is not a column"):
        sspark.find_all(df, fingerprint_col="fp")
    good = spark.createDataFrame([(1, 5)], "id long, fingerprint long")
    with pytest.raises(ValueError, match="plan answers distance 3, but k is 2"):
        sspark.find_all(good, k=2, plan=Plan(4, k=3))
    nulls = spark.createDataFrame([(1, 5), (2, None)], "id long, fingerprint long")
    with pytest.raises(Exception, match="null for id 2"):
        sspark.find_all(nulls).collect()


def test_no_rows_and_one_row_give_no_pairs(spark):
    empty = spark.createDataFrame([], "id long, fingerprint long")
    assert sspark.find_all(empty).count() == 0
    assert sspark.clusters(empty).count() == 0
    one = spark.createDataFrame([(9, -1)], "id long, fingerprint long")
    assert sspark.find_all(one).count() == 0
    assert [(r.id, r.cluster) for r in sspark.clusters(one).collect()] == [(9, 9)]


def test_the_readme_spark_example_says_what_it_shows(spark, tmp_path, monkeypatch):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "sspark" in b]
    assert len(block) == 1
    monkeypatch.chdir(tmp_path)  # the example writes crawl.sdb
    scope = {"spark": spark}
    exec(compile(block[0], "README.md", "exec"), scope)
    df = scope["df"]
    assert [tuple(r) for r in sspark.find_all(df, k=3).collect()] == [(1, 2, 1)]
    assert sorted(tuple(r) for r in sspark.clusters(df, k=3).collect()) == [(1, 1), (2, 1), (3, 3)]
    with simhashdb.Index.open_read_only(tmp_path / "crawl.sdb") as index:
        assert len(index) == 3
        assert [(m.id, m.distance) for m in index.query(5)] == [(1, 0), (2, 1)]


@pytest.mark.slow
def test_a_million_fingerprints_with_a_heavy_prefix(spark):
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64, size=1_000_000, dtype=np.uint64)
    fps[:200_000] = np.uint64(0x1234_5678_9A00_0000) | rng.integers(0, 1 << 24, size=200_000, dtype=np.uint64)
    ids = np.arange(len(fps), dtype=np.int64)
    import pyarrow as pa

    df = spark.createDataFrame(pa.table({"id": ids, "fingerprint": fps.view(np.int64)}))
    got = spark_pairs(sspark.find_all(df, k=3, max_group_rows=50_000))
    assert got == expected_pairs(fps, ids, 3)


def popcount64(x: np.ndarray) -> np.ndarray:
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


@pytest.mark.parametrize("compact", [True, False])
def test_build_index_answers_like_brute_force_and_like_insert_many(spark, tmp_path, compact):
    fps = corpus(5, 3)
    df, ids = frame(spark, fps, 5)
    target = tmp_path / "built"
    # Several chunks, so the driver's fetch-and-insert loop runs more than once.
    n = sspark.build_index(df, target, k=3, compact=compact, chunk_rows=700)
    assert n == len(fps)
    assert not (tmp_path / "built.building").exists()
    uids = ids.view(np.uint64)
    with simhashdb.Index.open(tmp_path / "single", k=3, expected_n=len(fps)) as single:
        single.insert_many(uids, fps)
        with simhashdb.Index.open_read_only(target) as built:
            assert len(built) == len(fps)
            assert built.verify()["files"] >= 3
            if compact:
                assert built.stats()["segments"] == 1
            for q in fps[::3]:
                distances = popcount64(fps ^ q)
                expected = sorted(
                    (int(d), int(i)) for i, d in zip(uids, distances) if d <= 3
                )
                got = sorted((m.distance, m.id) for m in built.query(int(q)))
                assert got == expected
                assert got == sorted((m.distance, m.id) for m in single.query(int(q)))


def test_build_index_stores_names_and_negative_ids(spark, tmp_path):
    # Longs carry the 64 bits: -(2**63) + 7 is fingerprint 2**63 + 7.
    rows = [(-5, 7, "a"), (9, -(1 << 63) + 7, None), (12, -1, "c")]
    df = spark.createDataFrame(rows, "id long, fingerprint long, url string")
    assert sspark.build_index(df, tmp_path / "idx", name_col="url") == 3
    with simhashdb.Index.open_read_only(tmp_path / "idx") as index:
        doc = index.get_doc(2**64 - 5)
        assert (doc.fingerprint, doc.name) == (7, "a")
        assert index.get_doc(9).name is None
        assert index.get(9) == (1 << 63) | 7
        assert index.get(12) == 2**64 - 1
        assert [m.id for m in index.query(7, k=0)] == [2**64 - 5]


def test_build_index_refuses_repeated_ids_an_existing_path_and_bad_columns(spark, tmp_path):
    df = spark.createDataFrame([(1, 10), (2, 20), (1, 30)], "id long, fingerprint long")
    with pytest.raises(ValueError, match=r"id 1 appears 2 times"):
        sspark.build_index(df, tmp_path / "dup")
    assert not (tmp_path / "dup").exists() and not (tmp_path / "dup.building").exists()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    good = spark.createDataFrame([(1, 10)], "id long, fingerprint long")
    with pytest.raises(FileExistsError, match="already exists"):
        sspark.build_index(good, tmp_path / "taken")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
    with pytest.raises(ValueError, match="'url' is not a column"):
        sspark.build_index(good, tmp_path / "x", name_col="url")
    with pytest.raises(TypeError, match="must be StringType"):
        sspark.build_index(good, tmp_path / "x", name_col="fingerprint")
    nulls = spark.createDataFrame([(1, None)], "id long, fingerprint long")
    with pytest.raises(ValueError, match="null"):
        sspark.build_index(nulls, tmp_path / "x")
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.building").exists()


def test_build_index_splits_inserts_under_the_wal_frame_limit():
    # Rows and name bytes per insert_many are bounded, every row once.
    names = ["x" * 40_000_000, None, "y" * 30_000_000, "z" * 10, "w" * 70_000_000]
    slices = list(sspark._insert_slices(names, len(names)))
    assert slices == [(0, 2), (2, 4), (4, 5)]
    assert list(sspark._insert_slices(None, 2_500_000)) == [
        (0, 1_000_000),
        (1_000_000, 2_000_000),
        (2_000_000, 2_500_000),
    ]
    assert list(sspark._insert_slices(None, 0)) == []


def test_build_index_losing_a_race_leaves_the_winners_staging_directory(
    spark, tmp_path, monkeypatch
):
    # Another build of the same path holds its staging directory open, and
    # this one got past the "already there" check before it was created (the
    # check is made to miss it here).
    target = tmp_path / "idx"
    df = spark.createDataFrame([(1, 10), (2, 20)], "id long, fingerprint long")
    real_lexists = os.path.lexists
    monkeypatch.setattr(
        os.path, "lexists", lambda p: False if str(p).endswith(".building") else real_lexists(p)
    )
    with simhashdb.Index.open(tmp_path / "idx.building", k=3) as winner:
        winner.insert(5, 50)
        winner.flush()
        with pytest.raises(simhashdb.LockedError):
            sspark.build_index(df, target)
        assert (tmp_path / "idx.building" / "MANIFEST").is_file()
    monkeypatch.undo()
    assert not target.exists()
    with simhashdb.Index.open_read_only(tmp_path / "idx.building") as index:
        assert index.get(5) == 50
