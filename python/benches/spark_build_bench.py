"""simhashdb.spark.build_index in Spark local mode against the single-node
build (Index.open, insert_many, flush, compact) of the same fingerprints, in
the same run.

    python python/benches/spark_build_bench.py N [MASTER]

The data is spark_bench.py's (N random fingerprints, numpy seed 7, 1 %
planted near-duplicates), written once to a Parquet file with ids 0..N-1.
The single-node build inserts the numpy arrays in batches of 1 M; the Spark run
(default local[2], a fresh driver process) reads the Parquet file and runs
build_index to completion (its null and repeated-id checks, the chunked
fetch, the insert, the compaction). Both indexes are then opened and must
hold N documents and answer the same queries (a sample of 1,000).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from spark_bench import K, corpus, start_session


def spark_build(parquet: str, out: str, master: str) -> dict:
    from simhashdb import spark as sspark

    started = time.perf_counter()
    session = start_session(master)
    up = time.perf_counter()
    n = sspark.build_index(session.read.parquet(parquet), out, k=K)
    done = time.perf_counter()
    session.stop()
    return {"master": master, "docs": n, "start_s": up - started, "job_s": done - up}


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--spark":
        print(json.dumps(spark_build(sys.argv[2], sys.argv[3], sys.argv[4])))
        return
    n = int(sys.argv[1])
    master = sys.argv[2] if len(sys.argv) > 2 else "local[2]"
    import pyarrow as pa
    import pyarrow.parquet as pq

    import simhashdb

    fps = corpus(n)
    ids = np.arange(n, dtype=np.uint64)
    with tempfile.TemporaryDirectory() as tmp:
        parquet = os.path.join(tmp, "fingerprints.parquet")
        table = pa.table({"id": ids.view(np.int64), "fingerprint": fps.view(np.int64)})
        pq.write_table(table, parquet, row_group_size=1 << 20)
        single_dir = os.path.join(tmp, "single")
        started = time.perf_counter()
        with simhashdb.Index.open(single_dir, k=K, expected_n=n) as index:
            for lo in range(0, n, 1_000_000):  # one WAL frame per call: bounded
                index.insert_many(ids[lo : lo + 1_000_000], fps[lo : lo + 1_000_000])
            index.flush()
            index.compact()
        single_s = time.perf_counter() - started
        print(f"single node: {n} documents in {single_s:.2f} s ({n / single_s / 1e6:.2f} M/s)", flush=True)
        built_dir = os.path.join(tmp, "built")
        out = subprocess.run(
            [sys.executable, __file__, "--spark", parquet, built_dir, master],
            check=True,
            capture_output=True,
            text=True,
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["docs"] == n, (result, n)
        with simhashdb.Index.open_read_only(single_dir) as a, simhashdb.Index.open_read_only(built_dir) as b:
            assert len(a) == len(b) == n
            for q in fps[:: max(1, n // 1000)]:
                assert [(m.id, m.distance) for m in a.query(int(q))] == [
                    (m.id, m.distance) for m in b.query(int(q))
                ]
        print(
            f"{master}: build_index {n} documents, job {result['job_s']:.1f} s "
            f"(+ {result['start_s']:.1f} s to start the driver), "
            f"{result['job_s'] / single_s:.1f}x the single-node build",
            flush=True,
        )


if __name__ == "__main__":
    main()
