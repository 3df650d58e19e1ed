"""The fixed messages of version 1, by error code: a failure envelope's message is one of these.

A message never carries a request value, record text, a path or a secret, so the catalogue is a
closed list; `{key}` stands for a field name of the protocol.
"""

from __future__ import annotations

import re
from functools import cache

_FIELD = "`[a-z_]+`"

CATALOGUE: dict[str, tuple[str, ...]] = {
    "invalid_json": ("stdin must contain one JSON object",),
    "invalid_request": (
        "request must be a JSON object", "request must include integer version 1",
        "request operation does not match the command operation", "request contains an unknown field",
        "field {key} must be a bounded string", "field {key} must be an integer",
        "access must be `agent` or `human`", "use either scope or scopes, not both", "scope must be a string",
        "scopes must be an array", "scopes must contain strings", "scope filter is out of bounds",
        "query is too long", "source must be an object", "actor must be `agent` or `human`",
        "record must be a JSON object", "id must be a valid record identifier", "field {key} is required",
        "kind is invalid", "scope is invalid", "status is invalid", "access is invalid",
        "field {key} must be a timestamp", "field {key} is not RFC 3339", "field {key} must be an array",
        "record collection is too large", "record collection contains an invalid string",
        "record id collection contains an invalid value", "sources must be an array", "too many sources",
        "source kind is required", "source kind is invalid", "source reference is invalid",
        "source actor is invalid", "source observed_at is invalid",
        "source observed_at must be an RFC 3339 timestamp", "source revision is invalid",
        "source content_hash is invalid", "request input is invalid", "could not read the JSON request",
        "resource URI is not a Stormbuffer URI", "resource identifier is invalid", "resource scope is invalid",
    ),
    "unsupported_version": ("request version is not supported",),
    "unknown_operation": ("operation is not supported by protocol version 1",),
    "input_too_large": ("request exceeds the bounded input limit",),
    "output_too_large": (
        "response exceeds the bounded protocol output", "record exceeds the bounded protocol output",
        "response exceeds the bounded MCP tool output", "resource contains too many records",
    ),
    "path_denied": ("filesystem paths are not accepted by the invocation protocol",),
    "scope_denied": ("record is outside the selected scope", "requested scope is outside the selected store boundary"),
    "access_denied": ("record is not available to this access class",),
    "permission_denied": (
        "the invoke protocol is limited to agent-readable records",
        "agent writes always require explicit human approval",
        "invoke proposals always require explicit human approval",
        "agent invocations may only write agent-accessible records",
        "MCP write tools are disabled; restart with an explicit host write grant",
        "MCP candidate-write mode permits only remember and update",
    ),
    "not_found": ("record was not found", "candidate was not found", "resource URI was not found"),
    "not_initialized": ("the selected store is not initialized",),
    "invalid_state": ("record lifecycle state does not permit this operation",),
    "invalid_record": ("record validation failed", "one or more canonical records are invalid"),
    "conflict": (
        "record changed or is busy; retry after inspection", "the SQLite projection is busy; retry the operation",
    ),
    "internal_error": (
        "the store operation failed", "could not resolve the selected store", "could not resolve selected stores",
        "the SQLite projection could not be opened; check that its directory is writable, then reindex the "
        "selected store",
        "could not encode protocol response",
    ),
    "secret_detected": ("candidate contains credential-like material; remove it before retrying",),
}  # fmt: skip

WRITES_DISABLED = "MCP write tools are disabled; restart with an explicit host write grant"
CANDIDATES_ONLY = "MCP candidate-write mode permits only remember and update"


@cache
def _patterns(code: str) -> re.Pattern[str]:
    texts = (re.escape(text).replace(re.escape("{key}"), _FIELD) for text in CATALOGUE.get(code, ()))
    return re.compile("|".join(f"(?:{text})" for text in texts) or "(?!)")


def is_fixed(code: str, message: str) -> bool:
    """Whether `message` is one of the fixed messages of `code`."""
    return _patterns(code).fullmatch(message) is not None
