"""The write operations: remember, update, propose, supersede and archive.

Writes touch only the selected store, through the repository, and never the projection. Every
record an agent writes passes the secret guard before the repository sees it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stormbuffer.core.ids import new_record_id
from stormbuffer.core.stores import default_scopes
from stormbuffer.core.timestamps import Timestamp

from . import fields
from .session import Session

# Request keys that are never record fields when the record is taken from the top level.
_NOT_RECORD = {
    "propose": ("version", "operation", "actor", "approved"),
    "supersede": ("version", "operation", "id", "access"),
}


def remember(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """A new agent candidate from a title, kind, body and one source."""
    fields.guard_agent_write(request)
    repository = session.repository()
    store_scope = repository.scope
    record = fields.record(
        {
            **{key: request[key] for key in ("title", "kind", "scope", "tags", "aliases", "body") if key in request},
            "access": fields.AGENT,
            "status": "candidate",
            "sources": [request["source"]] if "source" in request else [],
        },
        base=None,
        default_scope=store_scope,
    )
    fields.guard_secrets(record)
    return repository.propose(record, fields.AGENT).to_json()


def update(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """A replacement candidate for an active record; the source is never inherited."""
    fields.guard_agent_write(request)
    target_id = fields.target_id(request)
    scopes = fields.scope_filter(request, default_scopes(session.view, session.selected))
    repository = session.repository()
    target = repository.find_allowed(target_id, scopes, [fields.AGENT]).record
    now = Timestamp.now()
    changes = {key: request[key] for key in ("title", "kind", "tags", "aliases", "body") if key in request}
    replacement = fields.record(changes, base=target, default_scope=target.scope).replace(
        id=new_record_id(),
        created_at=now,
        updated_at=now,
        access=fields.AGENT,
        status="candidate",
        sources=(fields.source(request["source"]),) if "source" in request else (),
        supersedes=(target.id,),
    )
    fields.guard_secrets(replacement)
    return repository.propose_update(target.id, replacement).to_json()


def propose(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """A full agent-written record, proposed as a candidate; `access` must be `agent`."""
    fields.guard_proposal(request)
    repository = session.repository()
    store_scope = repository.scope
    record = fields.record(_record_value(request, "propose", "record"), base=None, default_scope=store_scope)
    if record.access != fields.AGENT:
        raise fields.AGENT_RECORDS_ONLY
    fields.guard_secrets(record)
    return repository.propose(record, fields.AGENT).to_json()


def supersede(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """Replace an active agent-readable record by an active replacement at once."""
    target_id = fields.target_id(request)
    scopes = fields.scope_filter(request, default_scopes(session.view, session.selected))  # `scope` only
    access = fields.agent_access(request)
    repository = session.repository()
    target = repository.find_allowed(target_id, scopes, access).record
    value = _record_value(request, "supersede", "replacement")
    replacement = fields.record(value, base=target, default_scope=target.scope)
    if replacement.access != fields.AGENT:
        raise fields.AGENT_RECORDS_ONLY
    if replacement.id == target.id:
        replacement = replacement.replace(id=new_record_id())
    if target.id not in replacement.supersedes:
        replacement = replacement.replace(supersedes=(*replacement.supersedes, target.id))
    fields.guard_secrets(replacement)
    written = repository.supersede(target.id, replacement)
    return {"id": written.id, "outcome": "accepted", "status": written.status}


def archive(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """Move an active agent-readable record to `archived`."""
    target_id = fields.target_id(request)
    scopes = fields.scope_filter(request, default_scopes(session.view, session.selected))
    access = fields.agent_access(request)
    archived = session.repository().archive(target_id, scopes, access)
    return {"id": archived.id, "outcome": "accepted", "status": archived.status}


def _record_value(request: Mapping[str, Any], operation: str, nested: str) -> Mapping[str, Any]:
    """The nested record object when present, else the top-level fields minus the request's own keys."""
    if nested in request:
        return request[nested]
    return {key: value for key, value in request.items() if key not in _NOT_RECORD[operation]}
