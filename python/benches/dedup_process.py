"""simhashdb.dedup as a whole Python process against text-dedup's MinHash
command and the `simhashdb dedup` command, on the same JSON lines file.

    python python/benches/dedup_process.py DOCS.jsonl [--rounds 2]
        [--tools python,cli,text-dedup] [--out /tmp/dedup-process]

DOCS.jsonl has fields `id` and `text` (python/benches/dedup_peers.py writes
one: its --out directory's docs.jsonl). Each tool runs as its own process,
from start to exit, the tools alternating, `--rounds` times each:

- `python`: a fresh interpreter (this one) that imports pyarrow and
  simhashdb, reads the file with `pyarrow.json`, runs `simhashdb.dedup` on
  the `text` column and writes the kept rows to an Arrow file
  (uncompressed, as text-dedup's `save_to_disk` does); it reports the
  time of each step (import, read, dedup, write);
- `cli`: `simhashdb dedup DOCS.jsonl --emit keep` to a file ($SIMHASHDB_CLI,
  default target/release/simhashdb);
- `text-dedup`: `python -m text_dedup.minhash --threshold 0.8` (text-dedup
  0.4 in the virtualenv of $TEXT_DEDUP_PYTHON, its other defaults, 2
  processes), which reads the file with `datasets` and saves the kept rows
  with `save_to_disk`; its own timer's steps are reported.

Printed: each run's wall time (process start to exit), peak memory of the
process (or of the command and its children), rows kept, and the steps.
"""

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

PYTHON_RUN = r"""
import sys, time
t0 = time.time()
import pyarrow.feather as feather, pyarrow.json as paj
import simhashdb
t1 = time.time()
table = paj.read_json(sys.argv[1], read_options=paj.ReadOptions(block_size=1 << 24))
t2 = time.time()
result = simhashdb.dedup(table["text"])
t3 = time.time()
feather.write_feather(table.filter(result.keep), sys.argv[2], compression="uncompressed")
t4 = time.time()
print(f"kept {result.kept}; import {t1 - t0:.2f} s, read {t2 - t1:.2f} s, "
      f"dedup {t3 - t2:.2f} s, write {t4 - t3:.2f} s", file=sys.stderr)
"""


def peak_mb_of_children():
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def run(tool, docs, out):
    """(wall s, peak MB, summary) of one run of `tool`, in a child process
    of a fresh measuring process (so that its peak is its own)."""
    proc = subprocess.run([sys.executable, __file__, "--one", tool, str(docs), str(out)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{tool} failed: {proc.stderr[-2000:]}")
    wall, peak, summary = proc.stdout.strip().split("\t")
    return float(wall), float(peak), summary


def one(tool, docs, out):
    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if tool == "python":
        cmd = [sys.executable, "-c", PYTHON_RUN, docs, str(out / "kept.arrow")]
    elif tool == "cli":
        cli = os.environ.get("SIMHASHDB_CLI", "target/release/simhashdb")
        cmd = [cli, "dedup", docs, "--emit", "keep", "-o", str(out / "kept.jsonl")]
    elif tool == "text-dedup":
        cmd = [os.environ["TEXT_DEDUP_PYTHON"], "-m", "text_dedup.minhash", "--path", "json",
               "--data_files", docs, "--split", "train", "--cache_dir", str(out / "cache"),
               "--output", str(out / "kept"), "--column", "text", "--num_proc", "2",
               "--threshold", "0.8"]
    t0 = time.time()
    # (COLUMNS: text-dedup's log lines are not wrapped.)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    wall = time.time() - t0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(proc.returncode)
    log = proc.stderr + proc.stdout
    if tool == "python":
        summary = log.strip().splitlines()[-1]
    elif tool == "cli":
        kept = sum(1 for _ in open(out / "kept.jsonl"))
        summary = f"kept {kept}"
    else:
        steps = dict(re.findall(r"(Loading|MinHashing|Clustering|Filtering|Saving|Cleaning|Total)\s+:\s+(?:\S+\.py:\d+\s+)?([\d.]+)s", log))
        after = re.findall(r"After\s+:\s+(?:\S+\.py:\d+\s+)?(\d+)", log)
        summary = f"kept {after[-1] if after else '?'}; " + ", ".join(f"{k} {v} s" for k, v in steps.items())
    print(f"{wall:.2f}\t{peak_mb_of_children():.0f}\t{summary}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--one":
        one(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("docs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tools", default="python,cli,text-dedup")
    ap.add_argument("--out", default="/tmp/dedup-process")
    args = ap.parse_args()
    print("| round | tool | process wall s | peak MB | kept, steps |")
    print("|---|---|---:|---:|---|")
    for r in range(args.rounds):
        for tool in args.tools.split(","):
            wall, peak, summary = run(tool, os.path.abspath(args.docs), Path(args.out) / tool)
            print(f"| {r + 1} | {tool} | {wall:.2f} | {peak:.0f} | {summary} |", flush=True)


if __name__ == "__main__":
    main()
