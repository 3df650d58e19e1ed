"""The repository: every change to canonical records goes through here, written once for every engine.

It holds the rules — validation, the scope check, the lifecycle, the secret guard's callers,
duplicate and overlap detection, supersession — and leaves storage to the store's engine
(`engines`): reads, the write lock and one unit of work per write, in which every lookup and write
of that change happens. Reads take no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from ..engines import open_record_store
from ..engines.base import MATCHING, RecordStore, RecordTransaction, StoredRecord
from .errors import AccessDenied, Conflict, InvalidState, RecordError, ScopeDenied, StoreIntegrityError
from .locks import DEFAULT_LOCK_WAIT_S
from .records import Record, RecordSummary, normalize, validate, validate_provenance
from .stores import StorePaths, record_scope
from .timestamps import Timestamp, later_of

if TYPE_CHECKING:
    from ..index.freshness import StoreFreshness

__all__ = ["ProposalResult", "Repository", "StoredRecord", "find_match", "must_be"]


@dataclass(frozen=True)
class ProposalResult:
    outcome: str  # accepted | duplicate_of | possible_overlap | requires_approval | invalid
    record_id: str
    related_id: str | None
    status: str | None
    message: str

    def to_json(self) -> dict[str, object]:
        return {
            "outcome": self.outcome,
            "record_id": self.record_id,
            "related_id": self.related_id,
            "status": self.status,
            "message": self.message,
        }


def must_be(stored: Record, status: str) -> None:
    if stored.status != status:
        article = "a " if status == "candidate" else ""
        raise InvalidState(f"record {stored.id} is {stored.status}, not {article}{status}")


class Repository:
    def __init__(
        self, paths: StorePaths, *, lock_wait: float = DEFAULT_LOCK_WAIT_S, freshness: StoreFreshness | None = None
    ) -> None:
        self.paths = paths
        self.lock_wait = lock_wait  # seconds a mutation waits for a busy store before MutationBusy
        self.freshness = freshness  # a long-running process's watcher of the store: checks re-stat what changed

    @cached_property
    def scope(self) -> str:
        """The store's record scope; raises NotInitialized."""
        return record_scope(self.paths)

    @cached_property
    def engine(self) -> RecordStore:
        """The store's record engine; raises NotInitialized."""
        return open_record_store(self.paths, self.scope, self.lock_wait, self.freshness)

    # ---- reading -------------------------------------------------------------------------

    def scan(self, progress: Callable[[int, int], None] | None = None) -> list[StoredRecord]:
        """Finish an interrupted write when idle, then `scan_read_only`."""
        return self.engine.scan(progress, recover=True, leave_out_invalid=False)[0]

    def scan_read_only(self, progress: Callable[[int, int], None] | None = None) -> list[StoredRecord]:
        """Every record, parsed, writing nothing; any invalid, foreign-scope or duplicate record fails
        the scan. `progress(done, total)` is called after each record."""
        return self.engine.scan(progress, recover=False, leave_out_invalid=False)[0]

    def scan_valid(self) -> tuple[list[StoredRecord], list[tuple[str, str]]]:
        """Every record, parsed, writing nothing: the valid records, and the invalid ones left out
        (store-relative path, reason), so that a review reads a degraded store instead of failing.
        A foreign-scope or duplicate record still fails the scan."""
        return self.engine.scan(None, recover=False, leave_out_invalid=True)

    def find(self, record_id: str) -> StoredRecord:
        """One record by id, any status."""
        return self.engine.find(record_id)

    def find_allowed(self, record_id: str, scopes: list[str], access: list[str]) -> StoredRecord:
        item = self.find(record_id)
        if item.record.scope not in scopes:
            raise ScopeDenied(record_id)
        if item.record.access not in access:
            raise AccessDenied(record_id)
        return item

    def listing(self) -> tuple[list[RecordSummary], list[tuple[str, str]]]:
        """Every valid record's summary, by id, and the invalid records (store-relative path, reason)."""
        return self.engine.listing()

    def records(self, include_inactive: bool = False) -> list[Record]:
        records = [item.record for item in self.scan()]
        if not include_inactive:
            records = [record for record in records if record.status == "active"]
        return sorted(records, key=lambda record: record.id)

    def review_records(self) -> tuple[list[StoredRecord], list[tuple[str, str]]]:
        """What a review of the candidates reads, by location: every candidate, the candidate and
        active records it may overlap (same scope, kind and normalized title) and the records it
        supersedes; and the invalid records (store-relative path, reason)."""
        return self.engine.review_records()

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the write lock, interrupted writes recovered, for a change made outside this class."""
        with self.engine.locked():
            yield

    @contextmanager
    def _mutation(self) -> Iterator[RecordTransaction]:
        with self.engine.transaction() as transaction:
            yield transaction

    def _check_scope(self, record: Record) -> None:
        if record.scope != self.scope:
            raise ScopeDenied(record.id)

    def add(self, record: Record) -> Record:
        """Store a human-authored active record (no provenance rule, no duplicate detection)."""
        validate(record)
        self._check_scope(record)
        if record.status != "active":
            raise InvalidState("new records must have active status")
        with self._mutation() as store:
            store.guard(ids=[record.id])
            store.create(record)
        return record

    def propose(self, record: Record, actor: str) -> ProposalResult:
        """A proposal: agents always create candidates; humans activate unless it may overlap."""
        try:
            validate(record)
            validate_provenance(record)
        except RecordError as exc:
            return ProposalResult("invalid", record.id, None, None, str(exc))
        self._check_scope(record)
        with self._mutation() as store:
            store.guard(ids=[record.id], titles=[record.title])
            match = _match(store, record, exclude={record.id})
            store.unused(record.id)
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", record.id, other.id, other.status, "proposal matches an existing memory"
                )
            status = "active" if actor == "human" and not match else "candidate"
            record = record.replace(status=status, updated_at=later_of(Timestamp.now(), record.created_at))
            store.create(record)
        if match:
            return ProposalResult(
                "possible_overlap",
                record.id,
                match[1].id,
                "candidate",
                "proposal may overlap an existing memory; review both records before approval or supersession",
            )
        if status == "active":
            return ProposalResult("accepted", record.id, None, "active", "human proposal was activated")
        return ProposalResult("requires_approval", record.id, None, "candidate", "candidate awaits explicit approval")

    def propose_update(self, old_id: str, replacement: Record) -> ProposalResult:
        """A replacement candidate linked to an active record, which stays active until approval."""
        try:
            validate(replacement)
            validate_provenance(replacement)
        except RecordError as exc:
            return ProposalResult("invalid", replacement.id, None, None, str(exc))
        self._check_scope(replacement)
        with self._mutation() as store:
            old = store.get(old_id)
            must_be(old.record, "active")
            if replacement.id == old_id:
                raise StoreIntegrityError("record id cannot change during an update")
            if old.record.scope != replacement.scope:
                raise ScopeDenied(replacement.id)
            replacement = replacement.replace(
                supersedes=(old_id,),
                status="candidate",
                updated_at=later_of(Timestamp.now(), replacement.created_at),
            )
            store.guard(ids=[replacement.id], titles=[replacement.title])
            match = _match(store, replacement, exclude={old_id, replacement.id})
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", replacement.id, other.id, other.status, "update matches another memory"
                )
            store.unused(replacement.id)
            store.create(replacement)
        if match:
            return ProposalResult(
                "possible_overlap",
                replacement.id,
                match[1].id,
                "candidate",
                "update may overlap another memory; review both records before approval",
            )
        return ProposalResult(
            "requires_approval", replacement.id, old_id, "candidate", "replacement candidate awaits explicit approval"
        )

    def approve(self, record_id: str) -> ProposalResult:
        with self._mutation() as store:
            candidate = store.get(record_id)
            must_be(candidate.record, "candidate")
            validate_provenance(candidate.record, candidate.path.name)
            self._check_scope(candidate.record)
            exclude = {record_id, *candidate.record.supersedes}
            store.guard(titles=[candidate.record.title])
            match = _match(store, candidate.record, exclude=exclude)
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", record_id, other.id, "candidate", "candidate duplicates an existing memory"
                )
            now = Timestamp.now()
            activated = candidate.record.replace(status="active", updated_at=later_of(now, candidate.record.created_at))
            if len(candidate.record.supersedes) == 1:
                old = store.get(candidate.record.supersedes[0])
                must_be(old.record, "active")
                if old.record.scope != candidate.record.scope:
                    raise ScopeDenied(old.record.id)
                _supersede(store, old, activated, candidate, now)
                return ProposalResult("accepted", record_id, old.record.id, "active", "replacement candidate approved")
            store.replace(candidate, activated)
        return ProposalResult("accepted", record_id, None, "active", "candidate approved")

    def reject(self, record_id: str) -> ProposalResult:
        self._transition(record_id, "candidate", "archived")
        return ProposalResult("accepted", record_id, None, "archived", "candidate rejected and archived")

    def archive(self, record_id: str, scopes: list[str] | None = None, access: list[str] | None = None) -> Record:
        return self._transition(record_id, "active", "archived", scopes, access)

    def restore(self, record_id: str) -> Record:
        return self._transition(record_id, "archived", "active")

    def _transition(
        self,
        record_id: str,
        required: str,
        target: str,
        scopes: list[str] | None = None,
        access: list[str] | None = None,
    ) -> Record:
        with self._mutation() as store:
            item = store.get(record_id)
            if scopes is not None and item.record.scope not in scopes:
                raise ScopeDenied(record_id)
            if access is not None and item.record.access not in access:
                raise AccessDenied(record_id)
            must_be(item.record, required)
            changed = item.record.replace(status=target, updated_at=later_of(Timestamp.now(), item.record.created_at))
            store.replace(item, changed)
        return changed

    def supersede(self, old_id: str, replacement: Record) -> Record:
        """Replace an active record by an active replacement at once (journaled)."""
        validate(replacement)
        validate_provenance(replacement)
        self._check_scope(replacement)
        with self._mutation() as store:
            old = store.get(old_id)
            must_be(old.record, "active")
            if replacement.id == old_id:
                raise StoreIntegrityError("record id cannot change during an update")
            if old.record.scope != replacement.scope:
                raise ScopeDenied(replacement.id)
            if old_id not in replacement.supersedes:
                raise InvalidState(f"replacement {replacement.id} does not supersede {old_id}")
            store.guard(ids=[replacement.id])
            store.unused(replacement.id)
            if replacement.status != "active":
                raise InvalidState(f"record {replacement.id} must stay active; it cannot be made {replacement.status}")
            now = Timestamp.now()
            replacement = replacement.replace(updated_at=later_of(now, replacement.created_at))
            _supersede(store, old, replacement, None, now)
        return replacement

    def replace_if_unchanged(self, current: StoredRecord, replacement: Record) -> Record:
        """Write an edit only if the file still has the bytes the editor started from."""
        validate(replacement)
        if replacement.id != current.record.id:
            raise StoreIntegrityError("record id cannot change during an update")
        self._check_scope(replacement)
        with self._mutation() as store:
            on_disk = store.get(current.record.id, known=current)
            if on_disk.path != current.path or on_disk.data != current.data:
                raise Conflict("record changed while it was being edited")
            must_be(on_disk.record, "active")
            if replacement.status != "active":
                raise InvalidState(f"record {replacement.id} must stay active; it cannot be made {replacement.status}")
            store.replace(on_disk, replacement)
        return replacement

    def forget(self, record_id: str, known: StoredRecord | None = None) -> None:
        """Permanently delete a record file (callers confirm first); `known`: the record as the caller read it."""
        with self._mutation() as store:
            store.remove(store.get(record_id, known=known))


def _match(store: RecordTransaction, record: Record, exclude: set[str]) -> tuple[str, Record] | None:
    """The first candidate/active record (by location) with the same scope, kind and normalized title:
    a duplicate when the normalized bodies are equal too, else an overlap. Ids in `exclude` are skipped."""
    return find_match(list(store.title_matches(record.scope, record.kind, record.title)), record, exclude)


def _supersede(
    store: RecordTransaction, old: StoredRecord, new: Record, new_before: StoredRecord | None, now: Timestamp
) -> None:
    """`old` superseded and `new` written (over `new_before`, or as a new record), all or nothing."""
    old_after = old.record.replace(status="superseded", updated_at=later_of(now, old.record.created_at))
    store.supersede(old, old_after, new, new_before)


def find_match(existing: list[StoredRecord], record: Record, exclude: set[str]) -> tuple[str, Record] | None:
    """The first candidate/active record with the same scope, kind and title: duplicate or overlap.

    Records whose id is in `exclude` are skipped.
    """
    title = normalize(record.title)
    for item in existing:
        other = item.record
        if other.id in exclude or other.status not in MATCHING:
            continue
        if other.scope == record.scope and other.kind == record.kind and normalize(other.title) == title:
            # The bodies are normalized only now: a large body is not copied when no title matches.
            return ("duplicate" if normalize(other.body) == normalize(record.body) else "overlap", other)
    return None
