"""Deduplicating JSONL datasets: `simhashdb dedup` against text-dedup's simhash
and MinHash and datatrove's MinHash, on the same files in the same run.
Figures go to docs/BENCHMARKS.md. python/benches/dedup_datasets.sh sets up the
virtualenv and the release build and runs this; from the repository root:

    python/benches/dedup_datasets.sh [--sizes 1,10] [--timeout 1800] [--keep-data]

For each size (GB of JSONL), the harness writes a dataset of real text from
this machine (package documentation and man pages; see `generate`) with
injected near-duplicates, then runs each tool on it in turn and records its
wall time, CPU time, peak memory (the summed resident size of the tool's
process tree, sampled every 0.1 s) and the records it drops. Each tool gets
`--timeout` seconds; one that does not finish is reported as such. The data
and the tools' outputs are deleted at the end unless --keep-data is given.
`--data DIR` runs the tools on a folder of JSONL files written before (by
`generate`, for instance) instead of generating one, and keeps it.

Every tool uses two workers (the machine's two cores) and its own defaults
for what counts as a duplicate; the injected near-duplicates are edits that
all of them are meant to catch (see `edit`).
"""

import argparse
import gzip
import json
import os
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# ---------------------------------------------------------------- data

TROFF_ESCAPE = re.compile(r"\\f[BIRP]|\\f\(..|\\f\[[^]]*\]|\\\(..|\\[&%c-]|\\[*]\(..|\\[*].")


def strip_troff(src):
    out = []
    for line in src.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith((".", "'")):
            parts = line[1:].split(None, 1)
            if len(parts) < 2:
                out.append("")
                continue
            line = parts[1].replace('"', "")
        out.append(TROFF_ESCAPE.sub("", line))
    return "\n".join(out)


def source_files():
    """Text files of /usr/share/doc and the man pages, sorted."""
    files = []
    for root in ("/usr/share/doc", "/usr/share/man"):
        for d, _, names in os.walk(root):
            for n in names:
                files.append(os.path.join(d, n))
    return sorted(files)


def read_text(path):
    try:
        raw = open(path, "rb").read()
        if path.endswith(".gz"):
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile):
        return None
    if "/man/" in path:
        text = strip_troff(text)
    return text


def paragraph_pool():
    """Distinct paragraphs (40 to 4,000 bytes, mostly letters) of the machine's
    documentation, whitespace inside lines kept."""
    seen = set()
    pool = []
    for path in source_files():
        text = read_text(path)
        if not text:
            continue
        for p in re.split(r"\n\s*\n", text):
            p = p.strip()
            if not 40 <= len(p) <= 4000 or p in seen:
                continue
            letters = sum(c.isalpha() for c in p)
            if letters * 10 < len(p) * 6:
                continue
            seen.add(p)
            pool.append(p)
    return pool


EDITS = ("substitute 2%", "substitute 5%", "reorder paragraphs", "truncate to 90%", "append a paragraph")


def edit(text, kind, rng, pool):
    """A near-duplicate of `text`: a few words replaced, its paragraphs
    shuffled, its end cut, or a paragraph appended."""
    if kind.startswith("substitute"):
        share = int(kind.split()[1].rstrip("%")) / 100
        words = text.split(" ")
        for _ in range(max(1, int(len(words) * share))):
            words[rng.randrange(len(words))] = rng.choice(rng.choice(pool).split())
        return " ".join(words)
    if kind == "reorder paragraphs":
        paras = text.split("\n\n")
        rng.shuffle(paras)
        return "\n\n".join(paras)
    if kind == "truncate to 90%":
        return text[: int(len(text) * 0.9)]
    return text + "\n\n" + rng.choice(pool)


def generate(path, gigabytes, pool, seed=1, shards=8, dup_share=0.1, mean_bytes=5000):
    """Writes about `gigabytes` GB of JSONL (`{"id": n, "text": ...}`) in
    `shards` files under `path`. A record is a run of paragraphs drawn at
    random from the pool (about `mean_bytes` bytes, 1 to 20 KB); a share
    `dup_share` of the records are instead an edited copy (see `edit`) of a
    record among the last 10,000. Returns the record count, bytes of text
    and the injected copies per edit."""
    rng = random.Random(seed)
    os.makedirs(path, exist_ok=True)
    target = int(gigabytes * 1e9)
    recent = []
    injected = {k: 0 for k in EDITS}
    records = text_bytes = written = 0
    outs = [open(os.path.join(path, f"part-{i:03d}.jsonl"), "w", encoding="utf-8") for i in range(shards)]
    while written < target:
        if recent and rng.random() < dup_share:
            kind = rng.choice(EDITS)
            text = edit(rng.choice(recent), kind, rng, pool)
            injected[kind] += 1
        else:
            want = min(20_000, max(1_000, int(rng.expovariate(1 / mean_bytes))))
            parts = []
            size = 0
            while size < want:
                p = rng.choice(pool)
                parts.append(p)
                size += len(p) + 2
            text = "\n\n".join(parts)
        if len(recent) < 10_000:
            recent.append(text)
        else:
            recent[rng.randrange(10_000)] = text
        line = json.dumps({"id": records, "text": text}, ensure_ascii=False) + "\n"
        outs[records % shards].write(line)
        records += 1
        text_bytes += len(text.encode("utf-8"))
        written += len(line.encode("utf-8"))
    for f in outs:
        f.close()
    return records, text_bytes, written, injected


# ---------------------------------------------------------------- running


class Sampler(threading.Thread):
    """Peak summed RSS of a process and its descendants, and the load
    average seen while it runs."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.loads = []
        # The largest CPU time seen per process (user + system, its own and
        # its reaped children's): covers workers that no one waits for.
        self.cpu = {}
        self.stop = threading.Event()

    def run(self):
        try:
            proc = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self.stop.is_set():
            total = 0
            try:
                procs = [proc] + proc.children(recursive=True)
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    total += p.memory_info().rss
                    t = p.cpu_times()
                    self.cpu[p.pid] = max(self.cpu.get(p.pid, 0.0), t.user + t.system)
                except psutil.NoSuchProcess:
                    pass
            self.peak = max(self.peak, total)
            self.loads.append(os.getloadavg()[0])
            self.stop.wait(0.1)


def run_tool(name, cmd, timeout, env=None, log=None):
    """Runs `cmd`, returns wall seconds, CPU seconds of the process tree,
    peak RSS bytes, the load average (1 min) at start and the mean seen, and
    whether it finished (None on timeout) with its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load0 = os.getloadavg()[0]
    start = time.monotonic()
    with open(log, "w") if log else open(os.devnull, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        s = Sampler(p.pid)
        s.start()
        try:
            code = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            code = None
    wall = time.monotonic() - start
    s.stop.set()
    s.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Reaped descendants (getrusage), or the processes sampled, whichever
    # saw more: datatrove's workers are not reaped by the tool's process.
    cpu = max(
        (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        sum(s.cpu.values()),
    )
    mean_load = sum(s.loads) / len(s.loads) if s.loads else load0
    return {
        "tool": name,
        "wall": wall,
        "cpu": cpu,
        "peak_rss": s.peak,
        "load_start": load0,
        "load_mean": mean_load,
        "exit": code,
        "cmd": " ".join(cmd),
    }


def count_lines(folder):
    n = 0
    for d, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(d, name)
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rb") as f:
                n += sum(1 for _ in f)
    return n


def count_hf_rows(folder, python):
    out = subprocess.run(
        [python, "-c", "import sys, datasets; print(len(datasets.load_from_disk(sys.argv[1])))", folder],
        capture_output=True,
        text=True,
        env=offline_env(),
    )
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def offline_env():
    env = dict(os.environ)
    env.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def simhashdb_supports_jsonl(binary):
    out = subprocess.run([binary, "dedup", "--help"], capture_output=True, text=True)
    return "--emit" in out.stdout and "--text-field" in out.stdout


DATATROVE_SCRIPT = os.path.join(HERE, "datatrove_minhash.py")


def tools(data, work, python, binary, records, emit):
    """(name, command, how to count the records kept) for each tool."""
    files = sorted(os.path.join(data, f) for f in os.listdir(data))
    out = []
    sh_out = os.path.join(work, "simhashdb-out.jsonl")
    out.append(
        (
            "simhashdb dedup" + ("" if emit == "keep" else " --emit drop"),
            [binary, "dedup", *files, "--emit", emit, "--output", sh_out],
            (lambda: count_lines_file(sh_out))
            if emit == "keep"
            else (lambda: records - count_lines_file(sh_out)),
        )
    )
    for algo, extra in (("simhash", []), ("minhash", [])):
        o = os.path.join(work, f"text-dedup-{algo}")
        out.append(
            (
                f"text-dedup {algo}",
                [
                    python,
                    "-m",
                    f"text_dedup.{algo}",
                    "--path",
                    "json",
                    "--data_files",
                    os.path.join(data, "*.jsonl"),
                    "--split",
                    "train",
                    "--cache_dir",
                    os.path.join(work, f"hf-cache-{algo}"),
                    "--output",
                    o,
                    "--column",
                    "text",
                    "--num_proc",
                    "2",
                    *extra,
                ],
                lambda o=o: count_hf_rows(o, python),
            )
        )
    o = os.path.join(work, "datatrove")
    out.append(
        (
            "datatrove minhash",
            [python, DATATROVE_SCRIPT, data, o, "2"],
            lambda o=o: count_lines(os.path.join(o, "output")),
        )
    )
    return out


def measure_data(folder):
    """Records, bytes of text and bytes of JSONL of a folder of JSONL files."""
    records = text_bytes = file_bytes = 0
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        file_bytes += os.path.getsize(path)
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    records += 1
                    text_bytes += len(json.loads(line)["text"].encode("utf-8"))
    return records, text_bytes, file_bytes


def count_lines_file(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10", help="dataset sizes in GB, comma-separated (default 1,10)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per tool and size (default 1800)")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "dedup-bench"), help="where data goes")
    ap.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "simhashdb"))
    ap.add_argument("--only", default="", help="comma-separated tool names to run (default: all)")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument(
        "--data",
        default="",
        help="run on this folder of JSONL files (as `generate` writes them) instead of generating data; "
        "--sizes then only labels the run, and the data is kept",
    )
    ap.add_argument("--min-free-gb", type=float, default=8.0)
    ap.add_argument(
        "--simhashdb-emit",
        choices=("keep", "drop"),
        default="keep",
        help="keep (default): write the surviving records; drop: write one line per dropped record",
    )
    args = ap.parse_args()

    python = sys.executable
    print(f"# {platform.node()} {platform.platform()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    t0 = time.monotonic()
    pool = [] if args.data else paragraph_pool()
    print(f"# paragraph pool: {len(pool)} paragraphs, {sum(map(len, pool)) / 1e6:.0f} MB, {time.monotonic() - t0:.0f} s")
    results = []
    for size in [float(s) for s in args.sizes.split(",")]:
        free = shutil.disk_usage(os.path.dirname(args.work) or ".").free / 1e9
        # The data, plus up to twice its size in tool outputs and caches
        # (the survivors only, or almost nothing, when simhashdb runs alone).
        only_simhashdb = args.only.strip() == "simhashdb"
        factor = 3 if not only_simhashdb else (2 if args.simhashdb_emit == "keep" else 1.05)
        if args.data:
            factor -= 1  # the data is there already
        if free - factor * size < args.min_free_gb:
            print(f"## {size:g} GB: skipped, {free:.1f} GB free and {args.min_free_gb:g} GB must stay free")
            continue
        work = os.path.join(args.work, f"{size:g}gb")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        t = time.monotonic()
        if args.data:
            data = args.data
            records, text_bytes, file_bytes = measure_data(data)
            injected = "not known (existing data)"
        else:
            data = os.path.join(work, "data")
            records, text_bytes, file_bytes, injected = generate(data, size, pool)
        print(
            f"## {size:g} GB: {records} records, {text_bytes / 1e6:.0f} MB of text, {file_bytes / 1e6:.0f} MB of JSONL, "
            f"injected {json.dumps(injected)}; written or read in {time.monotonic() - t:.0f} s"
        )
        wanted = [t.strip() for t in args.only.split(",") if t.strip()]
        for name, cmd, kept in tools(data, work, python, args.binary, records, args.simhashdb_emit):
            if wanted and not any(w in name for w in wanted):
                continue
            if name.startswith("simhashdb") and not simhashdb_supports_jsonl(args.binary):
                r = {"tool": name, "size_gb": size, "skipped": f"{args.binary} has no JSONL dedup (--emit, --text-field)"}
                print(json.dumps(r))
                results.append(r)
                continue
            log = os.path.join(work, name.replace(" ", "-") + ".log")
            r = run_tool(name, cmd, args.timeout, env=offline_env(), log=log)
            r.update(size_gb=size, records=records, text_mb=text_bytes / 1e6)
            if r["exit"] == 0:
                k = kept()
                r["kept"] = k
                r["dropped"] = None if k is None else records - k
                r["mb_per_s"] = text_bytes / 1e6 / r["wall"]
                r["records_per_s"] = records / r["wall"]
            else:
                with open(log, errors="replace") as f:
                    r["log_tail"] = f.read()[-600:]
            print(json.dumps(r), flush=True)
            results.append(r)
            # Free the tool's output and caches before the next one.
            for entry in os.listdir(work):
                if entry != "data" and not entry.endswith(".log"):
                    p = os.path.join(work, entry)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        if not args.keep_data and not args.data:
            shutil.rmtree(data, ignore_errors=True)
        report(results, size)
    with open(os.path.join(args.work, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


def report(results, size):
    rows = [r for r in results if r.get("size_gb") == size]
    done = [r for r in rows if r.get("exit") == 0 and not r["tool"].startswith("simhashdb")]
    fastest = min(done, key=lambda r: r["wall"]) if done else None
    print(f"\n| {size:g} GB | wall | MB/s | records/s | CPU | peak RSS | dropped | load (start / mean) | vs fastest competitor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['tool']} | not run: {r['skipped']} | | | | | | | |")
            continue
        if r.get("exit") != 0:
            what = "timed out" if r.get("exit") is None else f"failed (exit {r.get('exit')})"
            print(f"| {r['tool']} | {what} after {r['wall']:.0f} s | | | {r['cpu']:.0f} s | {r['peak_rss'] / 2**30:.2f} GiB | | {r['load_start']:.1f} / {r['load_mean']:.1f} | |")
            continue
        ratio = f"{fastest['wall'] / r['wall']:.1f}×" if fastest else "–"
        print(
            f"| {r['tool']} | {r['wall']:.1f} s | {r['mb_per_s']:.1f} | {r['records_per_s']:.0f} | {r['cpu']:.0f} s | "
            f"{r['peak_rss'] / 2**30:.2f} GiB | {r['dropped']} | {r['load_start']:.1f} / {r['load_mean']:.1f} | {ratio} |"
        )
    print(flush=True)


if __name__ == "__main__":
    main()
