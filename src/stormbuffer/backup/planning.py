"""Import planning: what every archive record becomes in the selected store, decided before any write.

Per archive record, in archive order:

1. a scope other than the store's needs a scope policy: skip it, or remap it to the store's scope;
2. the same id in the store with identical bytes is an *existing record* (existing policy: skip
   or overwrite); the same id with other content is an *id collision* (id policy: skip,
   overwrite the stored file, or remap to a fresh id);
3. otherwise a candidate or active record with another id but the same scope, kind and
   normalized title and body is *equivalent* (existing policy: skip, or overwrite it in place,
   keeping the stored record's id);
4. otherwise the record is imported as `records/<id>.md`.

A collision without a policy, or with policy `fail`, refuses the whole import. Afterwards
`supersedes` links to records whose id changed are rewritten. Records that nothing changed keep
their exact bytes; changed ones are re-rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ..core.codec import render_markdown
from ..core.errors import StoreIntegrityError
from ..core.ids import new_record_id
from ..core.records import Record, normalize
from ..core.repository import StoredRecord
from .archive import Archive, ArchiveRecord
from .errors import ImportCollision


class ScopePolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    REMAP = "remap"


class IdPolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    OVERWRITE = "overwrite"
    REMAP = "remap"


class ExistingPolicy(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    OVERWRITE = "overwrite"


@dataclass(frozen=True)
class Policies:
    """The chosen collision policies; None means "no policy": a collision refuses the import."""

    scope: ScopePolicy | None = None
    id: IdPolicy | None = None
    existing: ExistingPolicy | None = None


WRITE_ACTIONS = ("import", "overwrite", "remap")


@dataclass(frozen=True)
class PlannedRecord:
    source_id: str
    target_id: str
    scope: str
    destination: str  # store-relative path
    action: str  # import | overwrite | remap | skip_scope_collision | skip_id_collision | skip_existing_record | ...
    equivalent_record_id: str | None
    record: Record  # as it will be written
    data: bytes  # the bytes to write: the archive's own bytes unless the record changed
    before: bytes | None = field(default=None, repr=False)  # the destination's current bytes (overwrites)

    @property
    def writes(self) -> bool:
        return self.action in WRITE_ACTIONS


@dataclass(frozen=True)
class ImportPlan:
    records: tuple[PlannedRecord, ...]

    @property
    def writes(self) -> list[PlannedRecord]:
        return [item for item in self.records if item.writes]

    @property
    def imported(self) -> int:
        """Records written, overwrites and remaps included."""
        return len(self.writes)

    @property
    def skipped(self) -> int:
        return len(self.records) - self.imported

    @property
    def overwritten(self) -> int:
        return sum(item.action == "overwrite" for item in self.records)

    @property
    def remapped(self) -> int:
        return sum(item.action == "remap" for item in self.records)


@dataclass(frozen=True)
class _Draft:
    entry: ArchiveRecord
    record: Record
    changed: bool
    action: str
    destination: Path
    equivalent: StoredRecord | None
    before: bytes | None = None


def plan_import(
    archive: Archive,
    existing: Sequence[StoredRecord],
    store_scope: str,
    root: Path,
    policies: Policies,
    new_id: Callable[[], str] = new_record_id,
) -> ImportPlan:
    """Decide every record's action; raise ImportCollision or StoreIntegrityError and write nothing."""
    by_id = {item.record.id: item for item in existing}
    records_dir = root / "records"
    drafts = []
    for entry in archive.records:
        record, changed = entry.record, False
        if record.scope != store_scope:
            if _scope_action(policies.scope, record, store_scope) is ScopePolicy.SKIP:
                drafts.append(
                    _Draft(entry, record, False, "skip_scope_collision", records_dir / f"{record.id}.md", None)
                )
                continue
            record, changed = record.replace(scope=store_scope), True
        equivalent = _equivalent(existing, record)
        same = by_id.get(record.id)
        if same is not None and not changed and same.data == entry.data:
            action = _existing_action(policies.existing, record.id, same.record.id, "skip_existing_record")
            drafts.append(_Draft(entry, record, False, action, same.path, equivalent, same.data))
        elif same is not None:
            drafts.append(_id_collision(policies.id, entry, record, changed, same, equivalent, records_dir, new_id))
        elif equivalent is not None:
            action = _existing_action(policies.existing, record.id, equivalent.record.id, "skip_equivalent_record")
            if action == "overwrite":
                record, changed = record.replace(id=equivalent.record.id), True
            destination = equivalent.path
            drafts.append(_Draft(entry, record, changed, action, destination, equivalent, equivalent.data))
        else:
            drafts.append(_Draft(entry, record, changed, "import", records_dir / f"{record.id}.md", None))
    _check_destinations(drafts, {item.path for item in existing})
    renamed = _renamed(drafts)
    return ImportPlan(tuple(_finish(draft, renamed, root) for draft in drafts))


def _scope_action(policy: ScopePolicy | None, record: Record, store_scope: str) -> ScopePolicy:
    if policy is None:
        raise ImportCollision(
            f"scope collision requires an explicit policy: record {record.id} has scope `{record.scope}`, "
            f"the selected store requires `{store_scope}`"
        )
    if policy is ScopePolicy.FAIL:
        raise ImportCollision(f"scope collision: archive has `{record.scope}`, selected store requires `{store_scope}`")
    return policy


def _existing_action(policy: ExistingPolicy | None, archive_id: str, stored_id: str, skip_action: str) -> str:
    if policy is None:
        raise ImportCollision(f"existing-record collision requires an explicit policy: record {archive_id}")
    if policy is ExistingPolicy.FAIL:
        raise ImportCollision(f"archive record {archive_id} already exists as record {stored_id}")
    return skip_action if policy is ExistingPolicy.SKIP else "overwrite"


def _id_collision(
    policy: IdPolicy | None,
    entry: ArchiveRecord,
    record: Record,
    changed: bool,
    same: StoredRecord,
    equivalent: StoredRecord | None,
    records_dir: Path,
    new_id: Callable[[], str],
) -> _Draft:
    if policy is None:
        raise ImportCollision(f"id collision requires an explicit policy: record {record.id}")
    if policy is IdPolicy.FAIL:
        raise ImportCollision(f"record id collision for {record.id}")
    if policy is IdPolicy.SKIP:
        return _Draft(entry, record, changed, "skip_id_collision", same.path, equivalent)
    if policy is IdPolicy.OVERWRITE:
        return _Draft(entry, record, changed, "overwrite", same.path, equivalent, same.data)
    fresh = new_id()
    return _Draft(entry, record.replace(id=fresh), True, "remap", records_dir / f"{fresh}.md", equivalent)


def _equivalent(existing: Sequence[StoredRecord], record: Record) -> StoredRecord | None:
    """A candidate or active record with another id and the same scope, kind, title and body (normalized)."""
    title, body = normalize(record.title), normalize(record.body)
    for item in existing:
        other = item.record
        if (
            other.id != record.id
            and other.status in ("candidate", "active")
            and (other.scope, other.kind) == (record.scope, record.kind)
            and normalize(other.title) == title
            and normalize(other.body) == body
        ):
            return item
    return None


def _check_destinations(drafts: Sequence[_Draft], existing_paths: set[Path]) -> None:
    seen: set[Path] = set()
    for draft in drafts:
        if draft.action not in WRITE_ACTIONS:
            continue
        if draft.destination in seen:
            raise StoreIntegrityError(
                f"two archive records would be written to the file of record {draft.record.id}; import them separately"
            )
        if draft.action != "overwrite" and draft.destination in existing_paths:
            raise StoreIntegrityError("record destination already exists")
        seen.add(draft.destination)


def _renamed(drafts: Sequence[_Draft]) -> dict[str, str]:
    """Archive id → stored id for every written record whose id changed."""
    return {
        draft.entry.record.id: draft.record.id
        for draft in drafts
        if draft.action in WRITE_ACTIONS and draft.record.id != draft.entry.record.id
    }


def _finish(draft: _Draft, renamed: dict[str, str], root: Path) -> PlannedRecord:
    record, writes = draft.record, draft.action in WRITE_ACTIONS
    changed = writes and draft.changed
    if writes and any(old in renamed for old in record.supersedes):
        record, changed = record.replace(supersedes=tuple(renamed.get(old, old) for old in record.supersedes)), True
    return PlannedRecord(
        source_id=draft.entry.record.id,
        target_id=record.id,
        scope=record.scope,
        destination=draft.destination.relative_to(root).as_posix(),
        action=draft.action,
        equivalent_record_id=None if draft.equivalent is None else draft.equivalent.record.id,
        record=record,
        data=render_markdown(record, "<export>").encode("utf-8") if changed else draft.entry.data,
        before=draft.before if writes else None,
    )
