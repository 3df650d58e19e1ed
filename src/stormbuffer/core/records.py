"""The canonical record: fields, enumerations, validation and the provenance rule."""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from .errors import RecordError
from .scopes import parse_scope
from .timestamps import Timestamp

FORMAT_VERSION = 1
KINDS = ("fact", "decision", "procedure", "checkpoint")
STATUSES = ("candidate", "active", "superseded", "archived")
ACCESS_CLASSES = ("human", "agent")
SOURCE_KINDS = ("conversation", "document", "issue", "url")

KIND_REASON = "must be one of fact, decision, procedure, or checkpoint"
STATUS_REASON = "must be one of candidate, active, superseded, or archived"
ACCESS_REASON = "must be one of human or agent"
SOURCE_KIND_REASON = "must be one of conversation, document, issue, or url"

# Allowed lifecycle transitions besides staying in place.
TRANSITIONS = {
    "candidate": ("active", "archived"),
    "active": ("superseded", "archived"),
    "archived": ("active",),
    "superseded": (),
}


@dataclass(frozen=True)
class Source:
    kind: str
    reference: str
    actor: str
    observed_at: Timestamp | None = None
    revision: str | None = None
    content_hash: str | None = None

    def to_json(self) -> dict[str, str]:
        """Protocol form: optional keys omitted when absent."""
        out = {"kind": self.kind, "reference": self.reference, "actor": self.actor}
        if self.observed_at is not None:
            out["observed_at"] = self.observed_at.render()
        if self.revision is not None:
            out["revision"] = self.revision
        if self.content_hash is not None:
            out["content_hash"] = self.content_hash
        return out


@dataclass(frozen=True)
class Record:
    id: str
    title: str
    kind: str
    scope: str
    status: str
    access: str
    created_at: Timestamp
    updated_at: Timestamp
    tags: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    supersedes: tuple[str, ...] = ()
    sources: tuple[Source, ...] = field(default_factory=tuple)
    body: str = ""

    def replace(self, **changes: object) -> Record:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def to_json(self) -> dict[str, object]:
        """The protocol's 13-key record object (no path, no format version)."""
        return {
            "id": self.id,
            "title": self.title,
            "kind": self.kind,
            "scope": self.scope,
            "status": self.status,
            "access": self.access,
            "created_at": self.created_at.render(),
            "updated_at": self.updated_at.render(),
            "tags": list(self.tags),
            "aliases": list(self.aliases),
            "supersedes": list(self.supersedes),
            "sources": [source.to_json() for source in self.sources],
            "body": self.body,
        }


class RecordSummary(NamedTuple):
    """What a listing shows of a record."""

    id: str
    title: str
    kind: str
    scope: str
    status: str


def can_transition(current: str, target: str) -> bool:
    return current == target or target in TRANSITIONS[current]


def text_problem(value: str) -> str | None:
    """The text rule for titles, tags, aliases and source fields."""
    if not value or value != value.strip():
        return "must be non-empty and have no surrounding whitespace"
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        return "must not contain control characters"
    return None


def validate(record: Record, context: str = "record") -> None:
    """Raise RecordError for the first rule the record breaks."""

    def fail(name: str, reason: str) -> None:
        raise RecordError(context, f"field `{name}` is invalid: {reason}")

    if (problem := text_problem(record.title)) is not None:
        fail("title", problem)
    try:
        parse_scope(record.scope)
    except ValueError as exc:
        fail("scope", str(exc))
    if record.kind not in KINDS:
        fail("kind", KIND_REASON)
    if record.status not in STATUSES:
        fail("status", STATUS_REASON)
    if record.access not in ACCESS_CLASSES:
        fail("access", ACCESS_REASON)
    if record.updated_at < record.created_at:
        fail("updated_at", "must not precede created_at")
    for name, values in (("tags", record.tags), ("aliases", record.aliases)):
        for index, value in enumerate(values):
            if (problem := text_problem(value)) is not None:
                fail(f"{name}[{index}]", problem)
    if record.id in record.supersedes:
        fail("supersedes", "must not contain the record id")
    if len(set(record.supersedes)) != len(record.supersedes):
        fail("supersedes", "must not contain duplicates")
    if not record.sources:
        fail("sources", "must contain at least one source")
    for index, source in enumerate(record.sources):
        if source.kind not in SOURCE_KINDS:
            fail(f"sources[{index}].kind", SOURCE_KIND_REASON)
        for name in ("reference", "actor", "revision", "content_hash"):
            value = getattr(source, name)
            if value is not None and (problem := text_problem(value)) is not None:
                fail(f"sources[{index}].{name}", problem)
    if not record.body or record.body.isspace():  # not `strip()`: no copy of a large body
        fail("body", "must contain non-whitespace text")
    if "\x00" in record.body:
        fail("body", "must not contain NUL characters")


def validate_provenance(record: Record, context: str = "record") -> None:
    """Sources must exist and must not be unsupported inference."""
    if not record.sources:
        raise RecordError(context, "field `sources` is invalid: must contain at least one source")
    for source in record.sources:
        reference = source.reference.lower()
        if source.actor.lower() == "inference" or reference.startswith("inference:"):
            raise RecordError(context, "field `sources` is invalid: unsupported inference cannot be used as provenance")


def normalize(text: str) -> str:
    """Whitespace-collapsed, ASCII-lowercased text used to match duplicates and overlaps."""
    return " ".join(text.split()).translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def searchable_fields(record: Record) -> Iterable[tuple[str, str]]:
    """Every agent-writable text of a record, named, for the secret guard."""
    yield "title", record.title
    yield "body", record.body
    for index, tag in enumerate(record.tags):
        yield f"tags[{index}]", tag
    for index, alias in enumerate(record.aliases):
        yield f"aliases[{index}]", alias
    for index, source in enumerate(record.sources):
        for name in ("reference", "actor", "revision", "content_hash"):
            value = getattr(source, name)
            if value is not None:
                yield f"sources[{index}].{name}", value
