"""A child process holding the index is killed with SIGKILL; after reopening,
nothing it had acknowledged is lost, and batches are all or nothing."""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from simhashdb import Index

# The child: writes until killed, printing what each returned call
# acknowledged. Fingerprints are a function of the id, so the parent can check them.
CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    from simhashdb import Index

    path, durability, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fp = lambda i: (i * 0x9E3779B97F4A7C15) % 2**64
    index = Index.open(path, durability=durability, memtable_bytes=16384)
    print("open", flush=True)
    n = start
    while True:
        if n % 3 == 0:
            ids = np.arange(n, n + 50, dtype=np.uint64)
            index.insert_many(ids, [fp(int(i)) for i in ids], [f"batch/{int(i)}" for i in ids])
            print("batch", n, n + 50, flush=True)
            n += 50
        elif n % 3 == 1:
            index.insert(n, fp(n), f"one/{n}")
            print("one", n, flush=True)
            n += 1
        else:
            found = index.insert_if_new(n, fp(n), f"new/{n}", k=0)
            print("new" if not found else "dup", n, flush=True)
            n += 1
    """
)


def fingerprint(i: int) -> int:
    return (i * 0x9E3779B97F4A7C15) % 2**64


def batch_ranges(start: int, end: int):
    """The id ranges the child writes as batches, from ``start`` on (as its loop does)."""
    n = start
    while n < end:
        if n % 3 == 0:
            yield range(n, n + 50)
            n += 50
        else:
            n += 1


def run_and_kill(path, durability: str, start: int, acks: int):
    """Starts the child, reads ``acks`` acknowledgements, kills it with
    SIGKILL mid-stream and returns the acknowledged ids and batches."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), durability, str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acknowledged, batches = [], []
    try:
        assert child.stdout.readline() == "open\n", child.stderr.read()
        for _ in range(acks):
            line = child.stdout.readline()
            assert line, child.stderr.read()
            kind, *numbers = line.split()
            if kind == "batch":
                batches.append((int(numbers[0]), int(numbers[1])))
                acknowledged.extend(range(int(numbers[0]), int(numbers[1])))
            elif kind in ("one", "new"):
                acknowledged.append(int(numbers[0]))
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return acknowledged, batches


@pytest.mark.parametrize("durability", ["sync", "buffered"])
def test_nothing_acknowledged_is_lost_when_the_writer_is_killed(tmp_path, durability):
    path = tmp_path / "index"
    rng = np.random.default_rng(7)
    start = 0
    all_acknowledged = []
    for round_ in range(6):
        acknowledged, batches = run_and_kill(path, durability, start, int(rng.integers(20, 400)))
        all_acknowledged.extend(acknowledged)
        with Index.open(path) as index:
            index.verify()
            for i in all_acknowledged:
                assert index.get(i) == fingerprint(i), (round_, i)
            # A batch written when the kill came is there whole or not at all.
            present = set()
            top = max(all_acknowledged) + 200
            for i in range(start, top):
                if index.get(i) is not None:
                    present.add(i)
            for batch in batch_ranges(start, top):
                assert all(m in present for m in batch) or not any(m in present for m in batch), batch
            assert index.get_doc(all_acknowledged[-1]).name is not None
            # Documents found by a query too, not only by id.
            for i in all_acknowledged[-20:]:
                assert any(m.id == i for m in index.query(fingerprint(i), 0))
            start = top + (3 - top % 3)
    assert len(all_acknowledged) > 100


# The child for the WAL tail test: a few synced writes, then it waits to be killed.
WRITE_AND_WAIT = textwrap.dedent(
    """
    import sys, time
    from simhashdb import Index

    index = Index.open(sys.argv[1], durability="sync")
    for i in range(10):
        index.insert(i, (i * 0x9E3779B97F4A7C15) % 2**64, f"doc {i}")
    print("written", flush=True)
    time.sleep(600)
    """
)


def test_verify_reports_the_wal_tails_recovery_drops(tmp_path):
    path = tmp_path / "index"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITE_AND_WAIT, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout.readline().strip() == "written"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    wals = [p for p in path.iterdir() if p.suffix == ".wal" and p.stat().st_size > 0]
    wal = max(wals, key=lambda p: p.stat().st_size)
    whole = wal.read_bytes()

    with Index.open_read_only(path) as index:
        assert index.verify()["wal_tails"] == []

    # A torn append: the last frame cut short.
    wal.write_bytes(whole[:-5])
    with Index.open_read_only(path) as index:
        report = index.verify()
    assert report["wal_tails"] == [
        {
            "path": str(wal),
            "offset": report["wal_tails"][0]["offset"],
            "bytes": report["wal_tails"][0]["bytes"],
            "unsynced_appends": False,
            "complete_frame": False,
        }
    ], report
    tail = report["wal_tails"][0]
    assert tail["offset"] + tail["bytes"] == len(whole) - 5
    assert 0 < tail["bytes"] < len(whole)

    # A whole last frame failing its checksum: a lost acknowledged write in a sync WAL.
    flipped = bytearray(whole)
    flipped[-3] ^= 0x08
    wal.write_bytes(bytes(flipped))
    with Index.open_read_only(path) as index:
        (tail,) = index.verify()["wal_tails"]
    assert tail["complete_frame"] and not tail["unsynced_appends"], tail
    assert tail["offset"] + tail["bytes"] == len(whole)
