"""The repository: every change to canonical records goes through here.

Each mutation takes the store's non-blocking mutation lock (busy → MutationBusy at once), rolls
an interrupted supersession or import forward, scans and validates every record file, then writes with
temp file + fsync + rename. Reads take no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from . import journal, staging
from .atomic import remove_durably, write_atomic
from .codec import parse_markdown, render_markdown
from .errors import (
    AccessDenied,
    Conflict,
    InvalidState,
    MutationBusy,
    NotFound,
    RecordError,
    ScopeDenied,
    StoreIntegrityError,
)
from .locks import LockBusy, exclusive_lock
from .records import Record, normalize, validate, validate_provenance
from .stores import StorePaths, record_scope
from .timestamps import Timestamp, later_of


@dataclass(frozen=True)
class StoredRecord:
    record: Record
    path: Path
    data: bytes


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


def record_files(records_dir: Path) -> list[Path]:
    """Every regular `*.md` file below the records directory (symlinks ignored), sorted by path."""
    if not records_dir.is_dir():
        return []
    found = [path for path in records_dir.rglob("*.md") if path.is_file() and not path.is_symlink()]
    return sorted(found, key=lambda path: path.as_posix())


def must_be(stored: Record, status: str) -> None:
    if stored.status != status:
        article = "a " if status == "candidate" else ""
        raise InvalidState(f"record {stored.id} is {stored.status}, not {article}{status}")


class Repository:
    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths

    @cached_property
    def scope(self) -> str:
        """The store's record scope; raises NotInitialized."""
        return record_scope(self.paths)

    # ---- reading -------------------------------------------------------------------------

    def scan(self, progress: Callable[[int, int], None] | None = None) -> list[StoredRecord]:
        """Finish an interrupted supersession or import when idle, then `scan_read_only`."""
        _ = self.scope  # NotInitialized before the journal is looked at
        self._recover_if_idle()
        return self.scan_read_only(progress)

    def scan_read_only(self, progress: Callable[[int, int], None] | None = None) -> list[StoredRecord]:
        """Parse every record file, writing nothing; any invalid, foreign-scope or duplicate file fails the scan.

        `progress(done, total)` is called after each file.
        """
        scope = self.scope
        seen: set[str] = set()
        stored = []
        files = record_files(self.paths.records)
        for done, path in enumerate(files, 1):
            item = self._read(path)
            if item.record.scope != scope:
                raise ScopeDenied(item.record.id)
            if item.record.id in seen:
                raise StoreIntegrityError(f"record {item.record.id} appears in multiple files")
            seen.add(item.record.id)
            stored.append(item)
            if progress is not None:
                progress(done, len(files))
        return stored

    def find(self, record_id: str) -> StoredRecord:
        """One record by id, any status. Uses `records/<id>.md` when present, else a full scan."""
        scope = self.scope
        self._recover_if_idle()
        direct = self.paths.records / f"{record_id}.md"
        if direct.is_file() and not direct.is_symlink():
            item = self._read(direct)
            if item.record.id == record_id:
                if item.record.scope != scope:
                    raise ScopeDenied(record_id)
                return item
        for item in self.scan():
            if item.record.id == record_id:
                return item
        raise NotFound(record_id)

    def find_allowed(self, record_id: str, scopes: list[str], access: list[str]) -> StoredRecord:
        item = self.find(record_id)
        if item.record.scope not in scopes:
            raise ScopeDenied(record_id)
        if item.record.access not in access:
            raise AccessDenied(record_id)
        return item

    def records(self, include_inactive: bool = False) -> list[Record]:
        records = [item.record for item in self.scan()]
        if not include_inactive:
            records = [record for record in records if record.status == "active"]
        return sorted(records, key=lambda record: record.id)

    def _read(self, path: Path) -> StoredRecord:
        data = path.read_bytes()
        return StoredRecord(parse_markdown(data, path.name), path, data)

    def _recover_if_idle(self) -> None:
        """Readers finish an interrupted supersession or import when no writer is active."""
        if self.paths.journal.exists() or self.paths.import_journal.exists():
            try:
                with exclusive_lock(self.paths.mutation_lock):
                    recover_interrupted(self.paths)
            except LockBusy:
                pass

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the mutation lock, interrupted writes recovered, for a change made outside this class."""
        _ = self.scope  # raises NotInitialized before any file is created
        try:
            with exclusive_lock(self.paths.mutation_lock):
                recover_interrupted(self.paths)
                yield
        except LockBusy:
            raise MutationBusy() from None

    @contextmanager
    def _mutation(self) -> Iterator[list[StoredRecord]]:
        with self.locked():
            yield self.scan()

    def _write_new(self, record: Record, existing: list[StoredRecord]) -> Path:
        if any(item.record.id == record.id for item in existing):
            raise StoreIntegrityError(f"record {record.id} already exists")
        path = self.paths.records / f"{record.id}.md"
        if path.exists():
            raise StoreIntegrityError("record destination already exists")
        write_atomic(path, render_markdown(record).encode())
        return path

    def _check_scope(self, record: Record) -> None:
        if record.scope != self.scope:
            raise ScopeDenied(record.id)

    def add(self, record: Record) -> Record:
        """Store a human-authored active record (no provenance rule, no duplicate detection)."""
        validate(record)
        self._check_scope(record)
        if record.status != "active":
            raise InvalidState("new records must have active status")
        with self._mutation() as existing:
            self._write_new(record, existing)
        return record

    def propose(self, record: Record, actor: str) -> ProposalResult:
        """A proposal: agents always create candidates; humans activate unless it may overlap."""
        try:
            validate(record)
            validate_provenance(record)
        except RecordError as exc:
            return ProposalResult("invalid", record.id, None, None, str(exc))
        self._check_scope(record)
        with self._mutation() as existing:
            match = find_match(existing, record, exclude={record.id})
            if any(item.record.id == record.id for item in existing):
                raise StoreIntegrityError(f"record {record.id} already exists")
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", record.id, other.id, other.status, "proposal matches an existing memory"
                )
            status = "active" if actor == "human" and not match else "candidate"
            record = record.replace(status=status, updated_at=later_of(Timestamp.now(), record.created_at))
            self._write_new(record, existing)
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
        with self._mutation() as existing:
            old = _by_id(existing, old_id)
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
            match = find_match(existing, replacement, exclude={old_id, replacement.id})
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", replacement.id, other.id, other.status, "update matches another memory"
                )
            self._write_new(replacement, existing)
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
        with self._mutation() as existing:
            candidate = _by_id(existing, record_id)
            must_be(candidate.record, "candidate")
            validate_provenance(candidate.record, candidate.path.name)
            self._check_scope(candidate.record)
            exclude = {record_id, *candidate.record.supersedes}
            match = find_match(existing, candidate.record, exclude=exclude)
            if match and match[0] == "duplicate":
                other = match[1]
                return ProposalResult(
                    "duplicate_of", record_id, other.id, "candidate", "candidate duplicates an existing memory"
                )
            now = Timestamp.now()
            activated = candidate.record.replace(status="active", updated_at=later_of(now, candidate.record.created_at))
            if len(candidate.record.supersedes) == 1:
                old = _by_id(existing, candidate.record.supersedes[0])
                must_be(old.record, "active")
                if old.record.scope != candidate.record.scope:
                    raise ScopeDenied(old.record.id)
                self._commit_supersession(old, activated, candidate.path, candidate.data, now)
                return ProposalResult("accepted", record_id, old.record.id, "active", "replacement candidate approved")
            write_atomic(candidate.path, render_markdown(activated).encode())
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
        with self._mutation() as existing:
            item = _by_id(existing, record_id)
            if scopes is not None and item.record.scope not in scopes:
                raise ScopeDenied(record_id)
            if access is not None and item.record.access not in access:
                raise AccessDenied(record_id)
            must_be(item.record, required)
            changed = item.record.replace(status=target, updated_at=later_of(Timestamp.now(), item.record.created_at))
            write_atomic(item.path, render_markdown(changed).encode())
        return changed

    def supersede(self, old_id: str, replacement: Record) -> Record:
        """Replace an active record by an active replacement at once (journaled)."""
        validate(replacement)
        validate_provenance(replacement)
        self._check_scope(replacement)
        with self._mutation() as existing:
            old = _by_id(existing, old_id)
            must_be(old.record, "active")
            if replacement.id == old_id:
                raise StoreIntegrityError("record id cannot change during an update")
            if old.record.scope != replacement.scope:
                raise ScopeDenied(replacement.id)
            if old_id not in replacement.supersedes:
                raise InvalidState(f"replacement {replacement.id} does not supersede {old_id}")
            if any(item.record.id == replacement.id for item in existing):
                raise StoreIntegrityError(f"record {replacement.id} already exists")
            if replacement.status != "active":
                raise InvalidState(f"record {replacement.id} must stay active; it cannot be made {replacement.status}")
            new_path = self.paths.records / f"{replacement.id}.md"
            if new_path.exists():
                raise StoreIntegrityError("record destination already exists")
            now = Timestamp.now()
            replacement = replacement.replace(updated_at=later_of(now, replacement.created_at))
            self._commit_supersession(old, replacement, new_path, None, now)
        return replacement

    def _commit_supersession(
        self, old: StoredRecord, new: Record, new_path: Path, new_before: bytes | None, now: Timestamp
    ) -> None:
        old_after = old.record.replace(status="superseded", updated_at=later_of(now, old.record.created_at))
        journal.commit(
            self.paths,
            journal.Supersession(
                old_path=old.path,
                old_before=old.data,
                old_after=render_markdown(old_after).encode(),
                new_path=new_path,
                new_before=new_before,
                new_after=render_markdown(new).encode(),
            ),
        )

    def replace_if_unchanged(self, current: StoredRecord, replacement: Record) -> Record:
        """Write an edit only if the file still has the bytes the editor started from."""
        validate(replacement)
        if replacement.id != current.record.id:
            raise StoreIntegrityError("record id cannot change during an update")
        self._check_scope(replacement)
        with self._mutation() as existing:
            on_disk = _by_id(existing, current.record.id)
            if on_disk.path != current.path or on_disk.data != current.data:
                raise Conflict("record changed while it was being edited")
            must_be(on_disk.record, "active")
            if replacement.status != "active":
                raise InvalidState(f"record {replacement.id} must stay active; it cannot be made {replacement.status}")
            write_atomic(current.path, render_markdown(replacement).encode())
        return replacement

    def forget(self, record_id: str) -> None:
        """Permanently delete a record file (callers confirm first)."""
        with self._mutation() as existing:
            remove_durably(_by_id(existing, record_id).path)


def recover_interrupted(paths: StorePaths) -> None:
    """Roll an interrupted supersession or import forward. The caller holds the mutation lock."""
    journal.recover(paths)
    staging.recover(paths)


def _by_id(existing: list[StoredRecord], record_id: str) -> StoredRecord:
    for item in existing:
        if item.record.id == record_id:
            return item
    raise NotFound(record_id)


def find_match(existing: list[StoredRecord], record: Record, exclude: set[str]) -> tuple[str, Record] | None:
    """The first candidate/active record with the same scope, kind and title: duplicate or overlap.

    Records whose id is in `exclude` are skipped.
    """
    title, body = normalize(record.title), normalize(record.body)
    for item in existing:
        other = item.record
        if other.id in exclude or other.status not in ("candidate", "active"):
            continue
        if other.scope == record.scope and other.kind == record.kind and normalize(other.title) == title:
            return ("duplicate" if normalize(other.body) == body else "overlap", other)
    return None
