"""The repository: every change to canonical records goes through here.

Each mutation takes the store's mutation lock (waiting up to a bound; still busy → MutationBusy),
rolls an interrupted supersession or import forward and then checks only what it touches: the
projection, brought up to date by its stat-based check, names the files of the ids involved and of
the records that could be duplicates or overlaps (same scope, kind and normalized title); those
files are read and parsed. Writes go through a temp file + fsync + rename, and only over the bytes
the check read (compare-and-swap), so an edit made meanwhile by someone who takes no lock survives
and the write fails with Conflict. The write then projects what it changed. When the projection
cannot be used, every record file is parsed instead, as before there was one. Reads take no lock.
In a long-running process (`freshness`), the check re-stats only the files its watcher reported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import journal, staging
from .atomic import read_or_none, remove_durably, replace_atomic_if
from .codec import parse_markdown, render_markdown
from .errors import (
    AccessDenied,
    Conflict,
    IndexBusy,
    IndexUnavailable,
    InvalidState,
    MutationBusy,
    NotFound,
    RecordError,
    ScopeDenied,
    StoreError,
    StoreIntegrityError,
    UnsafeWrite,
)
from .locks import DEFAULT_LOCK_WAIT_S, LockBusy, exclusive_lock
from .records import Record, RecordSummary, normalize, validate, validate_provenance
from .stores import StorePaths, record_scope
from .timestamps import Timestamp, later_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..index.freshness import StoreFreshness


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


MATCHING = ("candidate", "active")  # the statuses a proposal can duplicate or overlap
SNIFF_BYTES = 1 << 20  # how much of an invalid file is looked at for the ids and titles it may hold
_TITLE_LINE = re.compile(r"^\s*title\s*=\s*(.*?)\s*$", re.MULTILINE)


class Catalog(Protocol):
    """What a mutation or a review looks up: `index.catalog` answers from the projection, `_Scanned`
    from every file."""

    invalid_files: list[tuple[str, str]]  # (store-relative path, reason)

    def path_of(self, record_id: str) -> Path | None: ...

    def title_matches(self, scope: str, kind: str, title: str) -> list[Path]: ...

    def summaries(self) -> list[RecordSummary]: ...

    def review_paths(self) -> list[Path]: ...

    def written(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None: ...

    def close(self) -> None: ...


class _Scanned:
    """A catalog made by parsing every record file, for when the projection cannot be used."""

    def __init__(self, stored: list[StoredRecord]) -> None:
        self.invalid_files: list[tuple[str, str]] = []
        self._stored = stored
        self._by_id = {item.record.id: item.path for item in stored}

    def path_of(self, record_id: str) -> Path | None:
        return self._by_id.get(record_id)

    def title_matches(self, scope: str, kind: str, title: str) -> list[Path]:
        key = normalize(title)
        return [item.path for item in self._stored
                if item.record.status in MATCHING and (item.record.scope, item.record.kind) == (scope, kind)
                and normalize(item.record.title) == key]  # fmt: skip

    def review_paths(self) -> list[Path]:
        keys = {(r.scope, r.kind, normalize(r.title)) for r in (item.record for item in self._stored)
                if r.status == "candidate"}  # fmt: skip
        return [item.path for item in self._stored
                if item.record.status in MATCHING
                and (item.record.scope, item.record.kind, normalize(item.record.title)) in keys]  # fmt: skip

    def summaries(self) -> list[RecordSummary]:
        items = sorted(self._stored, key=lambda item: item.record.id)
        return [RecordSummary(r.id, r.title, r.kind, r.scope, r.status) for r in (item.record for item in items)]

    def written(self, changes: list[tuple[Path, Record | None, bytes | None]]) -> None:
        pass

    def close(self) -> None:
        pass


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
        return self._parse_every_file(progress, leave_out_invalid=False)[0]

    def scan_valid(self) -> tuple[list[StoredRecord], list[tuple[str, str]]]:
        """Parse every record file, writing nothing: the valid records, and the invalid files left out
        (store-relative path, reason), so that a review reads a degraded store instead of failing.
        A foreign-scope or duplicate record still fails the scan."""
        return self._parse_every_file(None, leave_out_invalid=True)

    def _parse_every_file(
        self, progress: Callable[[int, int], None] | None, *, leave_out_invalid: bool
    ) -> tuple[list[StoredRecord], list[tuple[str, str]]]:
        scope = self.scope
        seen: set[str] = set()
        stored, invalid = [], []
        files = record_files(self.paths.records)
        for done, path in enumerate(files, 1):
            try:
                item = self._read(path)
            except RecordError as exc:
                if not leave_out_invalid:
                    raise
                invalid.append((path.relative_to(self.paths.root).as_posix(), exc.detail))
                continue
            if item.record.scope != scope:
                raise ScopeDenied(item.record.id)
            if item.record.id in seen:
                raise StoreIntegrityError(f"record {item.record.id} appears in multiple files")
            seen.add(item.record.id)
            stored.append(item)
            if progress is not None:
                progress(done, len(files))
        return stored, invalid

    def find(self, record_id: str) -> StoredRecord:
        """One record by id, any status: `records/<id>.md` when it holds it, else the file the projection names."""
        scope = self.scope
        self._recover_if_idle()
        direct = self.paths.records / f"{record_id}.md"
        if direct.is_file() and not direct.is_symlink():
            item = self._read(direct)
            if item.record.id == record_id:
                if item.record.scope != scope:
                    raise ScopeDenied(record_id)
                return item
        catalog = self._catalog(wait=0.0)
        try:
            return _Mutation(self, catalog).get(record_id, guarded=False)
        finally:
            catalog.close()

    def find_allowed(self, record_id: str, scopes: list[str], access: list[str]) -> StoredRecord:
        item = self.find(record_id)
        if item.record.scope not in scopes:
            raise ScopeDenied(record_id)
        if item.record.access not in access:
            raise AccessDenied(record_id)
        return item

    def listing(self) -> tuple[list[RecordSummary], list[tuple[str, str]]]:
        """Every valid record's summary, by id, and the invalid record files (store-relative path,
        reason): read from the projection after its stat-based check (in a long-running process, its
        watcher's), not from every file."""
        _ = self.scope
        self._recover_if_idle()
        if self.freshness is not None:
            from ..index.catalog import warm_listing

            found = warm_listing(self.paths, self.freshness)
            if found is not None:
                return found
        catalog = self._catalog(wait=0.0)
        try:
            return catalog.summaries(), catalog.invalid_files
        finally:
            catalog.close()

    def records(self, include_inactive: bool = False) -> list[Record]:
        records = [item.record for item in self.scan()]
        if not include_inactive:
            records = [record for record in records if record.status == "active"]
        return sorted(records, key=lambda record: record.id)

    def review_records(self) -> tuple[list[StoredRecord], list[tuple[str, str]]]:
        """What a review of the candidates reads, by path: every candidate, the candidate and active
        records it may overlap (same scope, kind and normalized title) and the records it supersedes,
        each parsed from its file, found through the projection after its stat-based check rather
        than by parsing every file; and the invalid files (store-relative path, reason). Like a scan,
        it rolls no interrupted supersession forward; only the projection, derived data, is written."""
        _ = self.scope
        catalog = self._catalog(wait=0.0)
        try:
            invalid = list(catalog.invalid_files)
            stored = self._read_valid(catalog.review_paths(), invalid)
            known = {item.record.id for item in stored}
            superseded = dict.fromkeys(old for item in stored for old in item.record.supersedes if old not in known)
            found = (catalog.path_of(record_id) for record_id in superseded)
            stored += self._read_valid([path for path in found if path is not None], invalid)
        finally:
            catalog.close()
        return sorted(stored, key=lambda item: item.path.as_posix()), invalid

    def _read_valid(self, paths: list[Path], invalid: list[tuple[str, str]]) -> list[StoredRecord]:
        """The records in `paths` now; a file gone meanwhile is left out, an invalid one added to `invalid`."""
        stored = []
        for path in paths:
            try:
                stored.append(self._read(path))
            except FileNotFoundError:
                continue
            except RecordError as exc:
                invalid.append((path.relative_to(self.paths.root).as_posix(), exc.detail))
        return stored

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

    def _catalog(self, wait: float, freshness: StoreFreshness | None = None) -> Catalog:
        """The projection as the catalog of a check, or every file parsed when it cannot be used."""
        from ..index.catalog import open_catalog

        try:
            return open_catalog(self.paths, self.scope, wait, freshness)
        except (IndexBusy, IndexUnavailable, StoreError):
            return _Scanned(self.scan_read_only())

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the mutation lock, interrupted writes recovered, for a change made outside this class."""
        _ = self.scope  # raises NotInitialized before any file is created
        try:
            with exclusive_lock(self.paths.mutation_lock, wait=self.lock_wait):
                recover_interrupted(self.paths)
                yield
        except LockBusy:
            raise MutationBusy() from None

    @contextmanager
    def _mutation(self) -> Iterator[_Mutation]:
        from ..index.catalog import ready_to_write

        ready_to_write(self.paths)
        with self.locked():
            catalog = self._catalog(wait=self.lock_wait, freshness=self.freshness)
            mutation = _Mutation(self, catalog)
            try:
                yield mutation
            finally:
                if mutation.changes:
                    catalog.written(mutation.changes)
                catalog.close()

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
            match = store.match(record, exclude={record.id})
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
            match = store.match(replacement, exclude={old_id, replacement.id})
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
            match = store.match(candidate.record, exclude=exclude)
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
                store.supersede(old, activated, candidate.path, candidate.data, now)
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
            store.supersede(old, replacement, self.paths.records / f"{replacement.id}.md", None, now)
        return replacement

    def replace_if_unchanged(self, current: StoredRecord, replacement: Record) -> Record:
        """Write an edit only if the file still has the bytes the editor started from."""
        validate(replacement)
        if replacement.id != current.record.id:
            raise StoreIntegrityError("record id cannot change during an update")
        self._check_scope(replacement)
        with self._mutation() as store:
            on_disk = store.get(current.record.id)
            if on_disk.path != current.path or on_disk.data != current.data:
                raise Conflict("record changed while it was being edited")
            must_be(on_disk.record, "active")
            if replacement.status != "active":
                raise InvalidState(f"record {replacement.id} must stay active; it cannot be made {replacement.status}")
            store.replace(on_disk, replacement)
        return replacement

    def forget(self, record_id: str) -> None:
        """Permanently delete a record file (callers confirm first)."""
        with self._mutation() as store:
            store.remove(store.get(record_id))


class _Mutation:
    """One mutation's view of the store: lookups through the catalog, files read when touched, and
    writes only over the bytes that were read. `changes` lists what was written, for the catalog."""

    def __init__(self, repository: Repository, catalog: Catalog) -> None:
        self.paths = repository.paths
        self.scope = repository.scope
        self.catalog = catalog
        self.changes: list[tuple[Path, Record | None, bytes | None]] = []

    # -- checks ----------------------------------------------------------------------------

    def get(self, record_id: str, *, guarded: bool = True) -> StoredRecord:
        """The record `record_id` as its file holds it now. NotFound, ScopeDenied for a file of another
        scope, and (`guarded`) UnsafeWrite when it is missing and an invalid file may hold it."""
        for path in (self.paths.records / f"{record_id}.md", self.catalog.path_of(record_id)):
            item = self._read(path) if path is not None else None
            if item is not None and item.record.id == record_id:
                if item.record.scope != self.scope:
                    raise ScopeDenied(record_id)
                return item
        if guarded:
            self.guard(ids=[record_id])
        raise NotFound(record_id)

    def unused(self, record_id: str) -> None:
        """StoreIntegrityError unless `record_id` is free."""
        if self.catalog.path_of(record_id) is not None:
            raise StoreIntegrityError(f"record {record_id} already exists")
        if (self.paths.records / f"{record_id}.md").exists():
            raise StoreIntegrityError("record destination already exists")

    def match(self, record: Record, exclude: set[str]) -> tuple[str, Record] | None:
        """The first candidate/active record (by path) with the same scope, kind and normalized title:
        a duplicate when the normalized bodies are equal too, else an overlap. Ids in `exclude` are skipped."""
        title, body = normalize(record.title), normalize(record.body)
        for path in self.catalog.title_matches(record.scope, record.kind, record.title):
            item = self._read(path)
            other = item.record if item is not None else None
            if other is None or other.id in exclude or other.status not in MATCHING:
                continue
            if (other.scope, other.kind, normalize(other.title)) == (record.scope, record.kind, title):
                return ("duplicate" if normalize(other.body) == body else "overlap", other)
        return None

    def guard(self, ids: Sequence[str] = (), titles: Sequence[str] = ()) -> None:
        """UnsafeWrite naming the first invalid record file that may hold one of these ids (named in
        its file name or text) or titles (on a `title =` line, or no such line can be read at all)."""
        wanted_ids = [record_id.lower() for record_id in ids]
        wanted_titles = {normalize(title) for title in titles}
        for name, _reason in self.catalog.invalid_files:
            try:
                with open(self.paths.root / name, "rb") as handle:
                    text = handle.read(SNIFF_BYTES).decode("utf-8", "replace")
            except OSError:
                text = ""
            haystack = f"{name}\n{text}".lower()
            if any(record_id in haystack for record_id in wanted_ids):
                raise UnsafeWrite(name)
            if wanted_titles:
                found = {normalize(value.strip("\"'")) for value in _TITLE_LINE.findall(text)}
                if not found or found & wanted_titles:
                    raise UnsafeWrite(name)

    def _read(self, path: Path) -> StoredRecord | None:
        """The record in `path` now (None when there is no such file); an invalid file is UnsafeWrite."""
        data = read_or_none(path) if path.is_file() and not path.is_symlink() else None
        if data is None:
            return None
        try:
            return StoredRecord(parse_markdown(data, path.name), path, data)
        except RecordError:
            raise UnsafeWrite(path.relative_to(self.paths.root).as_posix()) from None

    # -- writes ----------------------------------------------------------------------------

    def create(self, record: Record) -> None:
        path = self.paths.records / f"{record.id}.md"
        data = render_markdown(record).encode()
        if not replace_atomic_if(path, None, data):
            raise StoreIntegrityError("record destination already exists")
        self.changes.append((path, record, data))

    def replace(self, item: StoredRecord, record: Record) -> None:
        data = render_markdown(record).encode()
        if not replace_atomic_if(item.path, item.data, data):
            raise Conflict("record changed while it was being written")
        self.changes.append((item.path, record, data))

    def remove(self, item: StoredRecord) -> None:
        if read_or_none(item.path) != item.data:
            raise Conflict("record changed while it was being written")
        remove_durably(item.path)
        self.changes.append((item.path, None, None))

    def supersede(
        self, old: StoredRecord, new: Record, new_path: Path, new_before: bytes | None, now: Timestamp
    ) -> None:
        """The journaled two-file change: `old` superseded, `new` written to `new_path` over `new_before`."""
        old_after = old.record.replace(status="superseded", updated_at=later_of(now, old.record.created_at))
        change = journal.Supersession(
            old_path=old.path,
            old_before=old.data,
            old_after=render_markdown(old_after).encode(),
            new_path=new_path,
            new_before=new_before,
            new_after=render_markdown(new).encode(),
        )
        journal.commit(self.paths, change)
        self.changes += [(old.path, old_after, change.old_after), (new_path, new, change.new_after)]


def recover_interrupted(paths: StorePaths) -> None:
    """Roll an interrupted supersession or import forward. The caller holds the mutation lock."""
    journal.recover(paths)
    staging.recover(paths)


def find_match(existing: list[StoredRecord], record: Record, exclude: set[str]) -> tuple[str, Record] | None:
    """The first candidate/active record with the same scope, kind and title: duplicate or overlap.

    Records whose id is in `exclude` are skipped.
    """
    title, body = normalize(record.title), normalize(record.body)
    for item in existing:
        other = item.record
        if other.id in exclude or other.status not in MATCHING:
            continue
        if other.scope == record.scope and other.kind == record.kind and normalize(other.title) == title:
            return ("duplicate" if normalize(other.body) == body else "overlap", other)
    return None
