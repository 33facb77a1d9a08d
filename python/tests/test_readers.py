"""Index.open_read_only and refresh beside a writer in another process: every
write the writer acknowledged before the open or refresh is seen, nothing it
did not write, and queries answer as a brute-force scan (docs/RELIABILITY.md,
"Readers beside a writer")."""

import subprocess
import sys
import textwrap

import numpy as np

import simhashdb
from simhashdb import Index

# The writer: inserts batches of 50 (ids n..n+50, fingerprints a function of
# the id) with a small memtable, so that it flushes and merges, and prints how
# many documents are acknowledged after each batch.
WRITER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from simhashdb import Index

    path, batches = sys.argv[1], int(sys.argv[2])
    fp = lambda ids: ids * np.uint64(0x9E3779B97F4A7C15)
    with Index.open(path, memtable_bytes=16384) as index:
        for b in range(batches):
            ids = np.arange(b * 50, b * 50 + 50, dtype=np.uint64)
            index.insert_many(ids, fp(ids))
            print("acked", b * 50 + 50, flush=True)
    print("closed", flush=True)
    """
)


def fingerprint(i: int) -> int:
    return (i * 0x9E3779B97F4A7C15) % 2**64


def test_open_read_only_and_refresh_beside_a_writer_process_see_every_acknowledged_write(tmp_path):
    path = tmp_path / "index"
    with Index.open(path) as index:
        index.insert(10**12, 1)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "400"],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked = 0
    reader = Index.open_read_only(path)
    rng = np.random.default_rng(40)
    views = 0
    for line in writer.stdout:
        if not line.startswith("acked"):
            continue
        acked = int(line.split()[1])
        if acked % 1000:
            continue
        # Everything acknowledged before the refresh (or a new open) is seen;
        # nothing beyond what the writer wrote.
        if views % 2:
            reader.refresh()
        else:
            reader.close()
            reader = Index.open_read_only(path)
        views += 1
        held = len(reader) - 1
        assert held >= acked and held % 50 == 0, (held, acked)
        for i in rng.integers(0, held, size=20).tolist():
            assert reader.get(i) == fingerprint(i)
        assert reader.get(held) is None
        for i in rng.integers(0, held, size=5).tolist():
            probe = fingerprint(i) ^ 0b11
            found = sorted(m.id for m in reader.query(probe, 3))
            brute = sorted(
                j for j in range(held) if bin(fingerprint(j) ^ probe).count("1") <= 3
            )
            assert found == brute
    assert writer.wait() == 0
    assert views >= 10
    reader.refresh()
    assert len(reader) == 400 * 50 + 1
    assert reader.verify()["files"] >= 2
    # A writer's refresh does nothing; a reader still cannot write.
    try:
        reader.insert(1, 1)
        raise AssertionError("a read-only index accepted a write")
    except simhashdb.ReadOnlyError:
        pass
    reader.close()
    with Index.open(path) as index:
        index.refresh()
        assert len(index) == 400 * 50 + 1
