"""simhashdb.spark.dedup in Spark local mode against the command line's
`simhashdb dedup` on the same JSON Lines file, in the same run.

    python python/benches/spark_dedup_bench.py N [MASTER] [CLI]

N documents (numpy PCG64, seed 7) of 60 to 140 words drawn from 20,000
words, the last 10 % near copies of earlier ones (1 to 3 words replaced),
are written once to a JSONL file {"id", "text"}. Then the command line
(CLI, default target/release/simhashdb) runs `dedup --emit drop`, and a
fresh Spark driver (MASTER, default local[2]) reads the file with an explicit
schema (8 MiB splits, so the file is several partitions read in order) and
runs simhashdb.spark.dedup(emit="drop") to the end (the drops collected to
the driver). The dropped ids, their duplicate_of and similarity must agree.
Prints one JSON object. With SPARK_EVENT_LOG_DIR set, Spark writes its event
log there (python/benches/spark_stages.py sums it by stage).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_corpus(path: str, n: int) -> int:
    rng = np.random.default_rng(7)
    vocabulary = np.array([f"w{i}" for i in range(20_000)])
    originals = n - n // 10
    lengths = rng.integers(60, 141, size=n)
    docs = []
    size = 0
    with open(path, "w") as f:
        for i in range(n):
            if i < originals:
                words = list(vocabulary[rng.integers(0, len(vocabulary), size=lengths[i])])
            else:
                words = list(docs[int(rng.integers(0, originals))])
                for _ in range(int(rng.integers(1, 4))):
                    words[int(rng.integers(0, len(words)))] = str(
                        vocabulary[int(rng.integers(0, len(vocabulary)))]
                    )
            if i < originals:
                docs.append(words)
            line = json.dumps({"id": i, "text": " ".join(words)}) + "\n"
            size += len(line)
            f.write(line)
    return size


def cli_run(cli: str, path: str, out: str) -> dict:
    start = time.perf_counter()
    subprocess.run(
        [cli, "dedup", path, "--emit", "drop", "--id-field", "id", "-o", out],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - start
    drops = {}
    with open(out) as f:
        for line in f:
            r = json.loads(line)
            drops[r["id"]] = (r["duplicate_of"], r["similarity"])
    return {"seconds": seconds, "drops": drops}


def spark_run(path: str, master: str) -> dict:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    events = os.environ.get("SPARK_EVENT_LOG_DIR")
    if events:
        # Each stage's task times, for python/benches/spark_stages.py.
        os.makedirs(events, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", events)
    spark = (
        builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "16")
        .config("spark.sql.files.maxPartitionBytes", str(8 << 20))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    driver = time.perf_counter() - started
    from simhashdb import spark as sspark

    start = time.perf_counter()
    df = spark.read.schema("id long, text string").json(path)
    partitions = df.rdd.getNumPartitions()
    rows = sspark.dedup(df, id="id", emit="drop").select("id", "duplicate_of", "similarity")
    drops = {r["id"]: (r["duplicate_of"], r["similarity"]) for r in rows.collect()}
    seconds = time.perf_counter() - start
    spark.stop()
    return {"seconds": seconds, "driver_start": driver, "partitions": partitions, "drops": drops}


def main() -> None:
    n = int(sys.argv[1])
    master = sys.argv[2] if len(sys.argv) > 2 else "local[2]"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cli = sys.argv[3] if len(sys.argv) > 3 else os.path.join(root, "target/release/simhashdb")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.jsonl")
        size = write_corpus(path, n)
        cli_result = cli_run(cli, path, os.path.join(tmp, "drops.jsonl"))
        spark_result = spark_run(path, master)
    a, b = cli_result.pop("drops"), spark_result.pop("drops")
    same = set(a) == set(b) and all(
        a[i][0] == b[i][0] and abs(a[i][1] - b[i][1]) < 1e-12 for i in a
    )
    print(
        json.dumps(
            {
                "n": n,
                "bytes": size,
                "master": master,
                "dropped": len(a),
                "same_drops": same,
                "cli_seconds": round(cli_result["seconds"], 2),
                "spark_seconds": round(spark_result["seconds"], 2),
                "spark_driver_start": round(spark_result["driver_start"], 2),
                "spark_partitions": spark_result["partitions"],
                "spark_us_per_record": round(1e6 * spark_result["seconds"] / n, 1),
                "cli_us_per_record": round(1e6 * cli_result["seconds"] / n, 2),
                "load_average": os.getloadavg(),
            }
        )
    )
    if not same:
        sys.exit("the drops differ")


if __name__ == "__main__":
    main()
