"""simhashdb.spark.dedup in Spark local mode against the command line's
`simhashdb dedup` on the same rows written as JSON Lines: planted
near-copies, chains (A ~ B, B ~ C, A !~ C), exact copies in a bucket larger
than the candidate window, ties under keep="longest", empty and null texts;
and its options' validation.

Needs pyspark, pyarrow and Java, as test_spark.py."""

import json
import subprocess

import numpy as np
import pytest
from conftest import cli_binary, require_spark

require_spark()

from pyspark.sql import types as T  # noqa: E402

import simhashdb  # noqa: E402
from simhashdb import spark as sspark  # noqa: E402


def edit(rng, words, count, vocabulary, same_length=False):
    """``words`` with ``count`` words replaced, far apart."""
    words = list(words)
    spots = rng.choice(np.arange(5, len(words) - 5, 11), size=count, replace=False)
    for s in spots:
        if same_length:
            old = words[s]
            words[s] = old[::-1] if old[::-1] != old else old.upper()
        else:
            words[s] = str(rng.choice(vocabulary)) + "z"
    return words


def corpus(seed: int):
    """Rows ``(id, text)``: unique documents, planted near-copies (one or two
    words edited: Jaccard of word 5-shingles about 0.9 or 0.81), chains whose
    ends are below 0.8, copies of one text more than twice the candidate
    window, same-length copies (ties for keep="longest"), a longer copy,
    and empty, blank and null texts."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(3000)]

    def doc(n=100):
        return [str(w) for w in rng.choice(vocabulary, size=n)]

    texts = []
    for _ in range(120):
        texts.append(doc(int(rng.integers(60, 140))))
    for _ in range(40):
        base = texts[int(rng.integers(len(texts)))]
        texts.append(edit(rng, base, int(rng.integers(1, 3)), vocabulary))
    for _ in range(10):
        a = doc(100)
        b = edit(rng, a, 2, vocabulary)
        c = edit(rng, b, 2, vocabulary)
        texts += [a, b, c]
    many = doc(80)
    texts += [many] * (2 * sspark.BUCKET_WINDOW + 6)
    for _ in range(6):
        base = doc(90)
        texts += [base, edit(rng, base, 1, vocabulary, same_length=True), base]
        texts.append(base + ["tail"])
    texts = [" ".join(t) for t in texts]
    texts += ["", "   ", "... !!!", None, "", None]
    order = rng.permutation(len(texts))
    texts = [texts[i] for i in order]
    return [(f"doc-{i:04d}", t) for i, t in enumerate(texts)]


def run_cli(tmp_path, rows, *args):
    """`simhashdb dedup --emit drop` of ``rows`` as JSON Lines (a null text
    written as an empty one): ``{id: (duplicate_of, similarity)}``."""
    cli = cli_binary()
    assert cli is not None, "the command line is not built (cargo build --release)"
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as f:
        for i, t in rows:
            f.write(json.dumps({"id": i, "text": t if t is not None else ""}) + "\n")
    out = subprocess.run(
        [cli, "dedup", str(path), "--emit", "drop", "--id-field", "id", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    dropped = {}
    for line in out.splitlines():
        r = json.loads(line)
        dropped[r["id"]] = (r["duplicate_of"], r["similarity"])
    return dropped


def frame(spark, rows):
    schema = T.StructType(
        [T.StructField("id", T.StringType()), T.StructField("text", T.StringType())]
    )
    return spark.createDataFrame(rows, schema)


def spark_drops(df, **options):
    got = sspark.dedup(df, id="id", emit="drop", **options).collect()
    return {r["id"]: (r["duplicate_of"], r["similarity"]) for r in got}


def assert_same(got, want):
    assert set(got) == set(want)
    for i in want:
        assert got[i][0] == want[i][0], i
        assert got[i][1] == pytest.approx(want[i][1], abs=1e-12), i


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_spark_dedup_drops_what_the_command_line_drops(spark, tmp_path, keep):
    rows = corpus(7)
    want = run_cli(tmp_path, rows, "--keep", keep)
    # The corpus has what it is for: near-copies, chains and blank texts
    # kept.
    assert 100 < len(want) < len(rows) - 150
    df = frame(spark, rows)
    got = spark_drops(df, keep=keep)
    assert_same(got, want)
    kept = {r["id"] for r in sspark.dedup(df, keep=keep).collect()}
    assert kept == {i for i, _ in rows} - set(want)
    # Blank and null texts are kept.
    for i, t in rows:
        if t is None or not any(c.isalnum() for c in t):
            assert i in kept


def test_spark_dedup_keeps_the_chains_ends(spark, tmp_path):
    words = [f"word{i}" for i in range(100)]
    a = list(words)
    b = list(a)
    b[20], b[70] = "x", "y"
    c = list(b)
    c[30], c[85] = "p", "q"
    rows = [("a", " ".join(a)), ("b", " ".join(b)), ("c", " ".join(c))]
    assert simhashdb.jaccard(rows[0][1], rows[1][1]) >= 0.8
    assert simhashdb.jaccard(rows[1][1], rows[2][1]) >= 0.8
    assert simhashdb.jaccard(rows[0][1], rows[2][1]) < 0.8
    got = spark_drops(frame(spark, rows))
    assert set(got) == {"b"} and got["b"][0] == "a"
    assert_same(got, run_cli(tmp_path, rows))
    # In the reverse order, c is kept and b dropped against it; a is kept.
    reverse = rows[::-1]
    got = spark_drops(frame(spark, reverse))
    assert set(got) == {"b"} and got["b"][0] == "c"
    assert_same(got, run_cli(tmp_path, reverse))
    # Columns named like the job's own intermediate ones are the caller's.
    from pyspark.sql import functions as F

    named = frame(spark, rows).withColumn("row", F.lit(9)).withColumn("kept_row", F.lit(7))
    out = sspark.dedup(named, id="id", emit="drop").collect()
    assert [(r["id"], r["duplicate_of"], r["row"], r["kept_row"]) for r in out] == [("b", "a", 9, 7)]


def test_spark_dedup_order_column_gives_the_row_order(spark, tmp_path):
    rows = corpus(11)
    want = run_cli(tmp_path, rows, "--keep", "first")
    shuffled = [(i, t, pos) for pos, (i, t) in enumerate(rows)]
    np.random.default_rng(3).shuffle(shuffled)
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("text", T.StringType()),
            T.StructField("pos", T.LongType()),
        ]
    )
    df = spark.createDataFrame(shuffled, schema).repartition(3)
    assert_same(spark_drops(df, order="pos"), want)


def test_spark_dedup_threshold_and_shingle_as_the_command_lines_verify(spark, tmp_path):
    rows = corpus(5)
    want = run_cli(tmp_path, rows, "--verify", "jaccard:0.6:3")
    assert_same(spark_drops(frame(spark, rows), threshold=0.6, shingle=3), want)


def test_spark_dedup_keeps_the_columns_and_refuses_bad_options(spark):
    df = frame(spark, [("a", "one two three four five six"), ("b", None)]).withColumn(
        "n", __import__("pyspark.sql.functions", fromlist=["lit"]).lit(1)
    )
    out = sspark.dedup(df)
    assert out.columns == ["id", "text", "n"]
    assert out.count() == 2
    with pytest.raises(ValueError, match="text 'body' is not a column"):
        sspark.dedup(df, text="body")
    with pytest.raises(TypeError, match="text column 'n' must be StringType"):
        sspark.dedup(df, text="n")
    with pytest.raises(ValueError, match="keep must be 'first' or 'longest'"):
        sspark.dedup(df, keep="newest")
    with pytest.raises(ValueError, match="emit must be 'keep' or 'drop'"):
        sspark.dedup(df, emit="groups")
    with pytest.raises(ValueError, match="give id=COLUMN"):
        sspark.dedup(df, emit="drop")
    with pytest.raises(ValueError, match="threshold must be a number from 0 to 1"):
        sspark.dedup(df, threshold=1.5)
    with pytest.raises(ValueError, match="shingle must be an int from 1 to 1024"):
        sspark.dedup(df, shingle=0)
    with pytest.raises(ValueError, match="tokenizer"):
        sspark.dedup(df, tokenizer="nonsense")
    with pytest.raises(TypeError, match="order column 'text' must be an integer type"):
        sspark.dedup(df, order="text")
    with pytest.raises(ValueError, match="already"):
        sspark.dedup(df.withColumnRenamed("n", "similarity"), id="id", emit="drop")
