"""The Python package against the Rust library in the same process, and
against the peers a Python user would pick. Figures go to docs/BENCHMARKS.md.

Needs the package built with the Rust baselines (the feature
`rust-baselines`, which adds `simhashdb._simhashdb._baselines`: the same
library calls as a Rust program, timed in Rust), and optionally faiss-cpu and
simhash (1e0ng's) for the peers; python/benches/run.sh sets that up.

    python python/benches/bench.py [--quick]

Each figure is the best of ROUNDS runs (the machine is shared and noisy);
Python and Rust runs alternate so that both see the same conditions.
"""

import argparse
import gc
import os
import platform
import shutil
import tempfile
import time

import numpy as np

import simhashdb
from simhashdb import Index, Simhasher
from simhashdb._simhashdb import _baselines as rust

ROUNDS = 7

WORDS = (
    "the crawler fetched page number on day before noon and stored its fingerprint in the index "
    "a reader compared every document with the segment table block manifest of our old server "
    "each shard rejected merged compacted written synced flushed recovered queried by many threads "
    "storage engines keep logs tables files bytes checksums near duplicate pages web news forum"
).split()


def texts(n: int, words: int, seed: int = 1) -> list:
    """``n`` texts of ``words`` words each (about 6 bytes a word), deterministic."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(WORDS), size=(n, words))
    vocab = np.array(WORDS)
    return [" ".join(row) for row in vocab[picks]]


def best(runs: int, fn):
    """The smallest of ``runs`` timings ``fn()`` returns (or measures)."""
    out = []
    for _ in range(runs):
        gc.collect()
        out.append(fn())
    return min(out)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_query(n: int, queries: int, rows: list):
    rng = np.random.default_rng(2)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    with tempfile.TemporaryDirectory() as tmp:
        with Index.open(os.path.join(tmp, "q"), expected_n=n) as index:
            index.insert_many(np.arange(n, dtype=np.uint64), fps)
            # One segment, and no merge running on the background thread
            # while the loops are timed.
            index.compact()
            # Half stored fingerprints (one match each), half random (none).
            qs = np.concatenate([fps[: queries // 2], rng.integers(0, 2**64, size=queries - queries // 2, dtype=np.uint64)])
            qs_list = [int(q) for q in qs]
            # Warm both paths (pages of the segment, caches).
            rust.query_loop(index, qs)
            for q in qs_list:
                index.query(q)
            py_times, rust_times = [], []
            for _ in range(ROUNDS):
                py_times.append(timed(lambda: [index.query(q) for q in qs_list]))
                rust_times.append(rust.query_loop(index, qs)[0])
            found_py = sum(len(index.query(q)) for q in qs_list)
            found_rust = rust.query_loop(index, qs)[1]
            assert found_py == found_rust, (found_py, found_rust)
            py_us = min(py_times) / queries * 1e6
            rust_us = min(rust_times) / queries * 1e6
            py_median = sorted(py_times)[ROUNDS // 2] / queries * 1e6
            rust_median = sorted(rust_times)[ROUNDS // 2] / queries * 1e6
            many = best(3, lambda: timed(lambda: index.query_many(qs))) / queries * 1e6
            # The binding's own cost: `get` goes through the same argument
            # parsing, lock and GIL release; and queries that find nothing
            # against those that find one document (one Match object).
            half = queries // 2
            split = {"get": [], "py found": [], "rust found": [], "py none": [], "rust none": []}
            for _ in range(ROUNDS):
                split["get"].append(timed(lambda: [index.get(q) for q in qs_list[:half]]))
                split["py found"].append(timed(lambda: [index.query(q) for q in qs_list[:half]]))
                split["rust found"].append(rust.query_loop(index, qs[:half])[0])
                split["py none"].append(timed(lambda: [index.query(q) for q in qs_list[half:]]))
                split["rust none"].append(rust.query_loop(index, qs[half:])[0])
            us = {key: min(v) / half * 1e6 for key, v in split.items()}
            rows.append(("query, one call per fingerprint", f"{n:,} docs, {queries:,} queries (half found)",
                         f"{py_us:.2f} us/call (median {py_median:.2f})",
                         f"{rust_us:.2f} us/call (median {rust_median:.2f})",
                         f"overhead {py_us - rust_us:+.2f} us/call (medians: {py_median - rust_median:+.2f})"))
            rows.append(("query finding one document", f"{half:,} queries",
                         f"{us['py found']:.2f} us/call", f"{us['rust found']:.2f} us/call",
                         f"overhead {us['py found'] - us['rust found']:+.2f} us/call"))
            rows.append(("query finding nothing", f"{half:,} queries",
                         f"{us['py none']:.2f} us/call", f"{us['rust none']:.2f} us/call",
                         f"overhead {us['py none'] - us['rust none']:+.2f} us/call"))
            rows.append(("get (a stored id)", f"{half:,} calls", f"{us['get']:.2f} us/call", "", "the binding's floor"))
            rows.append(("query_many (parallel, GIL released)", f"{n:,} docs, {queries:,} queries",
                         f"{many:.2f} us/query", f"{rust_us:.2f} us/query (one thread)",
                         f"{rust_us / many:.2f}x the Rust loop's rate"))
            return fps, qs


def bench_insert_many(n: int, rows: list):
    rng = np.random.default_rng(3)
    ids = np.arange(n, dtype=np.uint64)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    py_times, rust_times = [], []
    for round_ in range(ROUNDS):
        for side in ("py", "rust") if round_ % 2 else ("rust", "py"):
            tmp = tempfile.mkdtemp()
            try:
                # A memtable large enough for every document: the write-ahead
                # log and memtable path on both sides, no flush or merge.
                with Index.open(os.path.join(tmp, "i"), expected_n=n, memtable_bytes=1 << 30) as index:
                    if side == "py":
                        py_times.append(timed(lambda: index.insert_many(ids, fps)))
                    else:
                        rust_times.append(rust.insert_batch(index, ids, fps))
            finally:
                shutil.rmtree(tmp)
    py_rate, rust_rate = n / min(py_times), n / min(rust_times)
    rows.append(("insert_many (numpy arrays, one batch)", f"{n:,} docs into a new index",
                 f"{py_rate / 1e6:.2f} M docs/s", f"{rust_rate / 1e6:.2f} M docs/s",
                 f"{py_rate / rust_rate:.1%} of Rust's rate"))


def bench_fingerprint_many(n: int, words: int, rows: list):
    corpus = texts(n, words)
    mb = sum(len(t) for t in corpus) / 1e6
    hasher = Simhasher()
    py_times, rust_times = [], []
    for _ in range(ROUNDS):
        py_times.append(timed(lambda: hasher.fingerprint_many(corpus)))
        rust_times.append(rust.fingerprint_many(hasher, corpus))
    assert np.array_equal(hasher.fingerprint_many(corpus[:100]), [hasher.fingerprint(t) for t in corpus[:100]])
    py_rate, rust_rate = mb / min(py_times), mb / min(rust_times)
    rows.append(("fingerprint_many (list of str)", f"{n:,} texts of {words} words ({mb:.0f} MB)",
                 f"{py_rate:.0f} MB/s", f"{rust_rate:.0f} MB/s", f"{py_rate / rust_rate:.1%} of Rust's rate"))
    sample = corpus[:20000]
    one = best(3, lambda: timed(lambda: [hasher.fingerprint(t) for t in sample]))
    rows.append(("fingerprint, one call per text", f"{len(sample):,} texts of {words} words",
                 f"{len(sample) / one / 1e3:.0f} k texts/s", "", "one thread"))
    return corpus, min(py_times) / n * 1e6


def bench_find_all(n: int, rows: list):
    rng = np.random.default_rng(4)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    py_times, rust_times = [], []
    pairs_py = pairs_rust = None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        pairs_py = simhashdb.find_all(fps, k=3, blocks=6)
        py_times.append(time.perf_counter() - start)
        seconds, pairs_rust = rust.find_all(fps, 3, 6)
        rust_times.append(seconds)
    assert len(pairs_py) == pairs_rust
    rows.append(("find_all (numpy uint64 array, k = 3, 6 blocks)", f"{n:,} random fingerprints",
                 f"{min(py_times):.3f} s", f"{min(rust_times):.3f} s",
                 f"{min(rust_times) / min(py_times):.1%} of Rust's rate"))
    return fps


def bench_faiss(fps: np.ndarray, queries: np.ndarray, rows: list, simhashdb_query_us: float):
    try:
        import faiss
    except ImportError:
        rows.append(("faiss-cpu IndexBinaryMultiHash", "not installed", "", "", ""))
        return
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    data = fps.view(np.uint8).reshape(-1, 8)
    # 4 hash tables of 16 bits: exact for distances up to 3 (pigeonhole), as ours.
    build = []
    index = None
    for _ in range(3):
        start = time.perf_counter()
        index = faiss.IndexBinaryMultiHash(64, 4, 16)
        index.add(data)
        build.append(time.perf_counter() - start)
    rows.append(("faiss IndexBinaryMultiHash(64, 4, 16): add", f"{len(fps):,} fingerprints (in memory only)",
                 f"{len(fps) / min(build) / 1e6:.2f} M/s", "", "compare insert_many"))
    q = queries.view(np.uint8).reshape(-1, 8)
    one = [q[i : i + 1] for i in range(len(q))]
    per_call = best(3, lambda: timed(lambda: [index.range_search(x, 4) for x in one])) / len(q) * 1e6
    batch = best(3, lambda: timed(lambda: index.range_search(q, 4))) / len(q) * 1e6
    lims, _, labels = index.range_search(q, 4)
    rows.append(("faiss: range_search (radius < 4), one call per query", f"{len(q):,} queries",
                 f"{per_call:.2f} us/call", "", f"simhashdb.Index.query: {simhashdb_query_us:.2f} us/call"))
    rows.append(("faiss: range_search, one batch", f"{len(q):,} queries (found {len(labels):,})",
                 f"{batch:.2f} us/query", "", ""))
    start = time.perf_counter()
    lims, _, labels = index.range_search(data, 4)
    self_join = time.perf_counter() - start
    pairs = (len(labels) - len(fps)) // 2
    rows.append(("faiss: range_search of every fingerprint (= find_all)", f"{len(fps):,} fingerprints",
                 f"{self_join:.3f} s", "", f"{pairs} pairs"))


def bench_1e0ng(corpus: list, rows: list, ours_per_text_us: float):
    try:
        from simhash import Simhash, SimhashIndex
    except ImportError:
        rows.append(("simhash (1e0ng)", "not installed", "", "", ""))
        return
    sample = corpus[:2000]
    start = time.perf_counter()
    hashes = [Simhash(t) for t in sample]
    per_text = (time.perf_counter() - start) / len(sample) * 1e6
    rows.append(("1e0ng simhash: Simhash(text)", f"{len(sample):,} texts", f"{per_text:.0f} us/text", "",
                 f"simhashdb fingerprint_many: {ours_per_text_us:.2f} us/text"))
    rng = np.random.default_rng(5)
    n = 20000
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    objs = [(str(i), Simhash(int(fp))) for i, fp in enumerate(fps)]
    start = time.perf_counter()
    index = SimhashIndex(objs, k=3)
    build = time.perf_counter() - start
    start = time.perf_counter()
    for _, h in objs[:2000]:
        index.get_near_dups(h)
    query = (time.perf_counter() - start) / 2000 * 1e6
    rows.append(("1e0ng simhash: SimhashIndex(k=3) build", f"{n:,} fingerprints", f"{n / build / 1e3:.0f} k/s", "", ""))
    rows.append(("1e0ng simhash: get_near_dups", "2,000 queries", f"{query:.0f} us/query", "", ""))
    assert hashes


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs per figure (the best is kept)")
    parser.add_argument("--only-query", action="store_true", help="only the query figures")
    args = parser.parse_args()
    globals()["ROUNDS"] = args.rounds
    scale = 10 if args.quick else 1
    rows = []
    fps, qs = bench_query(1_000_000 // scale, 20_000 // scale, rows)
    query_us = float(rows[0][2].split()[0])
    if not args.only_query:
        run_the_rest(scale, rows, fps, qs, query_us)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} cores, {platform.machine()}")
    print("| what | data | Python | Rust, same process | ratio |")
    print("|------|------|--------|--------------------|-------|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def run_the_rest(scale, rows, fps, qs, query_us):
    bench_insert_many(1_000_000 // scale, rows)
    corpus, per_text = bench_fingerprint_many(100_000 // scale, 160, rows)
    bench_find_all(1_000_000 // scale, rows)
    bench_faiss(fps, qs, rows, query_us)
    bench_1e0ng(corpus, rows, per_text)


if __name__ == "__main__":
    main()
