"""simhashdb's dataset dedup against gaoya and datasketch on real documents.

    python python/benches/dedup_peers.py [--docs 6700] [--planted 1005]
        [--out /tmp/dedup-peers] [--tools cli,python,gaoya,datasketch]

The corpus: the machine's `copyright` files (/usr/share/doc) and man pages
(/usr/share/man, decompressed, troff requests and escapes stripped; a
deterministic sample up to --docs documents in all), each once, then
--planted near-copies of random documents (1 to 5 % of their words
substituted, inserted or deleted; at least one edit), shuffled with a fixed
seed and written to one JSONL file with fields `id` and `text`.

Each tool runs in its own process on the same file (its peak resident memory
is that process's, or the CLI's; "dedup s" is the time from the texts in
memory, or the CLI started, to the drops: the JSONL file is read by Python's
`json` for the in-process tools and by the CLI itself), with its documented defaults for
deduplicating at about 0.8 similarity, keeping the first of each group:

- `cli`: `simhashdb dedup docs.jsonl --id-field id --emit drop`;
- `python`: `simhashdb.dedup(texts)` on a pandas Series (when the package
  offers it);
- `gaoya`: `MinHashStringIndex(jaccard_threshold=0.8, num_bands=20,
  band_size=5, analyzer="word", ngram_range=(5, 5))` (word 5-shingles), a
  document dropped when the index holds a near one inserted before it;
- `datasketch`: `MinHashLSH(threshold=0.8, num_perm=128)` over word
  5-shingles, the same rule;
- `text-dedup`: `python -m text_dedup.minhash --threshold 0.8` (text-dedup
  0.4.0 in the virtualenv of $TEXT_DEDUP_PYTHON, its other defaults), the
  rows it does not keep.

Ground truth: the exact Jaccard similarity of word 5-shingle sets (words:
`\\w+`, lower-cased) of every pair a 256-permutation MinHash with 128 bands
of 2 rows proposes (a pair at J >= 0.5 is proposed with probability above
0.9999999). Reported per tool: wall time, peak memory, documents dropped,
**unsafe** drops (a dropped document with no kept document at J >= 0.5),
and **duplicates left** (pairs at J >= 0.8 both kept).
"""

import argparse
import gzip
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

WORD = re.compile(r"\w+")


def strip_troff(text):
    out = []
    for line in text.splitlines():
        if line.startswith((".", "'")):
            # Requests: keep the words of .SH/.SS/.TP/.B/.I lines.
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[0] in (".SH", ".SS", ".B", ".I", ".BR", ".IR", ".IP", ".TP"):
                out.append(parts[1].replace('"', ""))
            continue
        out.append(re.sub(r"\\f[BIRP]|\\\(..|\\[-&e|^]|\\s[-+]?\d", "", line))
    return "\n".join(out)


def corpus(limit, seed):
    docs = []
    for p in sorted(Path("/usr/share/doc").glob("*/copyright")):
        try:
            docs.append(p.read_text(errors="replace"))
        except OSError:
            pass
    pages = sorted(Path("/usr/share/man").glob("man*/*.gz"))
    rng = random.Random(seed)
    rng.shuffle(pages)
    for p in pages:
        if len(docs) >= limit:
            break
        try:
            text = strip_troff(gzip.decompress(p.read_bytes()).decode("utf-8", "replace"))
        except (OSError, EOFError):
            continue
        if len(WORD.findall(text)) >= 50:
            docs.append(text)
    seen, unique = set(), []
    for d in docs:
        if d not in seen:
            seen.add(d)
            unique.append(d)
    return unique


def edit(text, rng):
    words = text.split(" ")
    n = max(1, int(len(words) * rng.uniform(0.01, 0.05)))
    for _ in range(n):
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 0.4:
            words[i] = rng.choice(words)
        elif op < 0.7:
            words.insert(i, rng.choice(words))
        elif len(words) > 1:
            del words[i]
    return " ".join(words)


def shingles(text, w=5):
    words = [x.lower() for x in WORD.findall(text)]
    if len(words) < w:
        return {hash(" ".join(words))} if words else set()
    return {hash(" ".join(words[i : i + w])) for i in range(len(words) - w + 1)}


def truth_pairs(texts):
    """Pairs (i, j, J) with exact J >= 0.5 among the texts."""
    import numpy as np

    sets = [np.fromiter((h & 0xFFFFFFFFFFFFFFFF for h in shingles(t)), dtype=np.uint64) for t in texts]
    rng = np.random.default_rng(1)
    perms = 256
    a = rng.integers(1, 2**61 - 1, size=perms, dtype=np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**61 - 1, size=perms, dtype=np.uint64)
    sigs = np.zeros((len(texts), perms), dtype=np.uint64)
    for i, s in enumerate(sets):
        if len(s) == 0:
            sigs[i] = np.arange(perms, dtype=np.uint64) + np.uint64(i) * np.uint64(1 << 20)
            continue
        with np.errstate(over="ignore"):
            h = s[None, :] * a[:, None] + b[:, None]
        sigs[i] = h.min(axis=1)
    candidates = set()
    for band in range(perms // 2):
        buckets = {}
        for i, key in enumerate(map(bytes, sigs[:, 2 * band : 2 * band + 2])):
            buckets.setdefault(key, []).append(i)
        for members in buckets.values():
            if 1 < len(members) < 2000:
                for x in range(len(members)):
                    for y in range(x + 1, len(members)):
                        candidates.add((members[x], members[y]))
    py_sets = [set(s.tolist()) for s in sets]
    pairs = []
    for i, j in candidates:
        si, sj = py_sets[i], py_sets[j]
        if not si or not sj:
            continue
        jac = len(si & sj) / len(si | sj)
        if jac >= 0.5:
            pairs.append((i, j, jac))
    return pairs


# --- the tools, each run as `python dedup_peers.py --run TOOL FILE OUT` ---


def run_cli(path, out):
    cli = os.environ.get("SIMHASHDB_CLI", "target/release/simhashdb")
    t0 = time.time()
    drops = subprocess.run(
        [cli, "dedup", path, "--id-field", "id", "--emit", "drop"],
        check=True, capture_output=True, text=True,
    ).stdout
    work = time.time() - t0
    dropped = [json.loads(line)["id"] for line in drops.splitlines() if line.strip()]
    Path(out).write_text(json.dumps(dropped))
    return work


def read_texts(path):
    with open(path) as f:
        return [json.loads(line)["text"] for line in f]


def run_python(path, out):
    import pandas as pd
    import simhashdb

    texts = pd.Series(read_texts(path))
    t0 = time.time()
    result = simhashdb.dedup(texts)
    work = time.time() - t0
    Path(out).write_text(json.dumps([int(i) for i in (~result.keep).nonzero()[0]]))
    return work


def run_gaoya(path, out):
    from gaoya.minhash import MinHashStringIndex

    texts = read_texts(path)
    t0 = time.time()
    index = MinHashStringIndex(
        hash_size=32, jaccard_threshold=0.8, num_bands=20, band_size=5,
        analyzer="word", lowercase=True, ngram_range=(5, 5),
    )
    dropped = []
    for i, t in enumerate(texts):
        if index.query(t):
            dropped.append(i)
        else:
            index.insert_document(i, t)
    work = time.time() - t0
    Path(out).write_text(json.dumps(dropped))
    return work


def run_datasketch(path, out):
    from datasketch import MinHash, MinHashLSH

    texts = read_texts(path)
    t0 = time.time()
    lsh = MinHashLSH(threshold=0.8, num_perm=128)
    dropped = []
    for i, t in enumerate(texts):
        m = MinHash(num_perm=128)
        words = [x.lower() for x in WORD.findall(t)]
        m.update_batch(" ".join(words[k : k + 5]).encode() for k in range(max(1, len(words) - 4)))
        if lsh.query(m):
            dropped.append(i)
        else:
            lsh.insert(i, m)
    work = time.time() - t0
    Path(out).write_text(json.dumps(dropped))
    return work


def run_textdedup(path, out):
    """text-dedup's MinHash (`python -m text_dedup.minhash`, threshold 0.8,
    its defaults otherwise, 2 processes), run by the interpreter of
    $TEXT_DEDUP_PYTHON (a virtualenv with text-dedup 0.4.0); the ids it did
    not keep are its drops."""
    python = os.environ["TEXT_DEDUP_PYTHON"]
    work = Path(out).with_suffix(".text-dedup")
    t0 = time.time()
    subprocess.run(
        [python, "-m", "text_dedup.minhash", "--path", "json", "--data_files", path,
         "--split", "train", "--cache_dir", str(work / "cache"), "--output", str(work / "out"),
         "--column", "text", "--num_proc", "2", "--threshold", "0.8"],
        check=True, capture_output=True, text=True,
    )
    seconds = time.time() - t0
    kept = subprocess.run(
        [python, "-c", "import datasets, json, sys; "
         "print(json.dumps(list(datasets.load_from_disk(sys.argv[1])['id'])))", str(work / "out")],
        check=True, capture_output=True, text=True,
    ).stdout
    kept = set(json.loads(kept.strip().splitlines()[-1]))
    n = sum(1 for _ in open(path))
    Path(out).write_text(json.dumps([i for i in range(n) if i not in kept]))
    return seconds


TOOLS = {"cli": run_cli, "python": run_python, "gaoya": run_gaoya, "datasketch": run_datasketch,
         "text-dedup": run_textdedup}


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--run":
        work = TOOLS[sys.argv[2]](sys.argv[3], sys.argv[4])
        print(f"{work:.3f}")
        # This process's own peak (VmHWM: ru_maxrss would carry the peak of
        # the process that started it across exec), or the CLI's, its child.
        status = Path("/proc/self/status").read_text()
        own = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
        print(max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=6700)
    ap.add_argument("--planted", type=int, default=1005)
    ap.add_argument("--out", default="/tmp/dedup-peers")
    ap.add_argument("--tools", default="cli,python,gaoya,datasketch")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    docs = corpus(args.docs, args.seed)
    planted = [edit(rng.choice(docs), rng) for _ in range(args.planted)]
    texts = docs + planted
    rng.shuffle(texts)
    path = out / "docs.jsonl"
    with open(path, "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    size = path.stat().st_size
    t0 = time.time()
    # The truth of this corpus, kept for the next run with the same options.
    cached = out / f"truth-{args.docs}-{args.planted}-{args.seed}-{size}.json"
    if cached.exists():
        pairs = [tuple(p) for p in json.loads(cached.read_text())]
    else:
        pairs = truth_pairs(texts)
        cached.write_text(json.dumps(pairs))
    print(f"corpus: {len(texts)} documents ({len(docs)} distinct, {len(planted)} planted), "
          f"{size / 1e6:.1f} MB; truth: {sum(1 for p in pairs if p[2] >= 0.8)} pairs at J >= 0.8, "
          f"{len(pairs)} at >= 0.5 ({time.time() - t0:.0f} s)", flush=True)
    ideal = set()
    near = {}
    for i, j, jac in pairs:
        near.setdefault(i, []).append((j, jac))
        near.setdefault(j, []).append((i, jac))
    for i in range(len(texts)):
        if any(j < i and j not in ideal and jac >= 0.8 for j, jac in near.get(i, [])):
            ideal.add(i)
    print("| tool | process wall s | dedup s | peak MB | dropped | unsafe | duplicates left (J >= 0.8) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    rows = [("ideal (exact J >= 0.8, keep first)", None, None, None, ideal)]
    for tool in args.tools.split(","):
        result = out / f"{tool}.json"
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--run", tool, str(path), str(result)],
                              capture_output=True, text=True)
        wall = time.time() - t0
        if proc.returncode != 0:
            print(f"| {tool} | failed: {proc.stderr.strip().splitlines()[-1:]} |", flush=True)
            continue
        work_s, peak_kb = proc.stdout.strip().splitlines()[-2:]
        rows.append((tool, wall, float(work_s), int(peak_kb) / 1024, set(json.loads(result.read_text()))))
    for name, wall, work, peak, dropped in rows:
        kept = lambda i: i not in dropped  # noqa: E731
        unsafe = sum(1 for i in dropped if not any(kept(j) for j, _ in near.get(i, [])))
        left = sum(1 for i, j, jac in pairs if jac >= 0.8 and kept(i) and kept(j))
        w = "" if wall is None else f"{wall:.2f}"
        d = "" if work is None else f"{work:.2f}"
        p = "" if peak is None else f"{peak:.0f}"
        print(f"| {name} | {w} | {d} | {p} | {len(dropped)} | {unsafe} | {left} |", flush=True)


if __name__ == "__main__":
    main()
