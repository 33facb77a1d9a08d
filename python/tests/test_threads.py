"""An Index shared by Python threads: queries during writes, atomic
check-and-insert races, close while in use, and long calls without the GIL."""

import threading
import time

import numpy as np
from conftest import brute_pairs, flip_bits, planted

import simhashdb
from simhashdb import Index, Match, Simhasher


def fp_of(i: int) -> int:
    return (i * 0x9E3779B97F4A7C15 + 12345) % 2**64


def test_queries_during_writes_see_every_acknowledged_document(index_dir):
    acknowledged = [0]  # documents 0..acknowledged[0] were inserted and acknowledged
    errors = []
    stop = threading.Event()

    def writer(index):
        for start in range(0, 6000, 200):
            ids = np.arange(start, start + 200, dtype=np.uint64)
            index.insert_many(ids, [fp_of(int(i)) for i in ids])
            acknowledged[0] = start + 200
        stop.set()

    def reader(index, seed):
        rng = np.random.default_rng(seed)
        while not stop.is_set():
            done = acknowledged[0]
            if done == 0:
                continue
            i = int(rng.integers(done))
            hits = index.query(fp_of(i), 3)
            if not any(m.id == i and m.distance == 0 for m in hits):
                errors.append(f"document {i} missing after acknowledgement")
            for m in hits:
                if m.fingerprint != fp_of(m.id) or m.distance != simhashdb.hamming(m.fingerprint, fp_of(i)):
                    errors.append(f"wrong match {m!r} for {i}")

    with Index.open(index_dir, memtable_bytes=16384) as index:
        threads = [threading.Thread(target=writer, args=(index,))]
        threads += [threading.Thread(target=reader, args=(index, s)) for s in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(index) == 6000
        many = index.query_many([fp_of(i) for i in range(6000)], k=0)
        assert all(hits[0] == Match(i, fp_of(i), 0) for i, hits in enumerate(many))


def test_of_near_identical_documents_checked_at_once_exactly_one_is_inserted(index_dir):
    rng = np.random.default_rng(3)
    with Index.open(index_dir) as index:
        for round_ in range(20):
            base = int(rng.integers(0, 2**64, dtype=np.uint64))
            fps = [flip_bits(rng, base, int(rng.integers(0, 2))) for _ in range(6)]
            barrier = threading.Barrier(6)
            results = [None] * 6

            def attempt(t):
                barrier.wait()
                results[t] = index.insert_if_new(round_ * 100 + t, fps[t])

            threads = [threading.Thread(target=attempt, args=(t,)) for t in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            winners = [t for t in range(6) if results[t] == []]
            assert len(winners) == 1, results
            winner = round_ * 100 + winners[0]
            for t in range(6):
                if t != winners[0]:
                    assert [m.id for m in results[t]] == [winner]
                    assert index.get(round_ * 100 + t) is None


def test_check_by_name_races_keep_one_document(index_dir):
    text = "a story about a lighthouse keeper and the ships she guided home through the storm"
    with Index.open(index_dir) as index:
        barrier = threading.Barrier(4)
        results = [None] * 4

        def attempt(t):
            barrier.wait()
            results[t] = index.check(f"https://mirror{t}.example/story", text)

        threads = [threading.Thread(target=attempt, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results.count(None) == 1
        kept = results.index(None)
        assert all(r.name == f"https://mirror{kept}.example/story" for r in results if r is not None)
        assert len(index) == 1


def test_close_while_threads_use_the_index(index_dir):
    index = Index.open(index_dir, memtable_bytes=8192)
    index.insert_many(np.arange(2000, dtype=np.uint64), [fp_of(i) for i in range(2000)])
    outcomes = []
    working = [threading.Event() for _ in range(3)]

    def user(t):
        n = 0
        try:
            while True:
                assert index.query(fp_of(n % 2000))[0].id == n % 2000
                index.insert(10_000 + t * 100_000 + n, fp_of(n))
                n += 1
                working[t].set()
        except simhashdb.ClosedError:
            outcomes.append(n)

    threads = [threading.Thread(target=user, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for event in working:
        assert event.wait(timeout=60)
    time.sleep(0.1)
    index.close()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    assert len(outcomes) == 3 and all(n > 0 for n in outcomes)
    # The lock was released: reopen and find what the threads wrote.
    with Index.open(index_dir) as again:
        assert len(again) == 2000 + sum(outcomes)
        again.verify()


def ticks_inside(call) -> int:
    """Runs ``call`` on a thread while this one counts loop iterations; returns
    how many fell in the middle half of the call. With the GIL held through
    the call, none could."""
    span = []

    def worker():
        start = time.perf_counter()
        call()
        span.extend([start, time.perf_counter()])

    thread = threading.Thread(target=worker)
    ticks = []
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    thread.join()
    start, end = span
    quarter = (end - start) / 4
    return sum(1 for t in ticks if start + quarter < t < end - quarter)


def test_long_calls_release_the_gil(index_dir):
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64, size=2_000_000, dtype=np.uint64)
    assert ticks_inside(lambda: simhashdb.find_all(fps, k=3)) > 0
    assert ticks_inside(lambda: simhashdb.clusters(fps, k=3)) > 0
    texts = ["storage engine crawler page number %d " % i * 40 for i in range(20000)]
    assert ticks_inside(lambda: Simhasher().fingerprint_many(texts)) > 0
    with Index.open(index_dir) as index:
        assert ticks_inside(lambda: index.insert_many(np.arange(len(fps), dtype=np.uint64), fps)) > 0
        assert ticks_inside(lambda: index.query_many(fps[:200_000])) > 0
        # A few more documents first, so that compact has a memtable to flush
        # and then every segment (2 M documents) to merge into one: never a
        # near no-op, whatever the merge thread did meanwhile.
        more = np.arange(len(fps), len(fps) + 1000, dtype=np.uint64)
        index.insert_many(more, fps[:1000])
        assert ticks_inside(index.compact) > 0


def test_find_all_from_several_threads_at_once_is_exact():
    rng = np.random.default_rng(5)
    inputs = [planted(rng, 800) for _ in range(4)]
    expected = [brute_pairs(x, 3) for x in inputs]
    results = [None] * 4

    def run(t):
        for _ in range(5):
            results[t] = simhashdb.find_all(inputs[t], k=3)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(np.array_equal(r, e) for r, e in zip(results, expected))
