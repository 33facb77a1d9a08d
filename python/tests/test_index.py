"""Index: every call against a model (a dict) and a brute-force scan."""

import datetime
import pickle
import subprocess
import time

import numpy as np
import pytest
from conftest import cli_binary, distances, flip_bits, planted

import simhashdb
from simhashdb import Doc, Index, Match, Simhasher, doc_id


class Model:
    """What the index should hold: id -> (fingerprint, name)."""

    def __init__(self):
        self.docs = {}

    def expected(self, query: int, k: int) -> list:
        if not self.docs:
            return []
        ids = np.array(list(self.docs), dtype=np.uint64)
        fps = np.array([fp for fp, _ in self.docs.values()], dtype=np.uint64)
        d = distances(fps, query)
        hits = [
            Match(int(i), int(fp), int(dist), self.docs[int(i)][1])
            for i, fp, dist in zip(ids, fps, d)
            if dist <= k
        ]
        return sorted(hits, key=lambda m: (m.distance, m.id))


def check_against(index: Index, model: Model, rng, queries: int = 60):
    stored = [fp for fp, _ in model.docs.values()]
    for _ in range(queries):
        if stored and rng.random() < 0.8:
            base = stored[int(rng.integers(len(stored)))]
            q = flip_bits(rng, base, int(rng.integers(0, 5)))
        else:
            q = int(rng.integers(0, 2**64, dtype=np.uint64))
        for k in (0, 1, 3):
            assert index.query(q, k) == model.expected(q, k), (q, k)
    assert len(index) == len(model.docs)
    for doc_id_, (fp, name) in list(model.docs.items())[:50]:
        assert index.get(doc_id_) == fp
        doc = index.get_doc(doc_id_)
        assert (doc.id, doc.fingerprint, doc.name) == (doc_id_, fp, name)
        assert doc_id_ in index


def test_every_write_and_read_matches_the_model_across_flushes_merges_and_reopens(index_dir, rng):
    model = Model()
    index = Index.open(index_dir, memtable_bytes=8192)
    next_id = 0
    try:
        for round_ in range(8):
            # Single inserts, with and without names, some replacing.
            for _ in range(150):
                if model.docs and rng.random() < 0.2:
                    i = int(rng.choice(list(model.docs)))
                else:
                    i, next_id = next_id, next_id + 1
                if model.docs and rng.random() < 0.5:
                    # A near copy of a stored document.
                    base = model.docs[int(rng.choice(list(model.docs)))][0]
                    fp = flip_bits(rng, base, int(rng.integers(0, 4)))
                else:
                    fp = int(rng.integers(0, 2**64, dtype=np.uint64))
                name = f"https://example.com/{i}/{round_}" if rng.random() < 0.5 else None
                index.insert(i, fp, name)
                model.docs[i] = (fp, name)
            # A batch.
            ids = np.arange(next_id, next_id + 300, dtype=np.uint64)
            next_id += 300
            fps = planted(rng, 300)
            names = [f"doc-{i}" if i % 3 else None for i in ids.tolist()]
            index.insert_many(ids, fps, names if round_ % 2 else None)
            for i, fp, name in zip(ids.tolist(), fps.tolist(), names):
                model.docs[i] = (fp, name if round_ % 2 else None)
            # Deletes, some of ids that do not exist.
            for i in rng.choice(next_id + 10, size=40, replace=False).tolist():
                index.delete(i)
                model.docs.pop(i, None)
            if round_ % 3 == 1:
                index.flush()
            if round_ % 4 == 2:
                index.compact()
                assert index.stats()["segments"] <= 1
            if round_ % 3 == 2:
                index.close()
                index = Index.open(index_dir, memtable_bytes=8192)
            check_against(index, model, rng)
        assert index.stats()["segment_docs"] > 0
        assert index.verify()["files"] >= 2
    finally:
        index.close()


# After each of three flushes: the segments left, and whether a merge made
# them (awaited: merges run on the index's merge thread, after the flush
# returns). A merge's output is one level up, so a fan-in of 2 merges the
# first two flushes but not the third with their merge.
@pytest.mark.parametrize(
    "fan_in,after", [(2, [(1, False), (1, True), (2, False)]), (3, [(1, False), (2, False), (1, True)])]
)
def test_merge_fan_in_decides_when_segments_merge(index_dir, rng, fan_in, after):
    fps = rng.integers(0, 2**64, size=300, dtype=np.uint64)

    def segments_become(index, n):
        # Merges run on the index's merge thread, after the flush returns.
        for _ in range(3000):
            if index.stats()["segments"] == n:
                return True
            time.sleep(0.01)
        return False

    with Index.open(index_dir, merge_fan_in=fan_in) as index:
        for part in range(3):
            ids = np.arange(part * 100, part * 100 + 100, dtype=np.uint64)
            index.insert_many(ids, fps[part * 100 : part * 100 + 100])
            index.flush()
            segments, merged = after[part]
            if merged:
                assert segments_become(index, segments), index.stats()
            else:
                assert index.stats()["segments"] == segments
        assert len(index) == 300
        for i, fp in enumerate(fps.tolist()):
            assert index.get(i) == fp


def test_query_many_equals_query_one_by_one(index_dir, rng):
    fps = planted(rng, 3000)
    with Index.open(index_dir, memtable_bytes=32768) as index:
        index.insert_many(np.arange(3000, dtype=np.uint64), fps)
        queries = np.concatenate([fps[:200], planted(rng, 100)])
        for k in (None, 2):
            many = index.query_many(queries, k=k)
            assert len(many) == len(queries)
            assert many == [index.query(int(q), k) for q in queries]
        # Every stored fingerprint finds at least its own document.
        assert all(any(m.id == i for m in hits) for i, hits in enumerate(index.query_many(fps[:200])))
        assert index.query_many([]) == []


def test_insert_if_new_inserts_only_what_has_no_near_duplicate(index_dir, rng):
    with Index.open(index_dir) as index:
        assert index.insert_if_new(1, 0xFF00, "first") == []
        assert index.get_doc(1).name == "first"
        found = index.insert_if_new(2, 0xFF01, "second")
        assert found == [Match(1, 0xFF00, 1, "first")]
        assert index.get(2) is None
        # At a smaller k the same fingerprint is new.
        assert index.insert_if_new(3, 0xFF01, k=0) == []
        assert index.query(0xFF00) == [Match(1, 0xFF00, 0, "first"), Match(3, 0xFF01, 1, None)]


def test_insert_if_new_many_answers_as_insert_if_new_calls_in_order(index_dir, tmp_path, rng):
    with Index.open(index_dir) as batched, Index.open(tmp_path / "sequential") as one_by_one:
        model = Model()
        for round_ in range(20):
            n = int(rng.integers(1, 80))
            ids = rng.integers(0, 200, size=n).astype(np.uint64)
            centres = [0, 0xFFFF_0000_FFFF_0000, 0x0123_4567_89AB_CDEF]
            fps = np.array(
                [flip_bits(rng, centres[int(rng.integers(3))], int(rng.integers(6))) for _ in range(n)],
                dtype=np.uint64,
            )
            names = [f"doc {i}" if i % 2 else None for i in ids.tolist()]
            k = int(rng.integers(0, 4))
            expected = []
            for i, fp, name in zip(ids.tolist(), fps.tolist(), names):
                near = model.expected(fp, k)
                assert one_by_one.insert_if_new(i, fp, name, k=k) == near
                if not near:
                    model.docs[i] = (fp, name)
                expected.append(near)
            assert batched.insert_if_new_many(ids, fps, names, k=k) == expected, round_
        for i, (fp, name) in model.docs.items():
            assert batched.get_doc(i).fingerprint == fp and batched.get_doc(i).name == name
        assert len(batched) == len(model.docs)
        assert batched.insert_if_new_many([], []) == []
        with pytest.raises(ValueError, match="ids has 2 values but fingerprints has 1"):
            batched.insert_if_new_many([1, 2], [3])
        with pytest.raises(simhashdb.DistanceError):
            batched.insert_if_new_many([1], [3], k=9)


def test_add_and_check_use_the_recorded_config_and_the_name_rule(index_dir):
    text = "a page about rust storage engines, fetched by a crawler in the morning"
    with Index.open(index_dir, tokenizer="chars:4", weighting="binary") as index:
        hasher = Simhasher(tokenizer="chars:4", weighting="binary")
        assert index.config == hasher.config
        assert index.simhasher == hasher
        id_ = index.add("https://a.example/1", text)
        assert id_ == doc_id("https://a.example/1")
        assert index.get_doc(id_) == Doc(id_, hasher.fingerprint(text), "https://a.example/1", index.get_doc(id_).timestamp_ms)
        dup = index.check("https://b.example/copy", text)
        # Answered by the verified rule: the stored text's sketch.
        assert (dup.id, dup.fingerprint, dup.distance, dup.name) == (
            id_, hasher.fingerprint(text), 0, "https://a.example/1"
        )
        assert (dup.similarity, dup.rule) == (1.0, "sketch")
        assert index.get(doc_id("https://b.example/copy")) is None
        assert index.check("https://c.example/other", "an unrelated text about baking bread at home") is None
        assert doc_id("https://c.example/other") in index
        ids = index.add_many(["n1", "n2"], ["first text here", "second text there"])
        assert ids.tolist() == [doc_id("n1"), doc_id("n2")]
        assert index.get(doc_id("n2")) == hasher.fingerprint("second text there")
    # Reopened without settings, the recorded configuration is used.
    with Index.open(index_dir) as index:
        assert index.simhasher == Simhasher(tokenizer="chars:4", weighting="binary")
        assert index.check("https://d.example/again", text).id == doc_id("https://a.example/1")


def test_documents_added_in_python_are_found_by_the_command_line(index_dir):
    cli = cli_binary()
    if cli is None:
        pytest.skip("the simhashdb binary is not built (cargo build --release)")
    text = "the lighthouse keeper climbed the stairs every evening to light the lamp"
    with Index.open(index_dir, tokenizer="words", shingle=2) as index:
        id_ = index.add("pages/lighthouse.txt", text)
        fp = index.get(id_)
    out = subprocess.run(
        [cli, "get", "--db", str(index_dir), "pages/lighthouse.txt"],
        check=True, capture_output=True, text=True,
    ).stdout
    got_id, got_fp, _, got_name = out.rstrip("\n").split("\t")
    assert (int(got_id), int(got_fp), got_name) == (id_, fp, "pages/lighthouse.txt")
    # The command line's check sees the Python document as a duplicate.
    checked = subprocess.run(
        [cli, "check", "--db", str(index_dir)],
        input=f"mirror/lighthouse.txt\t{text}\n", check=True, capture_output=True, text=True,
    ).stdout
    assert checked == "dup\tpages/lighthouse.txt\t0\t1.000\tsketch\n"
    # And what the command line adds, Python finds by name.
    subprocess.run(
        [cli, "add", "--db", str(index_dir), "-"],
        input="cli/doc\tsomething else entirely about bread\n", check=True, capture_output=True, text=True,
    )
    with Index.open_read_only(index_dir) as index:
        assert index.get_doc(doc_id("cli/doc")).name == "cli/doc"
        assert index.get(doc_id("cli/doc")) == Simhasher(shingle=2).fingerprint("something else entirely about bread")


def test_an_existing_index_keeps_its_settings_and_refuses_others(index_dir):
    Index.open(index_dir, k=4, expected_n=1000, tokenizer="letters").close()
    with Index.open(index_dir) as index:
        assert index.k == 4
        assert index.config == Simhasher(tokenizer="letters").config
        assert "k = 4" in index.plan
    with pytest.raises(simhashdb.MismatchError) as raised:
        Index.open(index_dir, k=3)
    assert (raised.value.what, raised.value.recorded, raised.value.given) == ("k", "4", "3")
    assert isinstance(raised.value, ValueError)
    with pytest.raises(simhashdb.MismatchError) as raised:
        Index.open(index_dir, tokenizer="words")
    assert raised.value.what == "fingerprint config"
    assert "tokenizer=letters" in raised.value.recorded
    with pytest.raises(simhashdb.MismatchError):
        Index.open(index_dir, k=4, blocks=8)
    # The refused opens released the lock.
    with Index.open(index_dir, k=4) as index:
        assert index.k == 4


def test_a_distance_above_k_is_refused(index_dir):
    with Index.open(index_dir, k=2) as index:
        index.insert(1, 0)
        assert index.query(0b11, 2) == [Match(1, 0, 2)]
        with pytest.raises(simhashdb.DistanceError) as raised:
            index.query(0, 3)
        assert (raised.value.requested, raised.value.k) == (3, 2)
        with pytest.raises(simhashdb.DistanceError):
            index.query_many([0], k=3)
        with pytest.raises(simhashdb.DistanceError):
            index.insert_if_new(2, 0, k=3)
        assert index.get(2) is None


def test_read_only_opens_share_the_index_beside_its_writer_and_refuse_writes(index_dir):
    with Index.open(index_dir) as index:
        index.insert(7, 77, "seven")
        with pytest.raises(simhashdb.LockedError) as raised:
            Index.open(index_dir)
        assert raised.value.path == str(index_dir)
        # A reader opens beside the writer and sees its acknowledged write.
        with Index.open_read_only(index_dir) as beside:
            assert beside.get(7) == 77
    with Index.open_read_only(index_dir) as a, Index.open_read_only(index_dir) as b:
        assert a.read_only and b.get_doc(7).name == "seven"
        assert a.query(77) == [Match(7, 77, 0, "seven")]
        for write in (lambda: a.insert(8, 8), lambda: a.delete(7), lambda: a.add("x", "y"), a.flush, a.sync):
            with pytest.raises(simhashdb.ReadOnlyError):
                write()
        # Readers keep no writer out.
        with Index.open(index_dir) as index:
            index.insert(8, 88)
        assert a.get(8) is None
        a.refresh()
        assert a.get(8) == 88
    with Index.open(index_dir) as index:
        assert index.get(7) == 77


def test_opening_a_missing_index_read_only_is_a_file_system_error(tmp_path):
    with pytest.raises(simhashdb.FileSystemError) as raised:
        Index.open_read_only(tmp_path / "nothing")
    assert isinstance(raised.value, OSError)
    assert "MANIFEST" in str(raised.value)


def test_sync_durability_and_explicit_sync(index_dir):
    with Index.open(index_dir, durability="sync") as index:
        assert index.durability == "sync"
        index.insert_many([1, 2, 3], [10, 20, 30])
        index.sync()
    with Index.open(index_dir) as index:
        assert index.durability == "buffered"
        assert [index.get(i) for i in (1, 2, 3)] == [10, 20, 30]


def test_retention_is_read_back_from_the_index(index_dir, tmp_path):
    with Index.open(index_dir, retention=90.5) as index:
        assert index.retention == datetime.timedelta(seconds=90.5)
    # Recorded: an open that gives none, or a read-only open, reads it back.
    with Index.open(index_dir) as index:
        assert index.retention == datetime.timedelta(seconds=90.5)
    with Index.open_read_only(index_dir) as index:
        assert index.retention == datetime.timedelta(seconds=90.5)
    with Index.open(tmp_path / "forever") as index:
        assert index.retention is None
    with Index.open(tmp_path / "days", retention=datetime.timedelta(days=3)) as index:
        assert index.retention == datetime.timedelta(days=3)


def test_the_longest_retention_is_accepted_and_read_back_at_every_open(index_dir, tmp_path):
    longest = datetime.timedelta.max
    # Recorded in whole milliseconds.
    expected = longest - datetime.timedelta(microseconds=longest.microseconds % 1000)
    with Index.open(index_dir, retention=longest) as index:
        assert index.retention == expected
    with Index.open(index_dir) as index:
        assert index.retention == expected
    with Index.open_read_only(index_dir) as index:
        assert index.retention == expected
    # Just below the limit in seconds, too.
    seconds = 86_400 * 10**9 - 1
    with Index.open(tmp_path / "seconds", retention=seconds) as index:
        assert index.retention == datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("given", [np.int64(3600), np.uint32(3600), np.float32(3600.0), np.float64(3600.0)])
def test_a_numpy_scalar_retention_is_accepted(tmp_path, given):
    with Index.open(tmp_path / "index", retention=given) as index:
        assert index.retention == datetime.timedelta(hours=1)


def test_a_retention_longer_than_a_timedelta_recorded_by_the_cli_reads_as_timedelta_max(tmp_path):
    cli = cli_binary()
    if cli is None:
        pytest.skip("the command-line tool is not built (cargo build --release)")
    path = tmp_path / "long"
    subprocess.run(
        [cli, "create", "--db", str(path), "--retention", f"{2**64 // 86_400 - 1}d"],
        check=True,
        capture_output=True,
    )
    for _ in range(2):
        with Index.open(path) as index:
            assert index.retention == datetime.timedelta.max


def test_retention_hides_old_documents(index_dir):
    with Index.open(index_dir, retention=datetime.timedelta(seconds=1)) as index:
        index.insert(1, 42)
        assert index.get(1) == 42
        time.sleep(1.2)
        assert index.get(1) is None
        assert index.query(42) == []
        index.insert(2, 42)
        assert index.query(42) == [Match(2, 42, 0)]


def test_names_up_to_the_limit_are_kept_and_longer_ones_refused(index_dir):
    with Index.open(index_dir) as index:
        longest = "n" * simhashdb.MAX_NAME_BYTES
        index.insert(1, 5, longest)
        assert index.get_doc(1).name == longest
        with pytest.raises(simhashdb.InvalidArgumentError) as raised:
            index.insert(2, 5, longest + "n")
        assert isinstance(raised.value, ValueError)
        with pytest.raises(simhashdb.InvalidArgumentError):
            index.insert_many([3, 4], [1, 2], ["ok", longest + "é"])
        assert index.get(2) is None and index.get(3) is None
        index.insert(5, 6, "页面/ünïcode")
        assert index.query(6, 0) == [Match(5, 6, 0, "页面/ünïcode")]


def test_match_and_doc_are_immutable_values(index_dir):
    m = Match(1, 2, 3, "x")
    assert (m.id, m.fingerprint, m.distance, m.name) == (1, 2, 3, "x")
    assert m == Match(1, 2, 3, "x") and m != Match(1, 2, 3, None)
    assert hash(m) == hash(Match(1, 2, 3, "x"))
    assert repr(m) == "Match(id=1, fingerprint=2, distance=3, name='x')"
    assert pickle.loads(pickle.dumps(m)) == m
    with pytest.raises(AttributeError):
        m.id = 5
    d = Doc(1, 2, None, 1500)
    assert d.timestamp == 1.5
    assert repr(d) == "Doc(id=1, fingerprint=2, name=None, timestamp_ms=1500)"
    assert pickle.loads(pickle.dumps(d)) == d
    with pytest.raises(AttributeError):
        d.name = "y"
    with Index.open(index_dir) as index:
        before = int(time.time() * 1000)
        index.insert(9, 2**64 - 1, "max")
        doc = index.get_doc(9)
        assert doc.fingerprint == 2**64 - 1
        assert before - 5 <= doc.timestamp_ms <= int(time.time() * 1000) + 5


def test_stats_describe_the_index(index_dir):
    with Index.open(index_dir, memtable_bytes=4096) as index:
        index.insert_many(np.arange(1000, dtype=np.uint64), np.arange(1000, dtype=np.uint64) * 7919)
        index.flush()
        s = index.stats()
        assert s["path"] == str(index_dir)
        assert s["k"] == 3 and s["tables"] >= 4
        assert s["segments"] >= 1 and s["segment_docs"] == 1000
        assert s["memtable_docs"] == 0 and s["disk_bytes"] > 0
        assert s["fingerprint_config"] == Simhasher().config
        assert len(index) == 1000
        assert repr(index) == f"<simhashdb.Index '{index_dir}' k=3>"
