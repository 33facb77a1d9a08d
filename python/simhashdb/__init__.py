"""simhashdb: exact near-duplicate search over 64-bit SimHash fingerprints.

- ``dedup(texts)``: the verified deduplication of a column of texts (a list,
  numpy, pandas, pyarrow, polars or ``datasets`` column), the rule of the
  ``simhashdb dedup`` command.
- ``Simhasher``: texts to fingerprints (``fingerprint``, ``fingerprint_many``).
- ``hamming(a, b)``: the distance between two fingerprints.
- ``find_all`` / ``clusters``: every near-duplicate pair, or cluster, of a
  numpy array of fingerprints, in memory.
- ``Plan``: the block split and its permuted tables (``permute``,
  ``find_all_in_table``), for jobs that partition fingerprints themselves.
- ``simhashdb.spark`` (``pip install 'simhashdb[spark]'``): ``find_all`` and
  ``clusters`` over a Spark DataFrame, and ``dedup`` of a DataFrame of texts.
- ``shingles``, ``jaccard``, ``MinHashBands``, ``sketch`` (and their
  ``*_many`` batch forms): the exact re-check helpers of ``simhashdb dedup``,
  for users who build their own deduplication rules.
- ``Index``: a persistent, crash-safe index of documents (id, fingerprint,
  name) that answers "which documents lie within k bits of this one?".

Every error is a ``simhashdb.Error``; see ``simhashdb._errors``.
"""

from ._errors import (
    ClosedError,
    CorruptedError,
    DistanceError,
    Error,
    FileSystemError,
    ForkedError,
    InvalidArgumentError,
    LockedError,
    MismatchError,
    PoisonedError,
    ReadOnlyError,
)
from ._simhashdb import (
    MAX_NAME_BYTES,
    DedupResult,
    Doc,
    Index,
    Match,
    MinHashBands,
    Plan,
    Simhasher,
    VerifiedMatch,
    clusters,
    dedup,
    doc_id,
    find_all,
    hamming,
    jaccard,
    jaccard_many,
    shingles,
    shingles_many,
    sketch,
    sketch_many,
    sketch_similarity,
)

__all__ = [
    "dedup",
    "DedupResult",
    "Simhasher",
    "hamming",
    "find_all",
    "clusters",
    "Plan",
    "doc_id",
    "Index",
    "Match",
    "VerifiedMatch",
    "Doc",
    "MAX_NAME_BYTES",
    "shingles",
    "shingles_many",
    "jaccard",
    "jaccard_many",
    "MinHashBands",
    "sketch",
    "sketch_many",
    "sketch_similarity",
    "Error",
    "LockedError",
    "CorruptedError",
    "MismatchError",
    "DistanceError",
    "InvalidArgumentError",
    "PoisonedError",
    "ReadOnlyError",
    "ClosedError",
    "FileSystemError",
    "ForkedError",
]
