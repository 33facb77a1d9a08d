"""Where a Spark job's time went, from its event log (spark.eventLog.dir;
python/benches/spark_dedup_bench.py writes one with SPARK_EVENT_LOG_DIR).

    python python/benches/spark_stages.py EVENT_LOG (a file, or Spark 4's directory)

One line per stage, in order of submission: its wall time (submission to
completion), its tasks, their summed run time and the time spent
serializing results, shuffle bytes written and read, and the operators of
its RDDs (the DataFrame plan's scopes: mapInArrow, Exchange, Window, ...).
Then the totals.
"""

import glob
import json
import os
import sys


def main():
    stages = []
    path = sys.argv[1]
    # Spark 4 writes a directory of rolled files (events_N_...).
    files = sorted(glob.glob(os.path.join(path, "events_*")), key=lambda f: int(os.path.basename(f).split("_")[1])) if os.path.isdir(path) else [path]
    lines = (line for f in files for line in open(f))
    for line in lines:
        event = json.loads(line)
        if event.get("Event") != "SparkListenerStageCompleted":
            continue
        info = event["Stage Info"]
        acc = {a.get("Name"): a.get("Value") for a in info.get("Accumulables", [])}
        scopes = []
        for rdd in info.get("RDD Info", []):
            scope = rdd.get("Scope")
            if scope:
                name = json.loads(scope).get("name", "")
                if name and name not in scopes:
                    scopes.append(name)
        stages.append({
            "id": info["Stage ID"],
            "submitted": info.get("Submission Time", 0),
            "wall": (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000,
            "tasks": info.get("Number of Tasks", 0),
            "run": (acc.get("internal.metrics.executorRunTime") or 0) / 1000,
            "gc": (acc.get("internal.metrics.jvmGCTime") or 0) / 1000,
            "shuffle_write": acc.get("internal.metrics.shuffle.write.bytesWritten") or 0,
            "shuffle_read": (acc.get("internal.metrics.shuffle.read.remoteBytesRead") or 0)
            + (acc.get("internal.metrics.shuffle.read.localBytesRead") or 0),
            "scopes": scopes,
        })
    stages.sort(key=lambda s: (s["submitted"], s["id"]))
    print("| stage | wall s | tasks | task run s | GC s | shuffle write MB | shuffle read MB | operators |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for s in stages:
        print(f"| {s['id']} | {s['wall']:.1f} | {s['tasks']} | {s['run']:.1f} | {s['gc']:.1f} | "
              f"{s['shuffle_write'] / 1e6:.1f} | {s['shuffle_read'] / 1e6:.1f} | {', '.join(s['scopes'][:8])} |")
    print(f"| all | {sum(s['wall'] for s in stages):.1f} | {sum(s['tasks'] for s in stages)} | "
          f"{sum(s['run'] for s in stages):.1f} | {sum(s['gc'] for s in stages):.1f} | | | |")


if __name__ == "__main__":
    main()
