"""datatrove's MinHash deduplication of a folder of JSONL files, with its
default MinhashConfig (word 5-grams, 14 buckets of 8 hashes), as in its
example `minhash_deduplication.py`, on the local executor. Run by
dedup_datasets.py:

    python datatrove_minhash.py INPUT_DIR WORK_DIR WORKERS

Writes the surviving records to WORK_DIR/output (JSONL, gzip).
"""

import os
import sys

from datatrove.executor.local import LocalPipelineExecutor
from datatrove.pipeline.dedup import MinhashDedupCluster, MinhashDedupFilter, MinhashDedupSignature
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.writers.jsonl import JsonlWriter


def main():
    data, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    files = len([f for f in os.listdir(data) if f.endswith(".jsonl")])
    config = MinhashConfig()
    sigs, buckets, clusters, logs = (os.path.join(work, d) for d in ("signatures", "buckets", "remove_ids", "logs"))

    def reader():
        return JsonlReader(data, glob_pattern="*.jsonl", text_key="text", id_key="id")

    stage1 = LocalPipelineExecutor(
        pipeline=[reader(), MinhashDedupSignature(output_folder=sigs, config=config)],
        tasks=files,
        workers=workers,
        logging_dir=os.path.join(logs, "signatures"),
    )
    stage2 = LocalPipelineExecutor(
        pipeline=[MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)],
        tasks=config.num_buckets,
        workers=workers,
        logging_dir=os.path.join(logs, "buckets"),
        depends=stage1,
    )
    stage3 = LocalPipelineExecutor(
        pipeline=[MinhashDedupCluster(input_folder=buckets, output_folder=clusters, config=config)],
        tasks=1,
        logging_dir=os.path.join(logs, "clusters"),
        depends=stage2,
    )
    stage4 = LocalPipelineExecutor(
        pipeline=[
            reader(),
            MinhashDedupFilter(input_folder=clusters),
            JsonlWriter(os.path.join(work, "output")),
        ],
        tasks=files,
        workers=workers,
        logging_dir=os.path.join(logs, "filter"),
        depends=stage3,
    )
    stage4.run()


if __name__ == "__main__":
    main()
