"""`simhashdb.dedup` on a pandas DataFrame (and on the pyarrow column of the
same file) against `simhashdb dedup` on the same records as JSONL, and gaoya
(MinHash LSH, pip) when it is installed: wall time and peak memory, each in a
process of its own, in one run. Figures go to docs/BENCHMARKS.md. From the
repository root, with the package and pandas installed in the interpreter
that runs it and the release binary built:

    python python/benches/dedup_dataframe.py [--gigabytes 0.05] [--cli target/release/simhashdb]

The data is that of python/benches/dedup_datasets.py (paragraphs of this
machine's package documentation and man pages, 10 % edited copies), one
JSONL file, deleted at the end. Each measured step runs in a fresh process;
its peak memory is that process's maximum resident size (`ru_maxrss`).
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

STEPS = {
    # Each prints {"seconds": ..., "dropped": ..., "drops": [...]} after
    # reading `path`; "load" is the time of reading the file into memory.
    "pandas": """
import json, sys, time, pandas as pd, numpy as np, simhashdb
t0 = time.perf_counter(); df = pd.read_json(sys.argv[1], lines=True); t1 = time.perf_counter()
r = simhashdb.dedup(df["text"]); t2 = time.perf_counter()
drops = [[int(df["id"][i]), int(df["id"][int(r.duplicate_of[i])])] for i in np.flatnonzero(~r.keep)]
print(json.dumps({"load": t1 - t0, "seconds": t2 - t1, "dropped": int(r.dropped), "drops": drops}))
""",
    "pyarrow": """
import json, sys, time, pyarrow.json as pj, numpy as np, simhashdb
t0 = time.perf_counter(); table = pj.read_json(sys.argv[1]); t1 = time.perf_counter()
r = simhashdb.dedup(table["text"]); t2 = time.perf_counter()
ids = table["id"].to_numpy()
drops = [[int(ids[i]), int(ids[int(r.duplicate_of[i])])] for i in np.flatnonzero(~r.keep)]
print(json.dumps({"load": t1 - t0, "seconds": t2 - t1, "dropped": int(r.dropped), "drops": drops}))
""",
    "gaoya": """
import json, sys, time, pandas as pd
from gaoya.minhash import MinHashStringIndex
t0 = time.perf_counter(); df = pd.read_json(sys.argv[1], lines=True); t1 = time.perf_counter()
texts = df["text"].tolist()
index = MinHashStringIndex(hash_size=32, jaccard_threshold=0.8, num_bands=20, band_size=5,
                           analyzer="word", lowercase=True, ngram_range=(5, 5))
index.par_bulk_insert_docs(list(range(len(texts))), texts)
similar = index.par_bulk_query(texts)
dropped = set()
for i in range(len(texts)):
    if i in dropped:
        continue
    for j in similar[i]:
        if j > i:
            dropped.add(j)
t2 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "seconds": t2 - t1, "dropped": len(dropped), "drops": []}))
""",
}


def run_step(name, path):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", STEPS[name], path], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        return {"tool": name, "error": out.stderr.strip().splitlines()[-1:]}
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(out.stdout)
    result.update(tool=name, wall=wall, peak_kib=peak)
    return result


def run_cli(cli, path, work):
    drops = os.path.join(work, "drops.jsonl")
    start = time.perf_counter()
    subprocess.run(
        [cli, "dedup", path, "--id-field", "id", "--emit", "drop", "-o", drops],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(drops) as f:
        pairs = [json.loads(line) for line in f]
    return {
        "tool": "cli",
        "wall": wall,
        "seconds": wall,
        "peak_kib": peak,
        "dropped": len(pairs),
        "drops": [[d["id"], d["duplicate_of"]] for d in pairs],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gigabytes", type=float, default=0.05)
    ap.add_argument("--cli", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "target/release/simhashdb"))
    args = ap.parse_args()
    import dedup_datasets

    work = tempfile.mkdtemp(prefix="dedup-dataframe-")
    try:
        pool = dedup_datasets.paragraph_pool()
        records, text_bytes, written, injected = dedup_datasets.generate(work, args.gigabytes, pool, shards=1)
        path = os.path.join(work, "part-000.jsonl")
        print(
            f"{records} records, {text_bytes / 1e6:.1f} MB of text, {written / 1e6:.1f} MB of JSONL, "
            f"{sum(injected.values())} injected copies; {platform.platform()}, {os.cpu_count()} CPUs, "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        # Each step runs in a fresh copy of this script (`--one`) whose only
        # child is the tool: RUSAGE_CHILDREN's maximum is then that tool's.
        results = []
        for name in ["cli", "pandas", "pyarrow", "gaoya"]:
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, path, args.cli],
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                results.append({"tool": name, "error": out.stderr.strip().splitlines()[-1:]})
                continue
            results.append(json.loads(out.stdout))
        cli = next(r for r in results if r["tool"] == "cli")
        for r in results:
            if "error" in r:
                print(f"{r['tool']}: not run: {r['error']}")
                continue
            same = "" if not r["drops"] else ("same drops as the CLI" if r["drops"] == cli["drops"] else "DIFFERENT drops")
            load = f", reading {r['load']:.2f} s" if "load" in r else ""
            print(
                f"{r['tool']:8} dedup {r['seconds']:.2f} s{load}, process wall {r['wall']:.2f} s, "
                f"peak RSS {r['peak_kib'] / 1024:.0f} MiB, dropped {r['dropped']} {same}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        name, path, cli = sys.argv[2], sys.argv[3], sys.argv[4]
        if name == "cli":
            print(json.dumps(run_cli(cli, path, os.path.dirname(path))))
        else:
            print(json.dumps(run_step(name, path)))
    else:
        main()
