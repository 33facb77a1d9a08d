"""The exceptions of simhashdb.

Every error the library reports is a :class:`simhashdb.Error`. Those caused by
an argument are also :class:`ValueError`, and file-system failures are also
:class:`OSError`, so ``except ValueError`` and ``except OSError`` work as
usual. Arguments of the wrong type raise a plain :class:`TypeError`.
"""

from typing import Optional

__all__ = [
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


class Error(Exception):
    """Base class of every error simhashdb raises."""


class LockedError(Error):
    """Another process, or another open ``Index`` in this one (the message
    says which), holds the index's lock: one writer at a time, or readers
    only while no writer has it.

    Attributes: ``path``, the index directory.
    """

    def __init__(self, message: str, path: Optional[str] = None) -> None:
        super().__init__(message)
        self.path = path


class CorruptedError(Error):
    """A file of the index fails its checksum or cannot be decoded. The index
    is not used: restore it from a copy or rebuild it.

    Attributes: ``path`` (the damaged file), ``offset`` (the byte offset of the
    damage, best known) and ``reason``.
    """

    def __init__(
        self,
        message: str,
        path: Optional[str] = None,
        offset: Optional[int] = None,
        reason: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.reason = reason


class MismatchError(Error, ValueError):
    """The index was created with other settings than those given to
    ``Index.open`` (its plan, k or fingerprint configuration). Open it with its
    recorded settings, or with none.

    Attributes: ``what`` (which setting), ``recorded`` and ``given``.
    """

    def __init__(
        self,
        message: str,
        what: Optional[str] = None,
        recorded: Optional[str] = None,
        given: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.what = what
        self.recorded = recorded
        self.given = given


class DistanceError(Error, ValueError):
    """A query asked for a distance above the index's ``k``: the answer could
    be incomplete, so it is refused.

    Attributes: ``requested`` and ``k`` (the largest distance the index answers).
    """

    def __init__(
        self, message: str, requested: Optional[int] = None, k: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.requested = requested
        self.k = k


class InvalidArgumentError(Error, ValueError):
    """The index refused an argument (a name over 64 KiB, a batch over the
    write-ahead log's frame limit, ...); nothing was written."""


class PoisonedError(Error):
    """An earlier write or sync failed, so the state on disk is uncertain:
    every later write fails until the index is reopened."""


class ReadOnlyError(Error):
    """A write was asked of an index opened with ``Index.open_read_only``."""


class ClosedError(Error, ValueError):
    """The index was closed (``close()``, or the end of its ``with`` block)."""


class FileSystemError(Error, OSError):
    """A file-system call failed (``errno`` is set when the operating system
    gave one).

    Attributes: ``path`` (the file or directory) and ``op`` (what the index was
    doing: "write", "sync", "rename", ...).
    """

    path: Optional[str]
    op: Optional[str]


class ForkedError(Error):
    """The ``Index`` was opened by another process, of which this one is a
    fork (``os.fork()``, or ``multiprocessing``'s "fork" start method). An
    ``Index`` works only in the process that opened it; nothing was done.
    Open the index in this process (``Index.open_read_only`` while no process
    writes it), or send the work to the process that opened it.

    Attributes: ``path`` (the index directory) and ``pid`` (the process that
    opened it).
    """

    def __init__(
        self, message: str, path: Optional[str] = None, pid: Optional[int] = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid


# Shown as simhashdb.LockedError (and so on) in tracebacks and reprs.
for _class in (
    Error,
    LockedError,
    CorruptedError,
    MismatchError,
    DistanceError,
    InvalidArgumentError,
    PoisonedError,
    ReadOnlyError,
    ClosedError,
    FileSystemError,
    ForkedError,
):
    _class.__module__ = "simhashdb"
del _class
