"""What the memory of a Python process running simhashdb.dedup is made of,
next to the `simhashdb dedup` command's peak on the same records.

    python python/benches/dedup_memory.py DOCS.jsonl [--rounds 2]

DOCS.jsonl has fields `id` and `text` (python/benches/dedup_peers.py writes
one). Each case runs in a fresh interpreter, which reports its resident
memory (VmRSS) after starting, after its imports and after reading the
texts (the user's data, present before the call), then resets its peak
(`5` to /proc/self/clear_refs) and reports what `simhashdb.dedup` added:
the peak during the call (VmHWM) minus the resident memory just before.
Cases:

- `pandas-str`: a pandas Series of Python `str` (read with `json`), as
  python/benches/dedup_peers.py does (imports numpy, pandas, pyarrow);
- `pandas-arrow`: a pandas Series of `ArrowDtype(string)`, read with
  `pyarrow.json` (same imports);
- `arrow`: the `text` column of a pyarrow Table read with `pyarrow.json`
  (imports pyarrow only).

The command's peak is that of `simhashdb dedup DOCS.jsonl --emit drop`
($SIMHASHDB_CLI, default target/release/simhashdb), a child of a fresh
process (its ru_maxrss).
"""

import argparse
import os
import resource
import subprocess
import sys

CHILD = r"""
import json, re, sys, time
def status(key):
    return int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
case, path = sys.argv[1], sys.argv[2]
start = status("VmRSS")
if case == "arrow":
    import pyarrow.json as paj
else:
    import numpy, pandas as pd, pyarrow, pyarrow.json as paj
import simhashdb
imports = status("VmRSS")
if case == "pandas-str":
    with open(path) as f:
        texts = pd.Series([json.loads(line)["text"] for line in f])
else:
    table = paj.read_json(path, read_options=paj.ReadOptions(block_size=1 << 24))
    texts = table["text"] if case == "arrow" else table.to_pandas(types_mapper=pd.ArrowDtype)["text"]
data = status("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
t0 = time.time()
result = simhashdb.dedup(texts)
seconds = time.time() - t0
peak = status("VmHWM")
print(f"{start:.0f}\t{imports - start:.0f}\t{data - imports:.0f}\t{peak - data:.1f}\t{peak:.0f}\t{result.dropped}\t{seconds:.2f}")
"""


def cli_peak(path):
    cli = os.environ.get("SIMHASHDB_CLI", "target/release/simhashdb")
    code = (
        "import resource, subprocess, sys; "
        "out = subprocess.run(sys.argv[1:], check=True, capture_output=True, text=True).stdout; "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, len(out.splitlines()))"
    )
    out = subprocess.run([sys.executable, "-c", code, cli, "dedup", path, "--emit", "drop"],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("docs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cases", default="pandas-str,pandas-arrow,arrow")
    args = ap.parse_args()
    print("| round | case | interpreter MB | imports MB | texts MB | call adds MB | process peak MB | dropped | call s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in range(args.rounds):
        peak, dropped = cli_peak(args.docs)
        print(f"| {r + 1} | `simhashdb dedup` (CLI) | | | | | {peak:.0f} | {dropped} | |", flush=True)
        for case in args.cases.split(","):
            out = subprocess.run([sys.executable, "-c", CHILD, case, args.docs],
                                 check=True, capture_output=True, text=True).stdout.strip()
            cells = " | ".join(out.split("\t"))
            print(f"| {r + 1} | {case} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
