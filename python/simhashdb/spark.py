"""simhashdb.spark: every near-duplicate pair, and the clusters, of a Spark
DataFrame of fingerprints, with simhashdb's kernel searching each part.

Install with ``pip install 'simhashdb[spark]'`` (pyspark >= 4.0, pyarrow).

- ``find_all(df, fingerprint_col="fingerprint", id_col="id", k=3)``:
  a DataFrame ``[id_a, id_b, distance]`` of every pair of rows whose
  fingerprints differ in at most k bits, exactly (none missed, none twice),
  ``id_a < id_b``.
- ``clusters(df, ...)``: a DataFrame ``[id, cluster]``, one row per input row,
  where ``cluster`` is the smallest id of the row's connected component
  (the single-node ``simhashdb.clusters``, labelled by ids).
- ``dedup(df, text="text", ...)``: the rows of a DataFrame of texts without
  their near-duplicates (or, ``emit="drop"``, the dropped rows with the kept
  row each matched), verified as ``simhashdb dedup`` does a dataset, with
  the same answer.
- ``build_index(df, path, ...)``: a new persistent index (segment files and
  a manifest) holding every row, for the online service or
  ``simhashdb.Index.open``; written by the driver from Arrow chunks.

The fingerprint column is a ``LongType`` holding the fingerprint's 64 bits
(Spark has no unsigned type: a fingerprint ``fp`` is stored as
``numpy.uint64(fp).view(numpy.int64)``); ids are longs and should be unique.

The job is the batch algorithm of Manku, Jain and Das Sarma (WWW 2007): each
fingerprint goes to one group per table of the plan, keyed by (table, the
table's prefix of its permuted bits); groups are shuffled to partitions, and
each partition's rows of each table are searched by the Rust kernel
(``Plan.find_all_in_table``) over Arrow batches. A pair is reported only by
the first table whose prefix it shares, so no global de-duplication is
needed. A group larger than ``max_group_rows`` (a skewed prefix: thousands of
near-identical pages) is split into ``b`` chunks by a hash of the row, and
each pair of chunks is searched by its own task, so no executor holds more
than about ``max_group_rows`` rows of it. Clusters are the connected
components of the pairs, computed with DataFrame operations (the
large-star / small-star algorithm of Kiveris et al., SoCC 2014), over one
representative per distinct fingerprint so exact duplicates cost no pairs.
docs/SCALING.md describes the design and its costs.
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Iterator, Optional

import numpy as np

try:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "simhashdb.spark needs pyspark (>= 4.0) and pyarrow: "
        "pip install 'simhashdb[spark]'"
    ) from error

from ._simhashdb import Index, Plan

__all__ = ["find_all", "clusters", "plan_for", "build_index", "dedup"]

#: Groups (rows sharing one table's prefix) larger than this are split.
MAX_GROUP_ROWS = 250_000

#: Rows of the exploded input (one per fingerprint and table) per partition
#: when ``num_partitions`` is not given.
ROWS_PER_PARTITION = 4_000_000

#: The skew sample holds about this many rows of a group of
#: ``max_group_rows`` rows.
_SAMPLE_ROWS_PER_GROUP = 200

PAIRS_SCHEMA = "id_a long, id_b long, distance int"
_EXPLODED_SCHEMA = "id long, fp long, t int, key long, lo int, hi int, chunk int"
_OUTPUT_BATCH = 1 << 20


def plan_for(n: int, k: int = 3, plan: Optional[Plan] = None) -> Plan:
    """The plan a job over ``n`` fingerprints uses: ``plan`` if given (its k
    must be ``k``), else the cost model's choice ``Plan.auto(n, k)``."""
    if plan is None:
        return Plan.auto(max(int(n), 1), k)
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a simhashdb.Plan, got {type(plan).__name__}")
    if plan.k != k:
        raise ValueError(f"plan answers distance {plan.k}, but k is {k}")
    return plan


def _columns(
    df: DataFrame, fingerprint_col: str, id_col: str, name_col: Optional[str] = None
) -> DataFrame:
    """``[id, fp]`` of ``df`` (``[id, fp, name]`` with ``name_col``), with the
    column types checked."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark DataFrame, got {type(df).__name__}")
    fields = {f.name: f.dataType for f in df.schema.fields}
    named = [("fingerprint_col", fingerprint_col), ("id_col", id_col)]
    if name_col is not None:
        named.append(("name_col", name_col))
    for what, name in named:
        if name not in fields:
            raise ValueError(
                f"{what} {name!r} is not a column of the DataFrame "
                f"(columns: {', '.join(fields) or 'none'})"
            )
    if not isinstance(fields[fingerprint_col], T.LongType):
        raise TypeError(
            f"fingerprint column {fingerprint_col!r} must be LongType (the 64 bits "
            f"of each fingerprint), got {fields[fingerprint_col].simpleString()}"
        )
    if not isinstance(fields[id_col], (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
        raise TypeError(
            f"id column {id_col!r} must be an integer type (LongType), "
            f"got {fields[id_col].simpleString()}"
        )
    columns = [F.col(id_col).cast("long").alias("id"), F.col(fingerprint_col).alias("fp")]
    if name_col is not None:
        if not isinstance(fields[name_col], T.StringType):
            raise TypeError(
                f"name column {name_col!r} must be StringType, "
                f"got {fields[name_col].simpleString()}"
            )
        columns.append(F.col(name_col).alias("name"))
    return df.select(*columns)


def _prefix_keys(plan: Plan, fps: np.ndarray, t: int) -> np.ndarray:
    """Table t's prefix of each fingerprint's permuted bits, as int64."""
    permuted = plan.permute(fps, t)
    bits = plan.prefix_bits(t)
    if bits < 64:
        permuted = permuted >> np.uint64(64 - bits)
    return permuted.view(np.int64)


def _heavy_groups(
    base: DataFrame, plan: Plan, n: int, max_group_rows: int, seed: int
) -> dict:
    """``{table: (sorted keys, chunk counts)}`` of the groups estimated to
    hold more than ``max_group_rows`` rows, from a sample of the input
    collected to the driver (about 200 rows per group of that size)."""
    if n <= max_group_rows:
        return {}
    fraction = min(1.0, _SAMPLE_ROWS_PER_GROUP / max_group_rows)
    sample = base.select("fp")
    if fraction < 1.0:
        sample = sample.sample(fraction=fraction, seed=seed)
    fps = sample.toArrow().column("fp").to_numpy().view(np.uint64)
    heavy = {}
    for t in range(plan.table_count):
        keys, counts = np.unique(_prefix_keys(plan, fps, t), return_counts=True)
        estimated = counts / fraction
        big = estimated > max_group_rows
        if big.any():
            # Tasks hold two chunks: about max_group_rows rows.
            chunks = np.ceil(2 * estimated[big] / max_group_rows).astype(np.int64)
            heavy[t] = (keys[big], chunks)
    return heavy


def _exploder(plan: Plan, heavy: dict, fingerprint_col: str):
    """The mapInArrow function sending each row to its group of each table:
    a heavy group's row, in chunk c of b, goes to the b tasks (min(c, x),
    max(c, x)) for x in 0..b-1."""

    def explode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            fp_column = batch.column("fp")
            if fp_column.null_count:
                ids = batch.column("id").to_numpy(zero_copy_only=False)
                first = int(np.flatnonzero(fp_column.is_null().to_numpy(zero_copy_only=False))[0])
                raise ValueError(
                    f"fingerprint column {fingerprint_col!r} is null for id {ids[first]}"
                )
            ids = batch.column("id").to_numpy(zero_copy_only=False)
            signed = fp_column.to_numpy()
            fps = signed.view(np.uint64)
            for t in range(plan.table_count):
                keys = _prefix_keys(plan, fps, t)
                zeros = np.zeros(len(fps), dtype=np.int32)
                columns = [ids, signed, np.full(len(fps), t, dtype=np.int32), keys, zeros, zeros, zeros]
                if t in heavy:
                    columns = _split_heavy(columns, *heavy[t])
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c) for c in columns],
                    names=["id", "fp", "t", "key", "lo", "hi", "chunk"],
                )

    return explode


def _split_heavy(columns, heavy_keys: np.ndarray, chunks: np.ndarray):
    """Replicates the rows of heavy groups to their chunk-pair tasks."""
    ids, signed, ts, keys, lo, hi, chunk = columns
    where = np.searchsorted(heavy_keys, keys)
    where = np.minimum(where, len(heavy_keys) - 1)
    is_heavy = heavy_keys[where] == keys
    if not is_heavy.any():
        return columns
    light = ~is_heavy
    out = [[c[light]] for c in columns]
    rows = np.flatnonzero(is_heavy)
    b = chunks[where[rows]]
    # The chunk of a row: a hash of (id, fingerprint), so it does not depend
    # on the order or batching of the input.
    mixed = (ids[rows].view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ signed[rows].view(
        np.uint64
    )
    mixed ^= mixed >> np.uint64(29)
    mixed *= np.uint64(0xBF58476D1CE4E5B9)
    mixed ^= mixed >> np.uint64(32)
    c = (mixed % b.astype(np.uint64)).astype(np.int32)
    reps = b.astype(np.int64)
    row_of = np.repeat(rows, reps)
    # x runs over 0..b-1 for each row.
    starts = np.cumsum(reps) - reps
    x = (np.arange(int(reps.sum())) - np.repeat(starts, reps)).astype(np.int32)
    c_rep = np.repeat(c, reps)
    out[0].append(ids[row_of])
    out[1].append(signed[row_of])
    out[2].append(ts[row_of])
    out[3].append(keys[row_of])
    out[4].append(np.minimum(c_rep, x))
    out[5].append(np.maximum(c_rep, x))
    out[6].append(c_rep)
    return [np.concatenate(parts) for parts in out]


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x).astype(np.int32)
    bytes_ = x.view(np.uint8).reshape(-1, 8)
    return np.unpackbits(bytes_, axis=1).sum(axis=1).astype(np.int32)


def _searcher(plan: Plan):
    """The mapInArrow function searching a partition: its rows of each
    (table, lo, hi) task, each with ``Plan.find_all_in_table``."""

    def search(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(list(batches), schema=_exploded_arrow_schema())
        if table.num_rows < 2:
            return
        cols = {name: table.column(name).to_numpy() for name in table.column_names}
        order = np.lexsort((cols["hi"], cols["lo"], cols["t"]))
        task = np.stack([cols["t"][order], cols["lo"][order], cols["hi"][order]])
        bounds = np.flatnonzero(np.any(task[:, 1:] != task[:, :-1], axis=0)) + 1
        bounds = np.concatenate(([0], bounds, [len(order)]))
        found = []
        pending = 0
        for s, e in zip(bounds[:-1], bounds[1:]):
            if e - s < 2:
                continue
            rows = order[s:e]
            t, lo, hi = (int(v) for v in task[:, s])
            fps = np.ascontiguousarray(cols["fp"][rows]).view(np.uint64)
            pairs = plan.find_all_in_table(fps, t)
            if lo != hi:
                chunk = cols["chunk"][rows]
                pairs = pairs[chunk[pairs[:, 0]] != chunk[pairs[:, 1]]]
            if len(pairs) == 0:
                continue
            a = cols["id"][rows[pairs[:, 0]]]
            b = cols["id"][rows[pairs[:, 1]]]
            distance = _popcount(fps[pairs[:, 0]] ^ fps[pairs[:, 1]])
            found.append((np.minimum(a, b), np.maximum(a, b), distance))
            pending += len(pairs)
            if pending >= _OUTPUT_BATCH:
                yield _pairs_batch(found)
                found, pending = [], 0
        if found:
            yield _pairs_batch(found)

    return search


def _exploded_arrow_schema() -> pa.Schema:
    return pa.schema(
        [
            ("id", pa.int64()),
            ("fp", pa.int64()),
            ("t", pa.int32()),
            ("key", pa.int64()),
            ("lo", pa.int32()),
            ("hi", pa.int32()),
            ("chunk", pa.int32()),
        ]
    )


def _pairs_batch(found) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(np.concatenate([f[i] for f in found])) for i in range(3)],
        names=["id_a", "id_b", "distance"],
    )


def find_all(
    df: DataFrame,
    fingerprint_col: str = "fingerprint",
    id_col: str = "id",
    k: int = 3,
    *,
    plan: Optional[Plan] = None,
    max_group_rows: int = MAX_GROUP_ROWS,
    num_partitions: Optional[int] = None,
    seed: int = 0,
) -> DataFrame:
    """Every pair of rows of ``df`` whose fingerprints differ in at most k
    bits, exactly, as a DataFrame ``[id_a long, id_b long, distance int]``
    with ``id_a < id_b``; rows with identical fingerprints are a pair.

    plan: the block split (a ``simhashdb.Plan`` with this k); by default
    ``Plan.auto`` for the row count. max_group_rows: groups (rows sharing one
    table's prefix) estimated larger than this, from a sample, are split
    across tasks. num_partitions: partitions of the shuffle; by default
    enough for about 4 M rows per partition (each row goes to every table),
    and at least ``spark.sql.shuffle.partitions``.

    Runs one job to count the rows (and, above ``max_group_rows`` rows, one
    to sample them); the result is lazy, like any DataFrame.
    """
    return _find_all(
        _columns(df, fingerprint_col, id_col),
        fingerprint_col,
        k,
        plan,
        max_group_rows,
        num_partitions,
        seed,
    )


def _find_all(base, fingerprint_col, k, plan, max_group_rows, num_partitions, seed):
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    if isinstance(max_group_rows, bool) or not isinstance(max_group_rows, int) or max_group_rows < 2:
        raise ValueError(f"max_group_rows must be an int >= 2, got {max_group_rows!r}")
    n = base.count()
    plan = plan_for(n, k, plan)
    heavy = _heavy_groups(base, plan, n, max_group_rows, seed)
    spark = base.sparkSession
    if num_partitions is None:
        default = int(spark.conf.get("spark.sql.shuffle.partitions"))
        num_partitions = max(default, math.ceil(n * plan.table_count / ROWS_PER_PARTITION))
    exploded = base.mapInArrow(_exploder(plan, heavy, fingerprint_col), _EXPLODED_SCHEMA)
    return exploded.repartition(num_partitions, "t", "key", "lo", "hi").mapInArrow(
        _searcher(plan), PAIRS_SCHEMA
    )


def clusters(
    df: DataFrame,
    fingerprint_col: str = "fingerprint",
    id_col: str = "id",
    k: int = 3,
    *,
    plan: Optional[Plan] = None,
    max_group_rows: int = MAX_GROUP_ROWS,
    num_partitions: Optional[int] = None,
    seed: int = 0,
    max_rounds: int = 200,
) -> DataFrame:
    """The connected components of ``find_all``'s pairs, as a DataFrame
    ``[id long, cluster long]`` with one row per row of ``df``: ``cluster``
    is the smallest id of the row's component (its own id when it has no
    near-duplicate), so ``cluster == id`` keeps one row of each cluster.

    Arguments as for ``find_all``. Rows with identical fingerprints join
    their cluster directly (find_all runs over one row per distinct
    fingerprint). The components take a few rounds of DataFrame operations
    (O(log^2 n) by the algorithm's bound), each checkpointed
    (``SparkContext.setCheckpointDir`` if set, else a local checkpoint);
    more than ``max_rounds`` is an error.
    """
    base = _columns(df, fingerprint_col, id_col)
    representatives = base.groupBy("fp").agg(F.min("id").alias("id"))
    edges = _find_all(
        representatives, fingerprint_col, k, plan, max_group_rows, num_partitions, seed
    ).select(F.col("id_a").alias("u"), F.col("id_b").alias("v"))
    labels = _components(edges, max_rounds)
    return (
        base.join(representatives.withColumnRenamed("id", "rep"), on="fp")
        .join(labels, F.col("rep") == F.col("node"), "left")
        .select("id", F.coalesce(F.col("label"), F.col("rep")).alias("cluster"))
    )


def _checkpoint(df: DataFrame) -> DataFrame:
    if df.sparkSession.sparkContext.getCheckpointDir() is not None:
        return df.checkpoint(eager=True)
    return df.localCheckpoint(eager=True)


def _large_star(e: DataFrame) -> DataFrame:
    """Each node u links every larger neighbour to the smallest of u and
    its neighbours."""
    both = e.unionByName(e.select(F.col("v").alias("u"), F.col("u").alias("v")))
    smallest = both.groupBy("u").agg(F.least(F.min("v"), F.first("u")).alias("m"))
    return (
        both.where(F.col("v") > F.col("u"))
        .join(smallest, "u")
        .select(F.least("v", "m").alias("u"), F.greatest("v", "m").alias("v"))
        .distinct()
    )


def _small_star(e: DataFrame) -> DataFrame:
    """Each node v links itself and its smaller neighbours to the smallest of
    them."""
    smallest = e.groupBy("v").agg(F.min("u").alias("m"))
    neighbours = e.join(smallest, "v").select(F.col("u").alias("y"), "m")
    selves = smallest.select(F.col("v").alias("y"), "m")
    return (
        neighbours.unionByName(selves)
        .where(F.col("y") != F.col("m"))
        .select(F.least("y", "m").alias("u"), F.greatest("y", "m").alias("v"))
        .distinct()
    )


def _is_star_forest(e: DataFrame) -> bool:
    """Whether every node is a leaf with one (smaller) centre, or a centre
    that is no one's leaf: then each component is a star around its
    smallest node."""
    roles = e.select(F.col("v").alias("node"), F.lit(1).alias("leaf")).unionByName(
        e.select(F.col("u").alias("node"), F.lit(0).alias("leaf"))
    )
    bad = (
        roles.groupBy("node")
        .agg(F.sum("leaf").alias("leaf"), F.count(F.lit(1)).alias("roles"))
        .where((F.col("leaf") > 1) | ((F.col("leaf") == 1) & (F.col("roles") > 1)))
    )
    return bad.isEmpty()


def _components(edges: DataFrame, max_rounds: int) -> DataFrame:
    """``[node, label]`` for every node of ``edges`` (``[u, v]``): the
    smallest node of its connected component (large-star / small-star)."""
    e = _checkpoint(
        edges.select(F.least("u", "v").alias("u"), F.greatest("u", "v").alias("v"))
        .where(F.col("u") != F.col("v"))
        .distinct()
    )
    rounds = 0
    while not _is_star_forest(e):
        rounds += 1
        if rounds > max_rounds:
            raise RuntimeError(
                f"connected components did not converge in {max_rounds} rounds"
            )
        e = _checkpoint(_small_star(_large_star(e)))
    return e.select(F.col("v").alias("node"), F.col("u").alias("label")).unionByName(
        e.select(F.col("u").alias("node"), F.col("u").alias("label")).distinct()
    )


#: Rows the driver fetches at a time in ``build_index``.
BUILD_CHUNK_ROWS = 5_000_000

#: Rows, and bytes of names, of one ``insert_many`` in ``build_index``:
#: well under a WAL frame's limit (256 MiB) at 24 bytes a row plus names.
_INSERT_ROWS = 1_000_000
_INSERT_NAME_BYTES = 64 << 20


def _insert_slices(names, count: int):
    """``(lo, hi)`` ranges covering ``count`` rows, each at most
    ``_INSERT_ROWS`` rows and, with names, about ``_INSERT_NAME_BYTES`` of
    them (a longer name is a slice of its own)."""
    lo = 0
    while lo < count:
        hi = min(count, lo + _INSERT_ROWS)
        if names is not None:
            size = 0
            for i in range(lo, hi):
                size += len(names[i].encode("utf-8")) if names[i] is not None else 0
                if size > _INSERT_NAME_BYTES and i > lo:
                    hi = i
                    break
        yield lo, hi
        lo = hi


def build_index(
    df: DataFrame,
    path,
    fingerprint_col: str = "fingerprint",
    id_col: str = "id",
    name_col: Optional[str] = None,
    k: int = 3,
    *,
    blocks: Optional[int] = None,
    compact: bool = True,
    chunk_rows: int = BUILD_CHUNK_ROWS,
) -> int:
    """Writes every row of ``df`` into a new index at ``path`` and returns
    the number of documents: the index's segment files and manifest, which
    ``simhashdb.Index.open``, ``simhashdb serve`` and the command line open
    like any other.

    The fingerprint column is a ``LongType`` of the fingerprint's 64 bits,
    as for ``find_all``; ids are stored as the 64 bits of their long (a
    negative id ``i`` is document ``i + 2**64``). name_col: an optional
    string column stored as each document's name. k and blocks: the index's
    recorded distance and block split (``Index.open``'s, for the row count);
    compact: merge the index to one segment before it is published.

    ``path`` must not exist. The index is built in a sibling directory
    (``path`` + ``.building``) and renamed to ``path`` when complete, so a
    failure or a killed driver never leaves a partial index at ``path``.
    Ids must be unique: a repeated id is a ValueError naming it, checked
    before anything is written. The driver fetches the rows in chunks of
    about ``chunk_rows`` (one Spark job each over the input, cached for the
    duration) and inserts each in batches of at most 1 M rows (one WAL frame
    each, under its size limit): memory on the driver is bounded by the
    chunk, and the insert runs at ``Index.insert_many``'s
    rate on the driver's cores (docs/SCALING.md: what would build segments on
    the executors instead).
    """
    base = _columns(df, fingerprint_col, id_col, name_col)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative int, got {k!r}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive int, got {chunk_rows!r}")
    target = os.fspath(path)
    if os.path.lexists(target):
        raise FileExistsError(f"{target}: already exists; build_index writes a new index")
    staging = target.rstrip(os.sep) + ".building"
    if os.path.lexists(staging):
        raise FileExistsError(
            f"{staging}: left by an earlier build that did not finish; delete it first"
        )
    if base.where(F.col("id").isNull() | F.col("fp").isNull()).limit(1).count():
        raise ValueError("an id or a fingerprint is null")
    base = base.persist()
    # Set once this call holds the staging directory's lock: only then is the
    # directory this call's to delete (a concurrent build of the same path
    # that lost the race must not delete the winner's).
    owned = False
    try:
        n = base.count()
        repeated = base.groupBy("id").count().where(F.col("count") > 1).limit(1).collect()
        if repeated:
            raise ValueError(
                f"id {repeated[0]['id']} appears {repeated[0]['count']} times: "
                "ids must be unique"
            )
        chunks = max(1, math.ceil(n / chunk_rows))
        keyed = base.withColumn("_chunk", F.pmod(F.xxhash64("id"), F.lit(chunks)))
        written = 0
        with Index.open(staging, k=k, expected_n=max(n, 1), blocks=blocks) as index:
            owned = True
            for c in range(chunks):
                table = keyed.where(F.col("_chunk") == c).drop("_chunk").toArrow()
                if table.num_rows == 0:
                    continue
                ids = table.column("id").to_numpy().astype(np.int64).view(np.uint64)
                fps = table.column("fp").to_numpy().astype(np.int64).view(np.uint64)
                names = table.column("name").to_pylist() if name_col is not None else None
                # Batches of a bounded size: one insert is one WAL frame,
                # which has a size limit (docs/FORMAT.md).
                for lo, hi in _insert_slices(names, len(ids)):
                    index.insert_many(
                        ids[lo:hi], fps[lo:hi], None if names is None else names[lo:hi]
                    )
                written += table.num_rows
            index.flush()
            if compact:
                index.compact()
        if written != n:
            raise RuntimeError(f"{written} rows fetched of {n}: the input changed")
        os.rename(staging, target)
        parent = os.open(os.path.dirname(os.path.abspath(target)), os.O_RDONLY)
        try:
            os.fsync(parent)
        finally:
            os.close(parent)
        return written
    except BaseException:
        if owned:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        base.unpersist()


# ---------------------------------------------------------------------------
# dedup: the verified dataset engine of `simhashdb dedup` on a DataFrame.

#: The Jaccard threshold and shingle width of `simhashdb dedup` on datasets.
DEDUP_THRESHOLD = 0.8
DEDUP_SHINGLE = 5

#: Among the rows that share a band key, each is paired with at most this
#: many of those first in keep order and as many just before it (the
#: command line's bound on a huge bucket: pairs grow with its rows, not
#: their square).
BUCKET_WINDOW = 32

_ROW = "__simhashdb_row"
_SIM = "__simhashdb_similarity"
_SKETCH_SCHEMA = "row long, chars int, size int, keys array<int>"
_CHECKED_SCHEMA = "a long, b long, similarity double"
_FATE_SCHEMA = "row long, kept_row long, similarity double"


def _sketcher(text_col: str, bands_rows, width: int, tokenizer):
    """The mapInArrow function of the first pass: each row's band keys, its
    number of distinct shingles and its length in characters, on the
    executors (``MinHashBands.sketch_many``, in parallel without the GIL)."""

    def sketch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from ._simhashdb import MinHashBands, Simhasher

        bands = MinHashBands(*bands_rows)
        hasher = Simhasher(tokenizer=tokenizer) if tokenizer is not None else None
        for batch in batches:
            column = batch.column(text_col)
            # A null text is blank, as an empty one: kept, never a match.
            column = pc.fill_null(column, "")
            # Read from the Arrow buffers: no Python str per text.
            _, keys, sizes, blank = bands.sketch_many(column, width=width, hasher=hasher)
            chars = pc.utf8_length(column).to_numpy(zero_copy_only=False).astype(np.int32)
            n = len(column)
            flat = keys.view(np.int32).reshape(-1)
            offsets = np.arange(n + 1, dtype=np.int32) * keys.shape[1]
            key_lists = pa.ListArray.from_arrays(
                pa.array(offsets), pa.array(flat), mask=pa.array(blank)
            )
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column(_ROW),
                    pa.array(chars),
                    pa.array(sizes.astype(np.int32)),
                    key_lists,
                ],
                names=["row", "chars", "size", "keys"],
            )

    return sketch


def _checker(width: int, tokenizer):
    """The mapInArrow function of the exact check: the Jaccard similarity of
    each candidate pair's texts (``jaccard_many``)."""

    def check(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc

        from ._simhashdb import Simhasher, jaccard_many

        hasher = Simhasher(tokenizer=tokenizer) if tokenizer is not None else None
        for batch in batches:
            ta = pc.fill_null(batch.column("ta"), "")
            tb = pc.fill_null(batch.column("tb"), "")
            js = jaccard_many(ta, tb, width=width, hasher=hasher)
            yield pa.RecordBatch.from_arrays(
                [batch.column("a"), batch.column("b"), pa.array(js)],
                names=["a", "b", "similarity"],
            )

    return check


def _direct(a, b, similarity, ka, kb):
    """The keep rule over the confirmed pairs of whole connected components
    (parallel sequences: the pairs' rows, their similarity and each row's
    keep-order rank key): the rows visited in keep order, each dropped
    against the most similar earlier row that is kept (ties: the earlier in
    keep order), as the command line's ``direct`` grouping. Returns the
    dropped rows, the kept row each matched and the similarity."""
    rank = {}
    adjacency = {}
    for x, y, s, kx, ky in zip(a, b, similarity, ka, kb):
        rank[x] = kx
        rank[y] = ky
        adjacency.setdefault(x, []).append((y, s))
        adjacency.setdefault(y, []).append((x, s))
    kept = set()
    out_row, out_kept, out_sim = [], [], []
    for node in sorted(rank, key=rank.__getitem__):
        best = None
        mine = rank[node]
        for other, s in adjacency[node]:
            if other not in kept or rank[other] >= mine:
                continue
            if best is None or s > best[1] or (s == best[1] and rank[other] < rank[best[0]]):
                best = (other, s)
        if best is None:
            kept.add(node)
        else:
            out_row.append(node)
            out_kept.append(best[0])
            out_sim.append(best[1])
    return out_row, out_kept, out_sim


def _keeper(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function of the keep rule: a partition holds whole
    components (the pairs are partitioned by component), all handled by one
    call of ``_direct``."""
    batches = [batch for batch in batches if batch.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    a = table.column("a").to_pylist()
    b = table.column("b").to_pylist()
    similarity = table.column("similarity").to_pylist()
    ka = list(zip(table.column("na").to_pylist(), table.column("oa").to_pylist()))
    kb = list(zip(table.column("nb").to_pylist(), table.column("ob").to_pylist()))
    rows, kept, sims = _direct(a, b, similarity, ka, kb)
    yield pa.RecordBatch.from_arrays(
        [pa.array(rows, pa.int64()), pa.array(kept, pa.int64()), pa.array(sims, pa.float64())],
        names=["row", "kept_row", "similarity"],
    )


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def dedup(
    df: DataFrame,
    text: str = "text",
    *,
    id: Optional[str] = None,
    keep: str = "first",
    emit: str = "keep",
    threshold: float = DEDUP_THRESHOLD,
    shingle: int = DEDUP_SHINGLE,
    tokenizer: Optional[str] = None,
    order: Optional[str] = None,
    max_rounds: int = 200,
) -> DataFrame:
    """The rows of ``df`` without their near-duplicates, as ``simhashdb
    dedup`` gives them for the same rows in the same order: verified, with
    the command line's rule and defaults.

    A pair of rows is a near-duplicate when the Jaccard similarity of their
    texts' word ``shingle``-shingles (default 5) is at least ``threshold``
    (default 0.8); the pairs checked are those that share a MinHash band key
    (``MinHashBands.for_threshold(threshold)``: 20 bands of 5 rows at 0.8,
    so a pair at 0.8 is checked with probability 0.9996). Rows are visited in
    keep order and one is dropped only against an earlier row that is kept,
    the most similar (ties: the earlier): in a chain A ~ B ~ C where A and C
    are not similar, A and C are kept and B dropped.

    The command line's ``--verify jaccard:T:W`` is ``threshold=T,
    shingle=W`` (its ``jaccard:T`` alone means ``W = 2``; without
    ``--verify`` it is 0.8 and 5, the defaults here).

    text: the string column holding the text; a null or blank text (no
    letter or digit) is kept and matches nothing. keep: ``"first"`` (the row
    order) or ``"longest"`` (the longest text in characters; ties: the
    first). order: an integer column giving the row order (unique, not
    null: it also identifies the rows inside the job); by default the
    DataFrame's own order as read (``monotonically_increasing_id``: the
    order of the lines of a file, as the command line reads them), which is
    stable only when computing ``df`` again gives the same partitions in
    the same order (a file read does; a ``repartition`` does not: give
    ``order`` then). tokenizer: as ``Simhasher``'s (default ``"words"``).

    emit: ``"keep"`` returns the kept rows (``df``'s columns); ``"drop"``
    returns the dropped rows with two more columns, ``duplicate_of`` (the
    value of column ``id`` of the kept row it matched; ``id`` is then
    required) and ``similarity`` (their Jaccard similarity).

    Sketches, candidates, the exact check and the keep rule all run on the
    executors: the band keys (mapInArrow), the candidates by equal keys
    (window functions and joins), the exact check of each candidate's two
    texts (mapInArrow), the connected components of the confirmed pairs
    (large-star / small-star, at most ``max_rounds`` rounds) and the keep
    rule within each component (mapInArrow over the pairs partitioned by
    component). docs/SCALING.md gives the costs. The candidates, the check
    and the components' rounds run when this returns; the rest is lazy. The
    rows' sketches stay cached (``persist``) for the returned DataFrame.
    """
    if not isinstance(df, DataFrame):
        raise TypeError(f"df must be a pyspark DataFrame, got {type(df).__name__}")
    fields = {f.name: f.dataType for f in df.schema.fields}

    def column(what, name):
        if not isinstance(name, str):
            raise TypeError(f"{what} must be a column name (str), got {type(name).__name__}")
        if name not in fields:
            raise ValueError(
                f"{what} {name!r} is not a column of the DataFrame "
                f"(columns: {', '.join(fields) or 'none'})"
            )

    column("text", text)
    if not isinstance(fields[text], T.StringType):
        raise TypeError(
            f"text column {text!r} must be StringType, got {fields[text].simpleString()}"
        )
    if keep not in ("first", "longest"):
        raise ValueError(f"keep must be 'first' or 'longest', got {keep!r}")
    if emit not in ("keep", "drop"):
        raise ValueError(f"emit must be 'keep' or 'drop', got {emit!r}")
    if id is not None:
        column("id", id)
    elif emit == "drop":
        raise ValueError(
            "emit='drop' names the kept row each dropped row matched by its id: "
            "give id=COLUMN"
        )
    if order is not None:
        column("order", order)
        if not isinstance(fields[order], (T.LongType, T.IntegerType, T.ShortType, T.ByteType)):
            raise TypeError(
                f"order column {order!r} must be an integer type (LongType), "
                f"got {fields[order].simpleString()}"
            )
    if emit == "drop":
        for extra in ("duplicate_of", "similarity"):
            if extra in fields:
                raise ValueError(
                    f"emit='drop' adds a column {extra!r}, and the DataFrame has one already"
                )
    for internal in (_ROW, _ROW + "_kept", _SIM):
        if internal in fields:
            raise ValueError(f"the DataFrame has a column {internal!r}, which dedup uses")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        0.0 <= float(threshold) <= 1.0
    ):
        raise ValueError(f"threshold must be a number from 0 to 1, got {threshold!r}")
    threshold = float(threshold)
    if not _is_int(shingle) or not 1 <= shingle <= 1024:
        raise ValueError(f"shingle must be an int from 1 to 1024 (tokens), got {shingle!r}")
    if not _is_int(max_rounds) or max_rounds < 1:
        raise ValueError(f"max_rounds must be a positive int, got {max_rounds!r}")
    from ._simhashdb import MinHashBands, Simhasher

    if tokenizer is not None:
        Simhasher(tokenizer=tokenizer)  # a bad tokenizer fails here, not on an executor
    bands = MinHashBands.for_threshold(threshold)

    # Each row's key: the order column when given (unique), else its
    # position as read.
    row_key = F.col(order).cast("long") if order is not None else F.monotonically_increasing_id()
    tagged = df.withColumn(_ROW, row_key)
    # The keep order: (rank key) ascending.
    sk = tagged.select(_ROW, text).mapInArrow(
        _sketcher(text, (bands.bands, bands.rows), shingle, tokenizer), _SKETCH_SCHEMA
    )
    sk = sk.withColumn("o", F.col("row"))
    sk = sk.withColumn(
        "neg_chars", (-F.col("chars") if keep == "longest" else F.lit(0)).cast("long")
    )
    sk = sk.persist()
    rank_cols = ["neg_chars", "o"]

    # ---- candidates: rows sharing a band key, each with the first
    # BUCKET_WINDOW rows of its bucket in keep order and the BUCKET_WINDOW
    # just before it.
    from pyspark.sql import Window

    entries = sk.where(F.col("keys").isNotNull()).select(
        "row", *rank_cols, F.posexplode("keys").alias("band", "key")
    )
    # The ranked entries are cached: the heads, the windows and the joins
    # below read them four times, each of which would rank them again.
    bucket = Window.partitionBy("band", "key")
    keyed = (
        entries.withColumn("rn", F.row_number().over(bucket.orderBy(*rank_cols)) - 1)
        .withColumn("members", F.count(F.lit(1)).over(bucket))
        .where(F.col("members") > 1)
        .select("band", "key", "row", "rn")
        .persist()
    )
    heads = keyed.where(F.col("rn") < BUCKET_WINDOW).select(
        "band", "key", F.col("rn").alias("prn"), F.col("row").alias("prow")
    )
    with_heads = keyed.join(heads, ["band", "key"]).where(F.col("prn") < F.col("rn"))
    before = keyed.select(
        "band", "key", F.col("rn").alias("prn"), F.col("row").alias("prow")
    )
    recent = (
        keyed.where(F.col("rn") > BUCKET_WINDOW)
        .select(
            "band",
            "key",
            "row",
            F.explode(
                F.sequence(
                    F.greatest(F.col("rn") - BUCKET_WINDOW, F.lit(BUCKET_WINDOW)),
                    F.col("rn") - 1,
                )
            ).alias("prn"),
        )
        .join(before, ["band", "key", "prn"])
    )
    pairs = (
        with_heads.select("row", "prow")
        .unionByName(recent.select("row", "prow"))
        .select(F.least("row", "prow").alias("a"), F.greatest("row", "prow").alias("b"))
        .distinct()
    )
    # A pair whose set sizes alone bound its Jaccard below the threshold
    # cannot pass: dropped before the texts are joined.
    sizes = sk.select("row", "size")
    pairs = (
        pairs.join(sizes.select(F.col("row").alias("a"), F.col("size").alias("sa")), "a")
        .join(sizes.select(F.col("row").alias("b"), F.col("size").alias("sb")), "b")
        .where(
            (F.greatest("sa", "sb") == 0)
            | (F.least("sa", "sb").cast("double") / F.greatest("sa", "sb") >= F.lit(threshold))
        )
        .select("a", "b")
    )

    # ---- the exact check of each candidate's two texts
    texts = tagged.select(F.col(_ROW).alias("row"), F.col(text).alias("t"))
    confirmed = (
        pairs.join(texts.select(F.col("row").alias("a"), F.col("t").alias("ta")), "a")
        .join(texts.select(F.col("row").alias("b"), F.col("t").alias("tb")), "b")
        .select("a", "b", "ta", "tb")
        .mapInArrow(_checker(shingle, tokenizer), _CHECKED_SCHEMA)
        .where(F.col("similarity") >= F.lit(threshold))
    )
    confirmed = _checkpoint(confirmed)
    keyed.unpersist()

    # ---- the keep rule, within each connected component of the confirmed
    # pairs
    labels = _components(confirmed.select(F.col("a").alias("u"), F.col("b").alias("v")), max_rounds)
    rank_of = sk.select("row", "neg_chars", "o")
    edges = (
        confirmed.join(labels, confirmed["a"] == labels["node"])
        .drop("node")
        .join(
            rank_of.select(
                F.col("row").alias("a"), F.col("neg_chars").alias("na"), F.col("o").alias("oa")
            ),
            "a",
        )
        .join(
            rank_of.select(
                F.col("row").alias("b"), F.col("neg_chars").alias("nb"), F.col("o").alias("ob")
            ),
            "b",
        )
    )
    fates = (
        edges.repartition("label")
        .select("a", "b", "similarity", "na", "oa", "nb", "ob")
        .mapInArrow(_keeper, _FATE_SCHEMA)
    )

    if emit == "keep":
        return (
            tagged.join(fates.select(F.col("row").alias(_ROW)), _ROW, "left_anti")
            .select(*df.columns)
        )
    kept = _ROW + "_kept"
    kept_ids = tagged.select(F.col(_ROW).alias(kept), F.col(id).alias("duplicate_of"))
    dropped = fates.select(
        F.col("row").alias(_ROW), F.col("kept_row").alias(kept), F.col("similarity").alias(_SIM)
    )
    return (
        tagged.join(dropped, _ROW)
        .join(kept_ids, kept)
        .select(*df.columns, "duplicate_of", F.col(_SIM).alias("similarity"))
    )
