"""Ctrl-C: a real SIGINT sent to an interpreter while a long call runs
raises KeyboardInterrupt from that call, and a write it interrupts has
written nothing (a batch is one atomic write, cut only before it starts).

Each case runs in a child interpreter, which says "go" just before the call;
the test then sends it SIGINT at once, as a terminal's Ctrl-C does. The
call's first part (reading or fingerprinting millions of values) takes far
longer than the signal takes to arrive, on a fast machine too, so the signal
lands there, before the batch's one atomic write starts. (One that arrived
before the call started would be Python's to handle, at the next bytecode:
it would prove nothing, but fail nothing either.) The outcome says where the
signal landed: a batch write that completed before it would be all there."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to a child process")

CHILD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import simhashdb
    from simhashdb import Index, Simhasher

    case, path = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(22)
    index = Index.open(path)
    index.insert_many([1, 2], [10, 20])
    n = 3_000_000
    if case == "insert_many":
        # Python ints, converted one by one.
        ids = list(range(100, 100 + n))
        fps = rng.integers(0, 2**64, size=n, dtype=np.uint64).tolist()
        call = lambda: index.insert_many(ids, fps)
    elif case == "insert_many_names":
        ids = np.arange(100, 100 + n, dtype=np.uint64)
        fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
        names = [f"doc/{i}" for i in range(n)]
        call = lambda: index.insert_many(ids, fps, names)
    elif case == "insert_if_new_many":
        ids = list(range(100, 100 + n))
        fps = rng.integers(0, 2**64, size=n, dtype=np.uint64).tolist()
        call = lambda: index.insert_if_new_many(ids, fps)
    elif case == "add_many":
        text = " ".join(f"word{i}" for i in range(3000))
        names, texts = [f"page/{i}" for i in range(20_000)], [text] * 20_000
        call = lambda: index.add_many(names, texts)
    elif case == "fingerprint_many":
        text = " ".join(f"word{i}" for i in range(3000))
        texts, hasher = [text] * 40_000, Simhasher()
        call = lambda: hasher.fingerprint_many(texts)
    elif case == "query_many":
        index.insert_many(np.arange(1000, 201_000, dtype=np.uint64),
                          rng.integers(0, 2**64, size=200_000, dtype=np.uint64))
        queries = rng.integers(0, 2**64, size=n, dtype=np.uint64)
        call = lambda: index.query_many(queries)
    elif case == "find_all":
        fps = rng.integers(0, 2**64, size=8_000_000, dtype=np.uint64)
        call = lambda: simhashdb.find_all(fps, k=3)
    before = len(index)
    try:
        # Inside the try: a signal that lands as "go" is printed counts as
        # one before the call (interrupted, nothing written).
        print("go", flush=True)
        call()
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    # The interpreter and the index go on: a write and a query work.
    index.insert(5, 50)
    assert index.get(5) == 50 and index.query(50, 0)[0].id == 5
    print("written", len(index) - 1 - before, flush=True)
    index.close()
    with Index.open(path) as again:
        print("reopened", len(again), again.verify()["files"] > 0, flush=True)
    """
)


def interrupt(case: str, path) -> list:
    """Runs ``case`` in a child, sends it SIGINT once it says "go", and
    returns the lines it printed afterwards."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, case, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "go", child.stderr.read()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    return out.split("\n")


def interrupt_during(case: str, path, attempts: int = 3) -> list:
    """``interrupt``, again in a fresh directory while the child finished its
    call before the signal was sent (on a loaded machine the test process may
    be scheduled only after the child's whole call): such a run proves
    nothing either way. A call that never honours the signal finishes every
    time, and the test fails on the last attempt's lines."""
    for attempt in range(attempts):
        lines = interrupt(case, path / f"attempt{attempt}")
        if lines[0] != "finished":
            break
    return lines


@pytest.mark.parametrize("case", ["insert_many", "insert_many_names", "insert_if_new_many", "add_many"])
def test_ctrl_c_during_a_batch_write_raises_keyboard_interrupt_and_writes_nothing(index_dir, case):
    lines = interrupt_during(case, index_dir)
    assert lines[0] == "interrupted", lines
    # Nothing of the batch: only the insert made afterwards.
    assert lines[1] == "written 0", lines
    assert lines[2] == "reopened 3 True", lines


@pytest.mark.parametrize("case", ["fingerprint_many", "query_many", "find_all"])
def test_ctrl_c_during_a_long_read_raises_keyboard_interrupt_and_the_index_goes_on(index_dir, case):
    lines = interrupt_during(case, index_dir)
    assert lines[0] == "interrupted", lines
    assert lines[1] == "written 0", lines


DEDUP_CHILD = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import simhashdb

    if FORK:
        # The parent's thread pool exists (a first parallel call), then the
        # work goes on in a forked process, which has its own pool.
        simhashdb.dedup(["a b c d e f", "a b c d e f"])
        pid = os.fork()
        if pid:
            _, status = os.waitpid(pid, 0)
            sys.exit(os.waitstatus_to_exitcode(status))

    # 20,000 texts of 3,000 words: 520 MB to sketch, in a few hundred
    # chunks.
    text = " ".join(f"word{i}" for i in range(3000))
    marker = "marker " + text
    texts = [marker] + [text] * 20_000
    # While simhashdb.dedup runs it holds a reference to each of its texts:
    # the handler knows by the marker's reference count whether the call is
    # running. A signal that lands before the call starts (or after it
    # ends) is ignored; the test sends another.
    idle = sys.getrefcount(marker)
    state = {"armed": True}

    def on_sigint(signum, frame):
        if state["armed"] and sys.getrefcount(marker) > idle:
            state["armed"] = False
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    print(f"go {os.getpid()}", flush=True)
    try:
        simhashdb.dedup(texts)
        print("finished", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    state["armed"] = False
    # Nothing is left half-done: the next call runs and answers as always.
    again = simhashdb.dedup(["one two three four five six", "a b c", "one two three four five six"])
    # (A SIGINT still on its way is ignored, at exit too.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print("again", again.keep.tolist(), again.duplicate_of.tolist(), flush=True)
    """
)


@pytest.mark.parametrize("fork", [False, True], ids=["process", "forked"])
def test_ctrl_c_during_dedup_raises_keyboard_interrupt_from_the_call_and_the_next_call_works(fork):
    # Forked: the call runs on the forked process's own pool while its main
    # thread runs the signal handlers (it raised only when the call ended).
    child = subprocess.Popen(
        [sys.executable, "-c", f"FORK = {fork}\n" + DEDUP_CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out = b""
    try:
        # SIGINT every 0.2 s from "go" until the child says how its call
        # ended (the first one that lands while the call runs is the one it
        # raises); 600 s is a liveness bound only.
        fd = child.stdout.fileno()
        deadline = time.monotonic() + 600
        while out.count(b"\n") < 2 and time.monotonic() < deadline:
            if out.startswith(b"go ") and b"\n" in out:
                os.kill(int(out.split(b"\n")[0].split()[1]), signal.SIGINT)
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                out += chunk
        rest, err = child.communicate(timeout=600)
        out += rest
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err.decode()
    lines = out.decode().split("\n")
    assert lines[0].startswith("go "), lines
    assert lines[1] == "interrupted", lines
    assert lines[2] == "again [True, True, False] [-1, -1, 0]", lines
