"""An Index in a forked process (os.fork(), multiprocessing's "fork" start
method): every call raises ForkedError and writes nothing, closing it or
collecting it there leaves the opener's files and lock alone, and everything
the opener acknowledged survives. Also pickling, which multiprocessing's
other start methods need."""

import gc
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import simhashdb
from simhashdb import ForkedError, Index, LockedError, Simhasher

from conftest import distances

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork() is POSIX only")


def fingerprint(i: int) -> int:
    return (i * 0x9E3779B97F4A7C15) % 2**64


def fingerprints(ids: np.ndarray) -> np.ndarray:
    return np.array([fingerprint(int(i)) for i in ids], dtype=np.uint64)


# Every method of an Index, called the way a child process might.
CALLS = {
    "insert": lambda idx: idx.insert(10_000, 1, "child"),
    "insert_many": lambda idx: idx.insert_many([10_001, 10_002], [2, 3]),
    "delete": lambda idx: idx.delete(0),
    "get": lambda idx: idx.get(0),
    "get_doc": lambda idx: idx.get_doc(0),
    "contains": lambda idx: 0 in idx,
    "len": lambda idx: len(idx),
    "query": lambda idx: idx.query(fingerprint(0)),
    "query_many": lambda idx: idx.query_many([fingerprint(0)]),
    "insert_if_new": lambda idx: idx.insert_if_new(10_003, 4),
    "insert_if_new_many": lambda idx: idx.insert_if_new_many([10_004], [5]),
    "add": lambda idx: idx.add("child/a", "a text from the child"),
    "add_many": lambda idx: idx.add_many(["child/b"], ["another text"]),
    "check": lambda idx: idx.check("child/c", "a third text"),
    "flush": lambda idx: idx.flush(),
    "sync": lambda idx: idx.sync(),
    "compact": lambda idx: idx.compact(),
    "verify": lambda idx: idx.verify(),
    "stats": lambda idx: idx.stats(),
}


def in_child(work) -> dict:
    """Runs ``work()`` in a child made by os.fork() and returns what it
    wrote back as JSON (or the exception it raised, as ``{"crash": ...}``)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            # A child that hangs dies, and the parent reads nothing.
            signal.alarm(120)
            os.close(read_end)
            try:
                answer = work()
            except BaseException as e:  # the parent reports it
                answer, code = {"crash": repr(e)}, 1
            with os.fdopen(write_end, "w") as out:
                json.dump(answer, out)
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        text = answer.read()
    _, status = os.waitpid(pid, 0)
    assert text, f"the child wrote nothing (wait status {status})"
    return json.loads(text)


def outcomes(idx: Index) -> dict:
    """Each of CALLS on ``idx``: "ForkedError: <message>", "ok" or another exception."""
    found = {}
    for name, call in CALLS.items():
        try:
            call(idx)
            found[name] = "ok"
        except ForkedError as e:
            found[name] = f"ForkedError: {e}"
        except BaseException as e:
            found[name] = repr(e)
    return found


def can_open_elsewhere(path) -> str:
    """What another (unrelated) process gets when it opens ``path`` for writing."""
    script = textwrap.dedent(
        """
        import sys
        from simhashdb import Index, LockedError
        try:
            Index.open(sys.argv[1]).close()
            print("opened")
        except LockedError as e:
            print("locked:", e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def check_all_there(path, ids: np.ndarray) -> None:
    """Reopens ``path``: exactly ``ids`` are there (no child write), queries
    agree with a brute-force scan, and verify passes."""
    fps = fingerprints(ids)
    with Index.open(path) as idx:
        assert idx.verify()["files"] > 0
        assert len(idx) == len(ids)
        for i in [0, len(ids) // 2, len(ids) - 1]:
            assert idx.get(int(ids[i])) == int(fps[i])
        for child_id in (10_000, 10_001, 10_002, 10_003, 10_004, simhashdb.doc_id("child/a")):
            assert idx.get(child_id) is None
        q = int(fps[7])
        expected = sorted(
            (int(d), int(i)) for i, d in zip(ids, distances(fps, q)) if d <= idx.k
        )
        assert sorted((m.distance, m.id) for m in idx.query(q)) == expected


def test_every_call_in_a_forked_child_raises_forked_error_and_the_parents_writes_survive(index_dir):
    ids = np.arange(2000, dtype=np.uint64)
    idx = Index.open(index_dir, memtable_bytes=16384)
    idx.insert_many(ids[:1000], fingerprints(ids[:1000]))

    def child():
        found = outcomes(idx)
        # Closing and collecting it in the child raises nothing and leaves
        # the parent's lock and files alone.
        idx.close()
        found["closed"] = idx.closed
        return found

    found = in_child(child)
    message = found.pop("closed") and found["insert"]
    for name, outcome in found.items():
        assert outcome.startswith("ForkedError: "), (name, outcome)
    assert f"the index at {index_dir} was opened by process {os.getpid()}" in message
    assert "is a fork of it" in message

    # The parent still holds its lock: another process is refused.
    assert can_open_elsewhere(index_dir).startswith("locked: ")
    idx.insert_many(ids[1000:], fingerprints(ids[1000:]))
    idx.compact()
    assert len(idx) == 2000
    idx.close()
    check_all_there(index_dir, ids)


def test_garbage_collection_of_an_index_in_a_forked_child_leaves_the_parents_lock(index_dir):
    ids = np.arange(500, dtype=np.uint64)
    # The only reference, so that the child can drop it.
    holder = [Index.open(index_dir)]
    holder[0].insert_many(ids[:250], fingerprints(ids[:250]))

    def child():
        holder.clear()
        gc.collect()
        return {"after_gc": can_open_elsewhere(index_dir)}

    assert in_child(child)["after_gc"].startswith("locked: ")
    assert can_open_elsewhere(index_dir).startswith("locked: ")
    holder[0].insert_many(ids[250:], fingerprints(ids[250:]))
    holder[0].close()
    check_all_there(index_dir, ids)


def test_parallel_calls_work_in_a_child_forked_after_the_parent_ran_parallel_work(index_dir):
    ids = np.arange(5000, dtype=np.uint64)
    fps = fingerprints(ids)
    texts = [f"text {i} " * 20 for i in range(5000)]
    hasher = Simhasher()
    # The parent's parallel work starts its thread pool, whose threads a
    # fork does not copy.
    expected_fps = hasher.fingerprint_many(texts).tolist()
    expected_pairs = simhashdb.find_all(fps, k=3).tolist()
    with Index.open(index_dir) as idx:
        idx.insert_many(ids, fps)
        expected_matches = [[m.id for m in ms] for ms in idx.query_many(fps[:200])]

    def child():
        with Index.open_read_only(index_dir) as own:
            matches = [[m.id for m in ms] for ms in own.query_many(fps[:200])]
        return {
            "fps": hasher.fingerprint_many(texts).tolist(),
            "pairs": simhashdb.find_all(fps, k=3).tolist(),
            "clusters": simhashdb.clusters(fps, k=3).tolist(),
            "matches": matches,
        }

    got = in_child(child)
    assert "crash" not in got, got
    assert got["fps"] == expected_fps
    assert got["pairs"] == expected_pairs
    assert got["clusters"] == simhashdb.clusters(fps, k=3).tolist()
    assert got["matches"] == expected_matches


# A program that forks while an Index is open; the child ends normally (its
# interpreter collects every object, the Index included), or after closing
# it in a with block, or after a call that ForkedError refuses.
FORKING_PROGRAM = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from simhashdb import Index, ForkedError

    path, how = sys.argv[1], sys.argv[2]
    fp = lambda i: (i * 0x9E3779B97F4A7C15) % 2**64
    with Index.open(path) as index:
        index.insert_many(np.arange(100, dtype=np.uint64), [fp(i) for i in range(100)])
        pid = os.fork()
        if pid == 0:
            if how == "call":
                try:
                    index.insert(1000, 1)
                except ForkedError:
                    print("child refused", flush=True)
            elif how == "del":
                del index
            # "exit": the interpreter's own finalization; "with": the with
            # block's close, in the child.
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(status), flush=True)
        index.insert_many(np.arange(100, 200, dtype=np.uint64), [fp(i) for i in range(100, 200)])
    print("parent closed", flush=True)
    """
)


@pytest.mark.parametrize("how", ["exit", "with", "del", "call"])
def test_a_child_that_ends_with_the_index_open_raises_nothing_and_loses_nothing(index_dir, how):
    out = subprocess.run(
        [sys.executable, "-c", FORKING_PROGRAM, str(index_dir), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Panic" not in out.stderr and "panicked" not in out.stderr, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert "child exit 0" in out.stdout, out.stdout
    assert "parent closed" in out.stdout
    if how == "call":
        assert "child refused" in out.stdout
    check_all_there(index_dir, np.arange(200, dtype=np.uint64))


# The fork pool's workers inherit this module's globals.
_INDEX = None


def _check_in_worker(i: int):
    return _INDEX.check(f"doc/{i}", f"text number {i} of the pool")


def _fingerprint_in_worker(texts):
    return Simhasher().fingerprint_many(texts).tolist()


def test_a_fork_pool_using_the_parents_index_gets_forked_error_and_nothing_is_lost(index_dir):
    global _INDEX
    ids = np.arange(600, dtype=np.uint64)
    _INDEX = Index.open(index_dir)
    try:
        _INDEX.insert_many(ids[:300], fingerprints(ids[:300]))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            with pytest.raises(ForkedError) as raised:
                pool.map(_check_in_worker, range(600))
            # Work that does not need the index runs in the workers.
            texts = [f"text number {i}" for i in range(50)]
            got = pool.map(_fingerprint_in_worker, [texts[:25], texts[25:]])
        assert got[0] + got[1] == Simhasher().fingerprint_many(texts).tolist()
        assert raised.value.pid == os.getpid()
        assert raised.value.path == str(index_dir)
        _INDEX.insert_many(ids[300:], fingerprints(ids[300:]))
        _INDEX.compact()
    finally:
        _INDEX.close()
        _INDEX = None
    check_all_there(index_dir, ids)


def _query_read_only(args):
    path, fp = args
    with Index.open_read_only(path) as idx:
        return sorted(m.id for m in idx.query(fp))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_open_the_index_read_only_while_no_process_writes(index_dir, method):
    ids = np.arange(300, dtype=np.uint64)
    fps = fingerprints(ids)
    with Index.open(index_dir) as idx:
        idx.insert_many(ids, fps)
    with multiprocessing.get_context(method).Pool(2) as pool:
        got = pool.map(_query_read_only, [(str(index_dir), int(fp)) for fp in fps[:20]])
    for fp, found in zip(fps[:20], got):
        assert found == sorted(int(i) for i in ids[distances(fps, int(fp)) <= 3])


def test_an_index_cannot_be_pickled_and_the_error_says_what_to_do(index_dir):
    with Index.open(index_dir) as idx:
        with pytest.raises(TypeError, match="open the index in each process"):
            pickle.dumps(idx)


def test_a_simhasher_pickles_and_fingerprints_alike_in_a_spawned_worker():
    hasher = Simhasher(tokenizer="letters", shingle=2, weighting="binary")
    copy = pickle.loads(pickle.dumps(hasher))
    assert copy == hasher and copy.config == hasher.config
    texts = ["one text", "another text", "a third one"]
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.map(hasher.fingerprint, texts)
    assert got == hasher.fingerprint_many(texts).tolist()


def test_a_lock_held_in_the_same_process_is_not_blamed_on_another_process(index_dir):
    with Index.open(index_dir):
        with pytest.raises(LockedError) as raised:
            Index.open(index_dir)
        message = str(raised.value)
        assert "already open in this process" in message, message
        assert "another process" not in message
    # Held by another process: said so.
    with Index.open(index_dir):
        assert "locked by another process" in can_open_elsewhere(index_dir)
