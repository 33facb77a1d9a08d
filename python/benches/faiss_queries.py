"""The in-RAM reference for the persistent index's query figures: FAISS's
binary multi-index hashing on N random 64-bit fingerprints, queried one at a
time at Hamming distance <= 3, one thread, with the query mix of
`examples/index_bench.rs` (even queries a stored fingerprint with one bit
flipped, odd ones random). Figures go to docs/BENCHMARKS.md next to
index_bench's. From the repository root:

    python3 -m venv target/faiss-venv
    target/faiss-venv/bin/pip install numpy faiss-cpu psutil
    target/faiss-venv/bin/python python/benches/faiss_queries.py [--n 50000000] [--queries 20000]

The fingerprints come from numpy's generator, not index_bench's xorshift:
the same distribution, other values. Each query is one `range_search` call
from Python, so the figures include the call's own cost (`--n 20000` shows
it: the same calls on an index small enough to stay in the CPU's caches).
The first queries' answers are checked against a brute-force scan, after
the timed passes.
"""

import argparse
import os
import platform
import time

import numpy as np
import psutil


def percentile(sorted_us, p):
    return sorted_us[round((len(sorted_us) - 1) * p)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50_000_000, help="fingerprints (default 50 M)")
    ap.add_argument("--queries", type=int, default=20_000, help="queries per timed pass (default 20,000)")
    ap.add_argument("--passes", type=int, default=2, help="timed passes (default 2)")
    ap.add_argument(
        "--layout",
        default="2x32:1",
        help="TABLESxBITS:NFLIP (default 2x32:1; 4x16:0 is exact at distance 3 too)",
    )
    ap.add_argument("--checked", type=int, default=20, help="queries checked against brute force (default 20)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import faiss

    faiss.omp_set_num_threads(1)
    print(f"# {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, faiss {faiss.__version__}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()}")
    rng = np.random.default_rng(args.seed)
    fps = rng.integers(0, 2**64, size=args.n, dtype=np.uint64, endpoint=False)
    data = fps.view(np.uint8).reshape(-1, 8)
    r = rng.integers(0, 2**64, size=args.queries * args.passes, dtype=np.uint64, endpoint=False)
    near = fps[(r % np.uint64(args.n)).astype(np.int64)] ^ (np.uint64(1) << (r >> np.uint64(58)))
    queries = np.where(np.arange(len(r)) % 2 == 0, near, rng.integers(0, 2**64, size=len(r), dtype=np.uint64))
    q8 = queries.view(np.uint8).reshape(-1, 8)

    shape, nflip = args.layout.split(":")
    tables, bits = (int(x) for x in shape.split("x"))
    rss0 = psutil.Process().memory_info().rss
    start = time.perf_counter()
    index = faiss.IndexBinaryMultiHash(64, tables, bits)
    index.nflip = int(nflip)
    index.add(data)
    build = time.perf_counter() - start
    rss = psutil.Process().memory_info().rss - rss0
    print(
        f"IndexBinaryMultiHash({tables} x {bits} bits, nflip {nflip}): add {args.n:,} in {build:.1f} s "
        f"({args.n / build / 1e6:.2f} M/s), {rss / 2**30:.2f} GiB more resident ({rss / args.n:.0f} B per fingerprint)"
    )
    for p in range(args.passes):
        times = []
        found = 0
        for i in range(p * args.queries, (p + 1) * args.queries):
            t = time.perf_counter_ns()
            lims, _, _ = index.range_search(q8[i : i + 1], 4)
            times.append((time.perf_counter_ns() - t) / 1000)
            found += int(lims[1])
        times.sort()
        print(
            f"  pass {p + 1}: {args.queries:,} queries at k = 3, one at a time: p50 {percentile(times, 0.5):.1f} us, "
            f"p99 {percentile(times, 0.99):.1f} us, mean {sum(times) / len(times):.1f} us, max {times[-1]:.0f} us; "
            f"{found:,} found"
        )
    # Exactness, after the timed passes so that pass 1 is the first queries:
    # the first queries against a brute-force scan.
    for i in range(min(args.checked, len(queries))):
        lims, dist, labels = index.range_search(q8[i : i + 1], 4)
        got = sorted(zip(dist.tolist(), labels.tolist()))
        d = np.bitwise_count(fps ^ queries[i])
        hits = np.nonzero(d <= 3)[0]
        want = sorted(zip(d[hits].astype(int).tolist(), hits.tolist()))
        assert got == want, f"query {i}: faiss {got} against brute force {want}"


if __name__ == "__main__":
    main()
