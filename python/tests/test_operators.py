"""What operators do to an index under a running program: a disk that fills
up under a background flush, and a read-only file system without the index's
LOCK file. Both on real file systems: a small tmpfs and a read-only bind
mount, which need root (the tests skip, saying so, where mounting is refused)."""

import contextlib
import os
import shutil
import subprocess

import numpy as np
import pytest

import simhashdb
from simhashdb import Index

from conftest import distances


@contextlib.contextmanager
def mounted(target, *mount_args):
    """``mount *mount_args target``, unmounted afterwards; skips the test
    when mounting is refused (not root, or no mount(8))."""
    os.makedirs(target, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) on this machine")
    out = subprocess.run(["mount", *mount_args, str(target)], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount ({out.stderr.strip()}): this test needs root")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


def fill(directory, leave: int) -> None:
    """Fills the file system of ``directory`` up to ``leave`` free bytes."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    with open(os.path.join(directory, "filler"), "wb") as out:
        out.write(b"\0" * max(0, free - leave))


def test_close_raises_poisoned_error_after_a_background_flush_failed_on_a_full_disk(tmp_path):
    rng = np.random.default_rng(21)
    with mounted(tmp_path / "small", "-t", "tmpfs", "-o", "size=8m", "tmpfs"):
        path = tmp_path / "small" / "index"
        index = Index.open(path, memtable_bytes=256 * 1024)
        acknowledged = {}
        # Room for the write-ahead log's appends, not for a segment.
        fill(tmp_path / "small", leave=384 * 1024)
        failed_flush = False
        for batch in range(400):
            ids = np.arange(batch * 100, batch * 100 + 100, dtype=np.uint64)
            fps = rng.integers(0, 2**64, size=100, dtype=np.uint64)
            try:
                index.insert_many(ids, fps)
            except simhashdb.PoisonedError:
                # Refused: an earlier background flush failed.
                failed_flush = True
                break
            except simhashdb.Error:
                break
            acknowledged.update(zip(ids.tolist(), fps.tolist()))
            if index.stats().get("flush_failures", 0) > 0:
                failed_flush = True
                break
        assert failed_flush, "no background flush failed: the disk never filled"
        with pytest.raises(simhashdb.PoisonedError):
            index.close()
        assert index.closed
        index.close()  # closing again does nothing

        # With room again, every acknowledged write is there.
        os.remove(tmp_path / "small" / "filler")
        with Index.open(path) as reopened:
            reopened.verify()
            assert len(reopened) == len(acknowledged)
            some = list(acknowledged.items())[:: max(1, len(acknowledged) // 50)]
            for doc_id, fp in some:
                assert reopened.get(doc_id) == fp


def test_an_index_without_lock_on_a_read_only_file_system_can_be_read(tmp_path):
    path = tmp_path / "index"
    rng = np.random.default_rng(24)
    ids = np.arange(3000, dtype=np.uint64)
    fps = rng.integers(0, 2**64, size=3000, dtype=np.uint64)
    with Index.open(path) as index:
        index.insert_many(ids[:2000], fps[:2000], [f"doc/{i}" for i in range(2000)])
        index.flush()
        index.insert_many(ids[2000:], fps[2000:])  # in the write-ahead log only
    os.remove(path / "LOCK")
    before = sorted(os.listdir(path))
    with mounted(tmp_path / "ro", "--bind", "-o", "ro", str(path)) as ro:
        with pytest.raises(OSError):
            open(ro / "probe", "w").close()
        with Index.open_read_only(ro) as index, Index.open_read_only(ro) as second:
            assert index.verify()["files"] > 0
            assert index.stats()["read_only"] is True
            assert len(index) == 3000
            for q in fps[::300]:
                expected = sorted(
                    (int(d), int(i)) for i, d in zip(ids, distances(fps, int(q))) if d <= 3
                )
                assert sorted((m.distance, m.id) for m in index.query(int(q))) == expected
            assert second.get_doc(5).name == "doc/5"
            with pytest.raises(simhashdb.Error):
                Index.open(ro)
        assert sorted(os.listdir(ro)) == before
    assert sorted(os.listdir(path)) == before
