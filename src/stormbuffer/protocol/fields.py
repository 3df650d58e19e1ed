"""Field rules the schemas cannot express: byte limits, scope boundaries, access and actor guards,
and turning request fields into records.

Every function here runs after the request passed its schema, so types are already right.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stormbuffer.core.ids import new_record_id, parse_record_id
from stormbuffer.core.records import Record, Source, searchable_fields
from stormbuffer.core.scopes import is_valid_scope
from stormbuffer.core.timestamps import Timestamp

from .errors import SECRET_DETECTED, ProtocolError, invalid_request

MAX_QUERY_BYTES = 2048
MAX_FIELD_BYTES = 65536
MAX_COLLECTION_ITEM_BYTES = 512
MAX_SCOPES = 16
DEFAULT_LIMIT, MAX_LIMIT = 20, 100
DEFAULT_BUDGET, MAX_BUDGET = 512, 4096
SOURCE_LIMITS = {"reference": 2048, "actor": 256, "revision": 2048, "content_hash": 256}
AGENT = "agent"

SCOPE_DENIED = ProtocolError("scope_denied", "requested scope is outside the selected store boundary")
HUMAN_ACCESS_DENIED = ProtocolError("permission_denied", "the invoke protocol is limited to agent-readable records")
AGENT_WRITE_DENIED = ProtocolError("permission_denied", "agent writes always require explicit human approval")
PROPOSAL_DENIED = ProtocolError("permission_denied", "invoke proposals always require explicit human approval")
AGENT_RECORDS_ONLY = ProtocolError("permission_denied", "agent invocations may only write agent-accessible records")


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def query(request: Mapping[str, Any]) -> str:
    text = request["query"]
    if _nbytes(text) > MAX_QUERY_BYTES:
        raise invalid_request("query is too long")
    return text


def clamped(request: Mapping[str, Any], key: str, default: int, maximum: int) -> int:
    """`limit` and `budget`: absent → default, else clamped to 1..maximum (never an error)."""
    return min(max(request.get(key, default), 1), maximum)


def target_id(request: Mapping[str, Any]) -> str:
    """The canonical form of the `id` naming an existing record."""
    if _nbytes(request["id"]) > MAX_FIELD_BYTES:
        raise invalid_request("field `id` must be a bounded string")
    return _record_id(request["id"])


def _record_id(text: str) -> str:
    try:
        return parse_record_id(text)
    except ValueError:
        raise invalid_request("id must be a valid record identifier") from None


def scope_filter(request: Mapping[str, Any], allowed: list[str]) -> list[str]:
    """The effective scope list: `scope` or `scopes` (as given, order and duplicates kept), else the view's
    default scopes. It may only narrow the view.
    """
    if "scope" in request:
        scopes = [request["scope"]]
    elif "scopes" in request:
        scopes = list(request["scopes"])
    else:
        scopes = list(allowed)
    if not scopes or len(scopes) > MAX_SCOPES:
        raise invalid_request("scope filter is out of bounds")
    if any(not is_valid_scope(scope) or scope not in allowed for scope in scopes):
        raise SCOPE_DENIED
    return scopes


def agent_access(request: Mapping[str, Any]) -> list[str]:
    """Reads and lifecycle changes serve agent-readable records only."""
    if request.get("access", AGENT) != AGENT:
        raise HUMAN_ACCESS_DENIED
    return [AGENT]


def guard_agent_write(request: Mapping[str, Any]) -> None:
    """`remember`/`update`: the actor must be `agent` and approval cannot be claimed."""
    if request.get("actor", AGENT) != AGENT or "approved" in request:
        raise AGENT_WRITE_DENIED


def guard_proposal(request: Mapping[str, Any]) -> None:
    """`propose`: `human` or any claimed approval is refused; unknown actors are invalid."""
    actor = request.get("actor", AGENT)
    if actor == "human" or "approved" in request:
        raise PROPOSAL_DENIED
    if actor != AGENT:
        raise invalid_request("actor must be `agent` or `human`")


def guard_secrets(record: Record) -> None:
    """The secret guard for every agent-originated write; the match is never reported.

    Imported here, so that reads never load the guard's rules or its engine.
    """
    from stormbuffer.core.secrets import find_secret_fields

    if find_secret_fields(searchable_fields(record)):
        raise ProtocolError("secret_detected", SECRET_DETECTED)


def source(value: Mapping[str, Any]) -> Source:
    for key, limit in SOURCE_LIMITS.items():
        if key in value and _nbytes(value[key]) > limit:
            raise invalid_request(f"source {key} is invalid")
    observed = value.get("observed_at")
    return Source(
        kind=value["kind"],
        reference=value["reference"],
        actor=value["actor"],
        observed_at=Timestamp.parse(observed) if observed is not None else None,
        revision=value.get("revision"),
        content_hash=value.get("content_hash"),
    )


_REQUIRED = object()


def record(fields: Mapping[str, Any], *, base: Record | None, default_scope: str) -> Record:
    """A record from request fields; absent fields come from `base`, else from defaults.

    Without a base, `title`, `kind`, `access` and `body` are required, the id is new, the status
    `active`, `created_at` now and `updated_at` equal to `created_at`.
    """

    def pick(key: str, default: Any = _REQUIRED) -> Any:
        if key in fields:
            return fields[key]
        if base is not None:
            return getattr(base, key)
        if default is _REQUIRED:
            raise invalid_request(f"field `{key}` is required")
        return default

    record_id = _record_id(fields["id"]) if "id" in fields else (base.id if base else new_record_id())
    title = _bounded(pick("title"), "title")
    kind = pick("kind")
    scope = _bounded(pick("scope", default_scope), "scope")
    status = pick("status", "active")
    access = pick("access")
    created_at = _timestamp(pick("created_at", None)) or Timestamp.now()
    updated_at = _timestamp(pick("updated_at", None)) or created_at
    tags = _collection(pick("tags", ()))
    aliases = _collection(pick("aliases", ()))
    supersedes = tuple(_record_id(item) for item in fields["supersedes"]) if "supersedes" in fields else None
    sources = tuple(source(item) for item in fields["sources"]) if "sources" in fields else None
    body = _bounded(pick("body"), "body")
    return Record(
        id=record_id,
        title=title,
        kind=kind,
        scope=scope,
        status=status,
        access=access,
        created_at=created_at,
        updated_at=updated_at,
        tags=tags,
        aliases=aliases,
        supersedes=supersedes if supersedes is not None else (base.supersedes if base else ()),
        sources=sources if sources is not None else (base.sources if base else ()),
        body=body,
    )


def _bounded(value: str, key: str) -> str:
    if _nbytes(value) > MAX_FIELD_BYTES:
        raise invalid_request(f"field `{key}` must be a bounded string")
    return value


def _timestamp(value: str | Timestamp | None) -> Timestamp | None:
    """A request timestamp (already checked by the schema with the same parser) or an inherited one."""
    return Timestamp.parse(value) if isinstance(value, str) else value


def _collection(values: Any) -> tuple[str, ...]:
    values = tuple(values)
    if any(_nbytes(value) > MAX_COLLECTION_ITEM_BYTES for value in values):
        raise invalid_request("record collection contains an invalid string")
    return values
