"""What each page shows, read from the core: plain data for the templates, computed on a worker thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stormbuffer.core import review
from stormbuffer.core.records import Record
from stormbuffer.core.repository import Repository, StoredRecord
from stormbuffer.core.stores import StorePaths, View, retrieval_stores
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.protocol.session import Session

from ..http.records import etag
from .render import DiffRow, side_by_side


@dataclass(frozen=True)
class InboxItem:
    record: Record
    age_days: int
    overlap: Record | None  # an active or candidate memory with the same scope, kind and title
    replaces: Record | None  # the record an update candidate would supersede
    diff: list[DiffRow] = field(default_factory=list)

    @property
    def proposers(self) -> list[str]:
        return proposers(self.record)


def proposers(record: Record) -> list[str]:
    """Who wrote a record: the actors of its sources (on a team server, the authenticated token names),
    each once, in order."""
    return list(dict.fromkeys(source.actor for source in record.sources))


def _by_id(stored: list[StoredRecord]) -> dict[str, Record]:
    return {item.record.id: item.record for item in stored}


def _text(record: Record) -> str:
    """A record as a person compares two versions: title, kind, then the body."""
    return f"# {record.title}\nkind: {record.kind}\n\n{record.body}"


def inbox(paths: StorePaths) -> list[InboxItem]:
    """Every candidate of the store with its overlap hint and, for an update, the diff it would make."""
    stored, _invalid = Repository(paths).review_records()  # the health page names invalid files
    records = _by_id(stored)
    items = []
    for candidate in review.candidates(stored, Timestamp.now()):
        record = candidate.stored.record
        replaces = records.get(record.supersedes[0]) if len(record.supersedes) == 1 else None
        diff = side_by_side(_text(replaces), _text(record)) if replaces is not None else []
        hinted = candidate.overlap_id not in (None, *record.supersedes)  # an update overlaps what it replaces
        overlap = records.get(candidate.overlap_id) if hinted and candidate.overlap_id else None
        items.append(InboxItem(record, candidate.age_days, overlap, replaces, diff))
    return items


@dataclass(frozen=True)
class RecordPage:
    record: Record
    etag: str
    older: list[Record]  # what this record superseded, newest first
    newer: list[Record]  # what superseded this record, oldest first


def record_page(paths: StorePaths, record_id: str) -> RecordPage:
    """One record, its entity tag and its supersession history within the store. NotFound if absent."""
    repository = Repository(paths)
    current = repository.find(record_id)
    records = _by_id(repository.scan_valid()[0])
    older, seen = [], {record_id}
    step = current.record
    while len(step.supersedes) == 1 and step.supersedes[0] in records and step.supersedes[0] not in seen:
        step = records[step.supersedes[0]]
        seen.add(step.id)
        older.append(step)
    newer, step = [], current.record
    while True:
        successor = next((r for r in records.values() if step.id in r.supersedes and r.id not in seen), None)
        if successor is None:
            break
        seen.add(successor.id)
        newer.append(successor)
        step = successor
    return RecordPage(current.record, etag(current.data), older, newer)


def stored(paths: StorePaths, record_id: str) -> StoredRecord:
    return Repository(paths).find(record_id)


@dataclass(frozen=True)
class SearchFilters:
    query: str = ""
    kind: str = ""
    scope: str = ""
    status: str = ""  # "" = active only; "any" = every lifecycle state; else exactly that state
    limit: int = 20


@dataclass(frozen=True)
class SearchPage:
    filters: SearchFilters
    blocks: list[dict[str, Any]]
    receipt: dict[str, Any] | None


SEARCH_BUDGET = 100_000  # the page shows whole hits; the budget only bounds an unusual store


def search(session: Session, paths: StorePaths, filters: SearchFilters) -> SearchPage:
    """Hybrid retrieval over the page's store (the project view adds the global store, as everywhere),
    every access class, with the receipt that says what ran."""
    if not filters.query.strip():
        return SearchPage(filters, [], None)
    from stormbuffer.retrieval import ContextOptions, SearchOptions, context, ready_for_retrieval

    view = session.view if paths == session.selected else View.GLOBAL
    stores = retrieval_stores(view, paths, session.dirs)
    ready = ready_for_retrieval(stores, session.embedder.get, session.freshness, lock_wait=session.lock_wait)
    options = SearchOptions(
        limit=filters.limit,
        include_inactive=filters.status != "",
        kinds=(filters.kind,) if filters.kind else None,
        scopes=(filters.scope,) if filters.scope else None,
    )
    result = context(
        stores,
        filters.query,
        ContextOptions(budget=SEARCH_BUDGET, search=options),
        embedder=ready.embedder,
        fallback=ready.fallback,
    )
    blocks = [block.to_json() for block in result.blocks]
    if filters.status not in ("", "any"):
        blocks = [block for block in blocks if block["status"] == filters.status]
    return SearchPage(filters, blocks, result.receipt)


@dataclass(frozen=True)
class Health:
    findings: list[review.Finding]
    issues: list[Any]  # index.doctor.Issue
    counts: dict[str, int]
    vectors_pending: int  # texts still waiting for vectors
    reclaimable_bytes: int  # what `sbuf gc` would give back


def health(paths: StorePaths, sbuf: str) -> Health:
    """Audit findings and doctor issues of the store, and its records by lifecycle state."""
    from stormbuffer.core.records import STATUSES
    from stormbuffer.index.doctor import doctor_store
    from stormbuffer.index.gc import reclaimable_bytes
    from stormbuffer.index.projection import describe

    stored_records, _invalid = Repository(paths).scan_valid()  # doctor names the invalid files
    counts = dict.fromkeys(STATUSES, 0)
    for item in stored_records:
        counts[item.record.status] += 1
    findings = review.findings(stored_records, 30, sbuf, Timestamp.now())
    return Health(findings, list(doctor_store(paths).issues), counts, describe(paths)["vectors_pending"],
                  reclaimable_bytes(paths))  # fmt: skip


# audit operation -> what the record's history says happened
HISTORY_VERBS = {
    "remember": "proposed", "propose": "proposed", "update": "proposed an update", "add": "created",
    "approve": "approved", "reject": "rejected", "edit": "changed", "archive": "archived",
    "restore": "restored", "recall": "recalled", "search": "found in a search", "get": "read",
    "resources": "read",
}  # fmt: skip
MAX_HISTORY = 200


@dataclass(frozen=True)
class Event:
    at: str  # RFC 3339 UTC, to the second
    who: str
    verb: str
    door: str


def history(paths: StorePaths, record_id: str) -> list[Event]:
    """What the audit trail says was done with a record, oldest first (the latest `MAX_HISTORY`):
    who proposed, approved, changed, recalled or read it through a program. Refusals and the review
    page's own views are left out (`sbuf team audit --record` lists every entry)."""
    from stormbuffer.auth.audit import Filter
    from stormbuffer.auth.storage import audit_trail

    events: list[Event] = []
    for entry in audit_trail(paths).entries(Filter(record=record_id)):
        verb = HISTORY_VERBS.get(str(entry.get("operation")))
        status, door = entry.get("status"), str(entry.get("door"))
        if verb is None or not isinstance(status, int) or status >= 400 or (door == "web" and verb == "read"):
            continue
        events.append(Event(str(entry.get("at")), str(entry.get("who")), verb, door))
    return events[-MAX_HISTORY:]
