"""Index.backup: a consistent copy that opens, verifies and answers as the
index did when the backup began (docs/RELIABILITY.md, "Backups")."""

import numpy as np
import pytest

import simhashdb
from simhashdb import Index


def brute_force(model: dict, fingerprint: int, k: int) -> list:
    return sorted(i for i, fp in model.items() if bin(fp ^ fingerprint).count("1") <= k)


def test_a_backup_holds_every_acknowledged_write_and_answers_as_the_index_did(tmp_path):
    rng = np.random.default_rng(40)
    source, dest = tmp_path / "index", tmp_path / "backup"
    model = {}
    with Index.open(source) as index:
        # Some documents in a segment, some in the write-ahead log only,
        # and near copies so that queries find more than themselves.
        for start in (1, 5_001):
            ids = np.arange(start, start + 5_000, dtype=np.uint64)
            fps = rng.integers(0, 2**64, size=5_000, dtype=np.uint64)
            fps[::7] = fps[1::7][: len(fps[::7])] ^ np.uint64(0b101)
            index.insert_many(ids, fps)
            model.update(zip(ids.tolist(), fps.tolist()))
            if start == 1:
                index.flush()
        index.delete(3)
        del model[3]
        report = index.backup(dest)
        assert report["path"] == str(dest)
        assert report["linked"] + report["copied"] >= 2, report
        # Written after the backup: not in it.
        index.insert(100_000, 12345)
        assert index.get(100_000) == 12345

    with Index.open(dest) as copy:
        assert copy.verify()["files"] >= 3
        assert len(copy) == len(model)
        assert copy.get(100_000) is None
        assert copy.get(3) is None
        probes = list(model.values())[::97]
        for fingerprint in probes:
            found = sorted(m.id for m in copy.query(fingerprint, 3))
            assert found == brute_force(model, fingerprint, 3)


def test_a_backup_into_a_directory_that_is_not_empty_is_refused_and_writes_nothing(tmp_path):
    dest = tmp_path / "backup"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with Index.open(tmp_path / "index") as index:
        index.insert(1, 10)
        with pytest.raises(simhashdb.InvalidArgumentError):
            index.backup(dest)
    assert sorted(p.name for p in dest.iterdir()) == ["keep.txt"]
    assert (dest / "keep.txt").read_text() == "mine"
