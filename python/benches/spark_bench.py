"""simhashdb.spark.find_all in Spark local mode against the single-node
kernel (simhashdb.find_all) on the same fingerprints, in the same run.

    python python/benches/spark_bench.py N [MASTER ...]

N random fingerprints (numpy, seed 7) with 1 % planted near-duplicates
(1 to 3 bits away) are written once to a Parquet file; then the single-node
kernel runs on the numpy array, and for each MASTER (default: local[1]
local[2]) a fresh Spark driver reads the Parquet file and runs
simhashdb.spark.find_all to completion (the "noop" sink), with the same plan
(5 blocks, k = 3: 10 tables). Each Spark run is a separate process, so its
JVM and Python workers start cold; the time includes the row count and the
skew sample the job runs first. The pair counts must agree.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

K = 3
BLOCKS = 5


def corpus(n: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    planted = n // 100
    sources = rng.integers(0, n - planted, size=planted)
    flips = np.zeros(planted, dtype=np.uint64)
    for _ in range(3):
        flips |= np.uint64(1) << rng.integers(0, 64, size=planted).astype(np.uint64)
    fps[n - planted :] = fps[sources] ^ flips
    return fps


def start_session(master: str):
    """A Spark session for the benchmarks (the Python workers run this
    interpreter)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.shuffle.partitions", "16")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_run(path: str, master: str) -> dict:
    from simhashdb import Plan
    from simhashdb import spark as sspark

    started = time.perf_counter()
    session = start_session(master)
    up = time.perf_counter()
    df = session.read.parquet(path)
    pairs = sspark.find_all(df, k=K, plan=Plan(BLOCKS, k=K))
    pairs.cache()
    count = pairs.count()
    done = time.perf_counter()
    session.stop()
    return {"master": master, "pairs": count, "start_s": up - started, "job_s": done - up}


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--spark":
        print(json.dumps(spark_run(sys.argv[2], sys.argv[3])))
        return
    n = int(sys.argv[1])
    masters = sys.argv[2:] or ["local[1]", "local[2]"]
    import pyarrow as pa
    import pyarrow.parquet as pq

    import simhashdb

    fps = corpus(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fingerprints.parquet")
        table = pa.table({"id": np.arange(n, dtype=np.int64), "fingerprint": fps.view(np.int64)})
        pq.write_table(table, path, row_group_size=1 << 20)
        started = time.perf_counter()
        single = simhashdb.find_all(fps, k=K, blocks=BLOCKS)
        single_s = time.perf_counter() - started
        print(f"single node: {len(single)} pairs in {single_s:.2f} s", flush=True)
        for master in masters:
            out = subprocess.run(
                [sys.executable, __file__, "--spark", path, master],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["pairs"] == len(single), (result, len(single))
            print(
                f"{master}: {result['pairs']} pairs, job {result['job_s']:.1f} s "
                f"(+ {result['start_s']:.1f} s to start the driver), "
                f"{result['job_s'] / single_s:.1f}x the single-node kernel",
                flush=True,
            )


if __name__ == "__main__":
    main()
