"""Type stubs of the extension module (re-exported by ``simhashdb``)."""

import datetime
import os
from typing import Any, Iterable, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

# A 1-D array-like of unsigned 64-bit integers: a numpy array (a contiguous
# uint64 array is read in place), or a sequence of ints.
_U64Array = Union[npt.NDArray[np.unsignedinteger[Any]], npt.NDArray[np.signedinteger[Any]], Sequence[int]]
_Int = Union[int, np.integer[Any]]

MAX_NAME_BYTES: int
"""The longest document name, in UTF-8 bytes (64 KiB)."""

def hamming(a: _Int, b: _Int) -> int:
    """Number of bit positions in which fingerprints ``a`` and ``b`` differ (0 to 64)."""

def doc_id(name: str) -> int:
    """The id of the document named ``name``: FNV-1a 64 of its UTF-8 bytes (the
    rule of ``Index.add``, ``Index.check`` and the command line)."""

def find_all(
    fingerprints: _U64Array, k: int = 3, blocks: Optional[int] = None
) -> npt.NDArray[np.int64]:
    """Every pair of positions (i, j), i < j, whose fingerprints differ in at
    most k bits (default 3), exactly: an int64 array of shape (m, 2), sorted.
    ``blocks`` fixes the table plan (default: the cost model's choice)."""

def clusters(
    fingerprints: _U64Array, k: int = 3, blocks: Optional[int] = None
) -> npt.NDArray[np.int64]:
    """A cluster label per fingerprint: the position of the first member of
    its cluster (connected components of ``find_all``'s pairs); a fingerprint
    without near-duplicates is labelled with its own position."""

class DedupResult:
    """The answer of ``dedup``: one entry per text, in the order given."""

    @property
    def keep(self) -> npt.NDArray[np.bool_]: ...
    @property
    def duplicate_of(self) -> npt.NDArray[np.int64]: ...
    @property
    def similarity(self) -> npt.NDArray[np.float64]: ...
    @property
    def kept(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    def __len__(self) -> int: ...

def dedup(
    texts: Any,
    *,
    threshold: float = 0.8,
    shingle: int = 5,
    tokenizer: str = "words",
    keep: str = "first",
    verify: bool = True,
    distance: Optional[int] = None,
) -> DedupResult:
    """Deduplicates texts (a list of str, a numpy object array, a pandas
    Series, a pyarrow string Array/ChunkedArray, a polars Series or a
    ``datasets`` column), verified, with the rule and defaults of the
    ``simhashdb dedup`` command on datasets. KeyboardInterrupt between two
    chunks of texts (nothing to undo)."""

class Plan:
    """How the 64 bits are split into permuted tables, and the largest
    distance k it answers exactly: ``Plan(blocks, k=3)``,
    ``Plan.nested(outer, inner, k=3)``, ``Plan.probed(blocks, radius, k=3)``
    or ``Plan.auto(expected_n, k=3)``.
    Compares by shape and k; pickles."""

    def __init__(self, blocks: int, k: int = 3) -> None: ...
    @staticmethod
    def nested(outer: int, inner: int, k: int = 3) -> "Plan":
        """The two-level split (``Plan.nested(4, 4, 3)``: the paper's 16 tables)."""
    @staticmethod
    def probed(blocks: int, radius: int, k: int = 3) -> "Plan":
        """Tables probed at every prefix within ``radius`` of the query's
        (multi-index hashing); not for ``find_all_in_table``."""
    @staticmethod
    def auto(expected_n: int, k: int = 3) -> "Plan":
        """The cost model's choice without probing for about ``expected_n``
        fingerprints (what ``find_all`` uses)."""
    @property
    def k(self) -> int:
        """The largest distance the plan answers exactly."""
    @property
    def table_count(self) -> int:
        """The number of permuted tables."""
    @property
    def shape(self) -> tuple:
        """``("flat", blocks)``, ``("nested", outer, inner)`` or ``("probed", blocks, radius)``."""
    def prefix_bits(self, table: int) -> int:
        """How many leading bits of a permuted fingerprint form the table's prefix."""
    def permute(self, fingerprints: _U64Array, table: int) -> npt.NDArray[np.uint64]:
        """The fingerprints with their bits in the table's order (prefix first)."""
    def find_all_in_table(self, fingerprints: _U64Array, table: int) -> npt.NDArray[np.int64]:
        """The pairs (i, j), i < j, the table reports: within k, sharing its
        prefix and no earlier table's. The union over tables is ``find_all``'s
        answer, without overlap."""
    def __eq__(self, other: object) -> bool: ...
    def __reduce__(self) -> tuple: ...

class Simhasher:
    """Computes 64-bit simhash fingerprints of texts.

    tokenizer: "words" (default), "letters", "chinese", "chars" or "chars:N";
    shingle: tokens per feature (default 1); weighting: "tf" (default) or "binary".
    Pickles (as its configuration line), so it can be sent to other processes.
    """

    def __init__(self, tokenizer: str = "words", shingle: int = 1, weighting: str = "tf") -> None: ...
    @staticmethod
    def from_config(config: str) -> "Simhasher":
        """The Simhasher of a configuration line (as ``config`` returns it)."""
    def fingerprint(self, text: str) -> int:
        """The fingerprint of ``text``, an int in [0, 2**64)."""
    def fingerprint_many(self, texts: Iterable[str]) -> npt.NDArray[np.uint64]:
        """The fingerprints of ``texts`` as a uint64 array, computed in parallel without the GIL."""
    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` before shingling and hashing."""
    @property
    def config(self) -> str:
        """The versioned configuration line."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Match:
    """A document found by a query (immutable, comparable, hashable)."""

    def __init__(
        self, id: int, fingerprint: int, distance: int, name: Optional[str] = None
    ) -> None: ...
    @property
    def id(self) -> int:
        """The document id."""
    @property
    def fingerprint(self) -> int:
        """Its fingerprint."""
    @property
    def distance(self) -> int:
        """Hamming distance from the query."""
    @property
    def name(self) -> Optional[str]:
        """Its name, or None."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class VerifiedMatch:
    """A document found near a text by the verified rule (immutable)."""

    @property
    def id(self) -> int:
        """The document id."""
    @property
    def fingerprint(self) -> int:
        """Its fingerprint."""
    @property
    def distance(self) -> int:
        """Hamming distance from the text's fingerprint."""
    @property
    def name(self) -> Optional[str]:
        """Its name, or None."""
    @property
    def similarity(self) -> Optional[float]:
        """Estimated Jaccard similarity of the texts' word 5-shingles (0 to 1);
        None for a document stored without a sketch."""
    @property
    def rule(self) -> str:
        """"sketch" (the similarity reached the threshold) or "fingerprint"
        (a document without a sketch within k)."""

class Doc:
    """A live document of an index (immutable, comparable, hashable)."""

    def __init__(
        self, id: int, fingerprint: int, name: Optional[str] = None, timestamp_ms: int = 0
    ) -> None: ...
    @property
    def id(self) -> int:
        """The document id."""
    @property
    def fingerprint(self) -> int:
        """Its fingerprint."""
    @property
    def name(self) -> Optional[str]:
        """Its name, or None."""
    @property
    def timestamp_ms(self) -> int:
        """When it was inserted, in milliseconds since the Unix epoch."""
    @property
    def timestamp(self) -> float:
        """When it was inserted, in seconds since the Unix epoch."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class Index:
    """A persistent, exact near-duplicate index of 64-bit fingerprints.

    Open with ``Index.open`` or ``Index.open_read_only``; close with ``close()``
    or a ``with`` block. Thread-safe; long calls release the GIL.

    Works only in the process that opened it: in a forked process (``os.fork``,
    ``multiprocessing``'s "fork" start method) every method raises
    ``ForkedError`` and writes nothing. With ``multiprocessing``, one process
    writes; workers open the index read-only while none writes; or run
    ``simhashdb serve``. Cannot be pickled.
    """

    @staticmethod
    def open(
        path: Union[str, "os.PathLike[str]"],
        k: Optional[int] = None,
        expected_n: Optional[int] = None,
        durability: Optional[str] = None,
        retention: Union[None, float, datetime.timedelta] = None,
        tokenizer: Optional[str] = None,
        shingle: Optional[int] = None,
        weighting: Optional[str] = None,
        blocks: Optional[int] = None,
        memtable_bytes: Optional[int] = None,
        merge_fan_in: Optional[int] = None,
    ) -> "Index":
        """Opens the index in ``path``, creating it if needed. k, expected_n,
        blocks, retention (positive, at most ``datetime.timedelta.max``) and
        the fingerprint configuration are recorded by a new index; durability ("buffered" or "sync"), memtable_bytes and
        merge_fan_in (2 to 64, default 16; 3 for an index that mostly
        checks) apply to this open."""
    @staticmethod
    def open_read_only(path: Union[str, "os.PathLike[str]"]) -> "Index":
        """Opens an existing index for queries only, beside its writer (no
        lock): sees every write acknowledged before the open."""
    def close(self) -> None:
        """Closes the index (waits for calls in progress); idempotent. Raises
        PoisonedError (closed all the same) if a write, sync, flush or merge
        failed since the open. In a forked process, leaves the index to the
        process that opened it."""
    def __enter__(self) -> "Index": ...
    def __exit__(self, *exc: object) -> bool: ...
    def insert(self, id: _Int, fingerprint: _Int, name: Optional[str] = None) -> None:
        """Inserts (or replaces) document ``id``."""
    def insert_many(
        self,
        ids: _U64Array,
        fingerprints: _U64Array,
        names: Optional[Sequence[Optional[str]]] = None,
    ) -> None:
        """Inserts many documents as one atomic write. KeyboardInterrupt
        while the arguments are read: nothing written."""
    def delete(self, id: _Int) -> None:
        """Deletes document ``id`` (nothing happens if there is none)."""
    def get(self, id: _Int) -> Optional[int]:
        """The fingerprint of document ``id``, or None."""
    def get_doc(self, id: _Int) -> Optional[Doc]:
        """Document ``id``, or None."""
    def __contains__(self, id: _Int) -> bool: ...
    def query(self, fingerprint: _Int, k: Optional[int] = None) -> list[Match]:
        """Every live document within distance k, nearest first."""
    def query_many(self, fingerprints: _U64Array, k: Optional[int] = None) -> list[list[Match]]:
        """``query`` for each fingerprint, in parallel without the GIL
        (KeyboardInterrupt between chunks of a few thousand)."""
    def insert_if_new(
        self,
        id: _Int,
        fingerprint: _Int,
        name: Optional[str] = None,
        k: Optional[int] = None,
    ) -> list[Match]:
        """Inserts unless near-duplicates exist; returns them (empty: inserted)."""
    def insert_if_new_many(
        self,
        ids: _U64Array,
        fingerprints: _U64Array,
        names: Optional[Sequence[Optional[str]]] = None,
        k: Optional[int] = None,
    ) -> list[list[Match]]:
        """``insert_if_new`` for each document in order (each sees those
        inserted before it, in the index and in the batch), the inserted
        ones as one atomic write; one list per document (empty: inserted)."""
    def add(self, name: str, text: str) -> int:
        """Inserts ``text`` as the document ``name`` (id ``doc_id(name)``), with its
        sketch; returns the id."""
    def add_many(self, names: Sequence[str], texts: Sequence[str]) -> npt.NDArray[np.uint64]:
        """``add`` for many documents as one write; returns their ids.
        KeyboardInterrupt while fingerprinting: nothing written."""
    def check(
        self,
        name: str,
        text: str,
        k: Optional[int] = None,
        threshold: Optional[float] = None,
    ) -> Optional[VerifiedMatch]:
        """Check-and-insert by name and text, by the verified rule: None if
        inserted (with its sketch), else the most similar near-duplicate.
        A stored document with a sketch is one when the estimated similarity
        is at least ``threshold`` (default 0.7; 0.6 for a text mostly of Han
        characters); one without a sketch when within ``k`` (default: the
        index's k)."""
    def query_text(
        self,
        text: str,
        k: Optional[int] = None,
        threshold: Optional[float] = None,
    ) -> list[VerifiedMatch]:
        """The near-duplicates of ``text`` by the rule of ``check``, most
        similar first; never inserts."""
    def flush(self) -> None:
        """Writes the in-memory documents to a new segment."""
    def refresh(self) -> None:
        """Read-only index: catches up with every write acknowledged since
        the open (or last refresh). Does nothing on a writer."""
    def sync(self) -> None:
        """Syncs the write-ahead log to the device."""
    def compact(self) -> None:
        """Merges every segment into one."""
    def backup(self, path: Union[str, "os.PathLike[str]"]) -> dict[str, Any]:
        """Writes a consistent copy of the index into `path` (a new path or
        an empty directory); returns {"path", "linked", "copied", "bytes",
        "copied_bytes", "next_seq", "generation"}."""
    def verify(self) -> dict[str, Any]:
        """Checks every checksum; returns {"files": n, "bytes": n,
        "wal_tails": [{"path", "offset", "bytes", "unsynced_appends",
        "complete_frame"}, ...]}: each WAL end that recovery drops."""
    def stats(self) -> dict[str, Any]:
        """Shape and size of the index."""
    def __len__(self) -> int: ...
    @property
    def path(self) -> str:
        """The index directory."""
    @property
    def k(self) -> int:
        """The largest distance queries may ask for."""
    @property
    def retention(self) -> Optional[datetime.timedelta]:
        """How long documents are kept, as recorded in the index (None:
        forever; longer than a timedelta holds: ``timedelta.max``)."""
    @property
    def plan(self) -> str:
        """The table plan."""
    @property
    def config(self) -> str:
        """The recorded fingerprint configuration line."""
    @property
    def simhasher(self) -> Simhasher:
        """A Simhasher of the recorded configuration."""
    @property
    def read_only(self) -> bool:
        """Whether the index was opened read-only."""
    @property
    def durability(self) -> str:
        """Either "buffered" or "sync"."""
    @property
    def closed(self) -> bool:
        """Whether the index was closed."""

# The exact re-check helpers (python/src/recheck.rs).

def shingles(text: str, width: int = 5, hasher: Optional[Simhasher] = None) -> npt.NDArray[np.uint64]:
    """The distinct ``width``-token shingles of ``text``, as sorted hashes."""

def shingles_many(
    texts: Iterable[str], width: int = 5, hasher: Optional[Simhasher] = None
) -> list[npt.NDArray[np.uint64]]:
    """``shingles`` of every text, in parallel without the GIL."""

def jaccard(
    a: Union[str, npt.ArrayLike],
    b: Union[str, npt.ArrayLike],
    width: int = 5,
    hasher: Optional[Simhasher] = None,
) -> float:
    """Exact Jaccard similarity of two texts' (or two ``shingles`` arrays') shingle sets."""

def jaccard_many(
    a: Sequence[str], b: Sequence[str], width: int = 5, hasher: Optional[Simhasher] = None
) -> npt.NDArray[np.float64]:
    """``jaccard(a[i], b[i])`` for every i, in parallel without the GIL."""

class MinHashBands:
    """Banded MinHash keys: sets of Jaccard j share a key with probability 1 - (1 - j**rows)**bands."""

    def __init__(self, bands: int, rows: int) -> None: ...
    @staticmethod
    def for_threshold(threshold: float) -> "MinHashBands":
        """The bands ``simhashdb dedup`` uses for a Jaccard threshold."""
    @property
    def bands(self) -> int: ...
    @property
    def rows(self) -> int: ...
    def probability(self, jaccard: float) -> float: ...
    def keys(self, text: str, width: int = 5, hasher: Optional[Simhasher] = None) -> npt.NDArray[np.uint32]: ...
    def sketch_many(
        self, texts: Iterable[str], width: int = 5, hasher: Optional[Simhasher] = None
    ) -> tuple[
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint32],
        npt.NDArray[np.uint32],
        npt.NDArray[np.bool_],
    ]:
        """(fingerprints, keys of shape (n, bands), distinct shingle counts, blank) of every text."""

def sketch(text: str, hasher: Optional[Simhasher] = None) -> bytes:
    """The 16-byte sketch of ``text``'s word 5-shingles."""

def sketch_many(texts: Iterable[str], hasher: Optional[Simhasher] = None) -> npt.NDArray[np.uint8]:
    """The sketches of many texts, shape (n, 16)."""

def sketch_similarity(a: Union[bytes, npt.ArrayLike], b: Union[bytes, npt.ArrayLike]) -> float:
    """Estimated Jaccard similarity of two sketches."""
