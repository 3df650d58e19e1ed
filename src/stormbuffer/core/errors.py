"""Errors raised by the core.

Messages are user-facing and sanitized: they name a record file by its file name only and never
contain a store's absolute path, a record body or a secret. The protocol layer maps the classes
to version-1 error codes; the CLI prints the message.
"""

from __future__ import annotations

import errno

NO_SPACE = "no space left on device; free some disk space, then retry"
_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_SQLITE_FULL = 13  # "database or disk is full"


class StormbufferError(Exception):
    """Base class for every expected failure."""


class InvalidInput(StormbufferError):
    """A caller supplied a value the operation cannot accept."""


class RecordError(StormbufferError):
    """A canonical record (a file, an archive entry or an editor buffer) is invalid."""

    def __init__(self, context: str, detail: str) -> None:
        # A record with no better name (the default context) is not named twice: "invalid record: …"
        super().__init__(f"invalid record: {detail}" if context == "record" else f"invalid record {context}: {detail}")
        self.context = context
        self.detail = detail


class StoreError(StormbufferError):
    """The store itself cannot be used (configuration, layout, environment)."""


class NotInitialized(StoreError):
    def __init__(self) -> None:
        super().__init__("store is not initialized (run `sbuf init`, or `sbuf --project init` for a project store)")


class DatabaseUnavailable(StoreError):
    """A PostgreSQL store's database cannot be used; the message names the variable, never the URL."""


class RepositoryError(StormbufferError):
    """A repository operation was refused."""


class NotFound(RepositoryError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"record {record_id} was not found")


class ScopeDenied(RepositoryError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"record {record_id} is outside the selected scope")


class AccessDenied(RepositoryError):
    def __init__(self, record_id: str) -> None:
        super().__init__(f"record {record_id} is not available to this access class")


class InvalidState(RepositoryError):
    """The lifecycle does not permit the operation."""


class Conflict(RepositoryError):
    """Another writer holds the store, or the record changed meanwhile."""


class MutationBusy(Conflict):
    def __init__(self) -> None:
        super().__init__("store mutation lock is busy: the store stayed busy for as long as a write waits; retry it")


class StoreIntegrityError(RepositoryError):
    """Duplicate ids, immutable ids, colliding destinations, broken journals."""


class IndexUnavailable(StormbufferError):
    """The disposable projection cannot be opened or written."""


class IndexBusy(StormbufferError):
    def __init__(self) -> None:
        super().__init__("SQLite projection is busy; retry the operation")


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, says the disk (or quota) is full.

    Follows `__cause__`, `__context__` and a database wrapper's `orig`, so a projection error raised
    from SQLite's "database or disk is full" is recognised wherever it surfaces.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_SPACE_ERRNOS:
            return True
        if getattr(current, "sqlite_errorcode", None) == _SQLITE_FULL:
            return True
        orig = getattr(current, "orig", None)
        pending += [current.__cause__, current.__context__, orig if isinstance(orig, BaseException) else None]
    return False


class UnsafeWrite(RecordError):
    """An invalid record file may hold an id or title the write must check, so it cannot be checked.

    The message names the file by its store-relative path only (control characters escaped)."""

    def __init__(self, name: str) -> None:
        shown = name.encode("unicode_escape").decode("ascii")
        detail = "the file is invalid and may hold an id or title this write must check; repair it first"
        super().__init__(shown, detail)
        self.name = shown
