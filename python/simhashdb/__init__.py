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
  ``clusters`` over a Spark DataFrame.
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
    Plan,
    Simhasher,
    clusters,
    dedup,
    doc_id,
    find_all,
    hamming,
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
    "Doc",
    "MAX_NAME_BYTES",
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
