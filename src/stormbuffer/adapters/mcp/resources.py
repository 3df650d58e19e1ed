"""MCP resources: one record, one candidate, or the active records of one scope, as JSON.

Reads follow the same rules as the `get` operation: the view's scopes, agent-readable records only,
projections synced first. A failure is a JSON-RPC error naming only the protocol error code.
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ReadResourceResult, ResourceTemplate, TextResourceContents

from stormbuffer.core.repository import Repository
from stormbuffer.core.scopes import is_valid_scope
from stormbuffer.core.stores import default_scopes
from stormbuffer.protocol import reads
from stormbuffer.protocol.errors import ProtocolError, from_core, invalid_request
from stormbuffer.protocol.fields import AGENT, SCOPE_DENIED
from stormbuffer.protocol.invoke import encode, handle
from stormbuffer.protocol.session import Session

SCHEME = "stormbuffer://"
MIME_TYPE = "application/json"
MAX_URI_BYTES = 4096
MAX_TEXT_BYTES = 122880
MAX_SCOPE_RECORDS = 100
TEMPLATES = (
    ("stormbuffer://record/{id}", "record", "One agent-readable record as JSON."),
    ("stormbuffer://scope/{scope}/records", "scope-records", "Active agent-readable records in one allowed scope."),
    ("stormbuffer://candidate/{id}", "candidate", "One agent-readable candidate as JSON."),
)


def templates() -> list[ResourceTemplate]:
    return [
        ResourceTemplate(uri_template=uri, name=name, description=description, mime_type=MIME_TYPE)
        for uri, name, description in TEMPLATES
    ]


def read(uri: str, session: Session) -> ReadResourceResult:
    """The resource at `uri` as one JSON text; raises MCPError (invalid params) on any failure."""
    if len(uri.encode("utf-8")) > MAX_URI_BYTES:
        raise MCPError(code=INVALID_PARAMS, message="resource URI is too long")
    try:
        value = _value(uri, session)
    except Exception as exc:  # only the code leaves the adapter
        code = from_core(exc).code
        raise MCPError(code=INVALID_PARAMS, message=f"could not read the requested resource: {code}") from None
    text = encode(value)
    if len(text.encode("utf-8")) > MAX_TEXT_BYTES:
        raise MCPError(code=INVALID_PARAMS, message="resource contents exceed the bounded output limit")
    return ReadResourceResult(contents=[TextResourceContents(uri=uri, mime_type=MIME_TYPE, text=text)])


def _value(uri: str, session: Session) -> Any:
    if not uri.startswith(SCHEME):
        raise invalid_request("resource URI is not a Stormbuffer URI")
    path = uri.removeprefix(SCHEME)
    if path.startswith("record/"):
        return _record(path.removeprefix("record/"), session)
    if path.startswith("candidate/"):
        record = _record(path.removeprefix("candidate/"), session)
        if record["status"] != "candidate":
            raise ProtocolError("not_found", "candidate was not found")
        return record
    if path.startswith("scope/") and path.endswith("/records"):
        return _scope_records(path.removeprefix("scope/").removesuffix("/records"), session)
    raise ProtocolError("not_found", "resource URI was not found")


def _record(record_id: str, session: Session) -> dict[str, Any]:
    """The record as `get` returns it: the view's scopes, agent access, any lifecycle state."""
    if not record_id or "/" in record_id:
        raise invalid_request("resource identifier is invalid")
    envelope = handle("get", {"version": 1, "operation": "get", "id": record_id}, session)
    if not envelope["ok"]:
        raise ProtocolError(envelope["error"]["code"], envelope["error"]["message"])
    result: dict[str, Any] = envelope["result"]
    return result


def _scope_records(scope: str, session: Session) -> list[dict[str, Any]]:
    """Active agent-readable records whose scope is exactly `scope`, sorted by id."""
    if not is_valid_scope(scope):
        raise invalid_request("resource scope is invalid")
    if scope not in default_scopes(session.view, session.selected):
        raise SCOPE_DENIED
    stores = reads.composed_stores(session, [scope])
    reads.prepare_retrieval(session, stores, records_only=True)
    records = sorted(
        (
            record
            for store in stores
            for record in Repository(store).records()
            if record.scope == scope and record.access == AGENT
        ),
        key=lambda record: record.id,
    )
    if len(records) > MAX_SCOPE_RECORDS:
        raise ProtocolError("output_too_large", "resource contains too many records")
    return [record.to_json() for record in records]
