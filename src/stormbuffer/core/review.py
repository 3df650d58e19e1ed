"""Review of a store's records: the candidate inbox and the health audit, shared by every door."""

from __future__ import annotations

from dataclasses import dataclass

from .repository import StoredRecord, find_match
from .secrets import records_with_secrets
from .timestamps import Timestamp

_DAY_NS = 86_400 * 1_000_000_000


def whole_days(since: Timestamp, now: Timestamp) -> int:
    return max(0, (now.instant_ns() - since.instant_ns()) // _DAY_NS)


@dataclass(frozen=True)
class Candidate:
    """A candidate awaiting a decision, with the memory it may overlap (same scope, kind and title)."""

    stored: StoredRecord
    age_days: int
    overlap_id: str | None


def candidates(stored: list[StoredRecord], now: Timestamp) -> list[Candidate]:
    """Every candidate of `stored`, oldest id first."""
    found = []
    for item in sorted(stored, key=lambda item: item.record.id):
        record = item.record
        if record.status != "candidate":
            continue
        match = find_match(stored, record, exclude={record.id})
        found.append(Candidate(item, whole_days(record.created_at, now), match[1].id if match else None))
    return found


@dataclass(frozen=True)
class Finding:
    kind: str
    record_ids: list[str]
    evidence: str
    confidence: str
    rule: str
    follow_up: str


def findings(stored: list[StoredRecord], stale_after_days: int, sbuf: str, now: Timestamp) -> list[Finding]:
    """Health findings, sorted, records whose text holds a secret among them (by id and rule family,
    never the value); `sbuf` is the command prefix the follow-up commands start with."""
    ids = {item.record.id for item in stored}
    found = []
    for item in stored:
        record = item.record
        if record.status == "candidate":
            found.append(
                Finding(
                    "unresolved_candidate",
                    [record.id],
                    f'candidate "{record.title}" has awaited review for {whole_days(record.created_at, now)} days',
                    "certain",
                    "every candidate needs an explicit approve or reject decision",
                    f"{sbuf} approve {record.id} or {sbuf} reject {record.id}",
                )
            )
        for missing in (old_id for old_id in record.supersedes if old_id not in ids):
            found.append(
                Finding(
                    "broken_link",
                    [record.id],
                    f'"{record.title}" supersedes {missing}, which is not in this store',
                    "certain",
                    "every supersedes link names a record of the same store",
                    f"{sbuf} edit {record.id}",
                )
            )
        age = whole_days(record.updated_at, now)
        if record.kind == "checkpoint" and record.status == "active" and age >= stale_after_days:
            found.append(
                Finding(
                    "stale_checkpoint",
                    [record.id],
                    f'checkpoint "{record.title}" was last updated {age} days ago',
                    "likely",
                    f"an active checkpoint not updated for {stale_after_days} days is probably stale",
                    f"{sbuf} archive {record.id}",
                )
            )
    found += [
        Finding(
            "secret",
            [record_id],
            f"the record's text holds credential-like material ({', '.join(families)})",
            "likely",
            "memories hold no credentials: agent writes with one are refused, edited files are only reported",
            f"{sbuf} edit {record_id}",
        )
        for record_id, families in records_with_secrets(item.record for item in stored)
    ]
    return sorted(found, key=lambda finding: (finding.kind, finding.record_ids))
