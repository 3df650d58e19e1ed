"""The record-storage seam: what an engine supplies to the one core above it.

The repository (`core.repository`) holds every rule — validation, the scope check, the lifecycle,
duplicate and overlap detection, supersession — and asks an engine only to store and look up.
An engine is a `RecordStore`; a write holds one `RecordTransaction` (the unit of work) from the
first lookup to the last write, so what it checked is what it changes:

- the directory engine (`engines.directory`): Markdown files under `records/`, the mutation lock,
  atomic files compared-and-swapped on their bytes, the supersession journal;
- the PostgreSQL engine (`engines.postgresql`): the same Markdown bytes in a `records` table, one
  database transaction per write, compare-and-swap on the row.

A record is always handed over as a `StoredRecord`: the parsed record, its store-relative location
(`records/<id>.md` unless an import placed it elsewhere) and the canonical bytes, which are also its
version for compare-and-swap (the HTTP ETag is their digest).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..core.records import Record, RecordSummary
from ..core.staging import FileWrite

MATCHING = ("candidate", "active")  # the statuses a proposal can duplicate or overlap

Progress = Callable[[int, int], None]  # (done, total)
__all__ = ["FileWrite", "Invalid", "MATCHING", "Progress", "RecordStore", "RecordTransaction", "StoredRecord"]

Invalid = list[tuple[str, str]]  # (store-relative path, reason) of records that cannot be parsed


@dataclass(frozen=True)
class StoredRecord:
    record: Record
    path: Path  # where the directory engine keeps it (the store root joined with its location)
    data: bytes  # the canonical Markdown bytes: also the version a compare-and-swap compares


class RecordTransaction(Protocol):
    """One write's view of the store, from its lookups to its last write. Raises `Conflict` when a
    record changed since it was read, `StoreIntegrityError` when a new record's id is taken."""

    def get(self, record_id: str, *, guarded: bool = True, known: StoredRecord | None = None) -> StoredRecord:
        """The record as stored now; NotFound, ScopeDenied for another scope's record, and
        (`guarded`) UnsafeWrite when it is missing and an unreadable record may hold it. `known`: the
        record as read before, returned as it is when the store still holds those very bytes."""
        ...

    def unused(self, record_id: str) -> None:
        """StoreIntegrityError unless `record_id` is free."""
        ...

    def title_matches(self, scope: str, kind: str, title: str) -> Iterator[StoredRecord]:
        """Candidate or active records that may have this scope, kind and normalized title, by location."""
        ...

    def guard(self, ids: Sequence[str] = (), titles: Sequence[str] = ()) -> None:
        """UnsafeWrite when an unreadable record may hold one of these ids or titles."""
        ...

    def create(self, record: Record) -> None: ...

    def replace(self, item: StoredRecord, record: Record) -> None:
        """Write `record` over `item`, only while it still holds `item.data`."""
        ...

    def remove(self, item: StoredRecord) -> None:
        """Delete `item`, only while it still holds `item.data`."""
        ...

    def supersede(self, old: StoredRecord, old_after: Record, new: Record, new_before: StoredRecord | None) -> None:
        """The two-record change, all or nothing: `old` becomes `old_after`, `new` is written (over
        `new_before`, or as a new record)."""
        ...


class RecordStore(Protocol):
    """One store's records. Reads take no lock; writes go through `transaction`."""

    def find(self, record_id: str) -> StoredRecord:
        """One record by id, any status; NotFound, ScopeDenied."""
        ...

    def listing(self) -> tuple[list[RecordSummary], Invalid]:
        """Every valid record's summary by id, and the unreadable records."""
        ...

    def scan(self, progress: Progress | None, *, recover: bool, leave_out_invalid: bool) -> tuple[
        list[StoredRecord], Invalid
    ]:  # fmt: skip
        """Every record, parsed; an invalid one fails the scan unless `leave_out_invalid`, a record of
        another scope or an id held twice always does. `recover`: finish an interrupted write first."""
        ...

    def review_records(self) -> tuple[list[StoredRecord], Invalid]:
        """The candidates, the records each may overlap and the records they supersede, by location."""
        ...

    def locked(self) -> AbstractContextManager[None]:
        """Hold the store's write lock (bounded wait, else MutationBusy) for a change made outside."""
        ...

    def transaction(self) -> AbstractContextManager[RecordTransaction]:
        """One write's unit of work: the write lock held, committed when the block ends normally."""
        ...

    def write_all(self, writes: Sequence[FileWrite], progress: Progress | None) -> None:
        """Write every record or none (an import); the caller holds `locked()`."""
        ...

    def erase(self) -> None:
        """Remove what the engine keeps of the store outside its directory (a store being destroyed), to
        take effect when `locked()`, which the caller holds, ends; the directory engine keeps nothing there."""
        ...
