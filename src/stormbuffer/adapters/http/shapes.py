"""The JSON shapes only the HTTP API has, written as JSON Schema over `schema/v1`.

Everything a route returns is a `schema/v1` shape (records, search hits, proposal and lifecycle
results, envelopes) except the error object; the record a client writes (`RecordInput`) is made of
`schema/v1` record fields. Both refer to the schema files by their `$id`.
"""

from __future__ import annotations

from typing import Any

BASE = "https://stormbuffer.dev/schema/v1/"
FIELDS = BASE + "record-fields.schema.json#/properties/"
RECORD = BASE + "record.schema.json#/$defs/"

RECORD_INPUT: dict[str, Any] = {
    "title": "RecordInput",
    "description": "A record as a person writes it through the local API. The server chooses its id, scope, status "
    "and timestamps.",
    "type": "object",
    "properties": {
        "title": {"$ref": FIELDS + "title"},
        "kind": {"$ref": RECORD + "kind"},
        "access": {"$ref": RECORD + "access"},
        "tags": {"$ref": FIELDS + "tags"},
        "aliases": {"$ref": FIELDS + "aliases"},
        "supersedes": {"$ref": FIELDS + "supersedes"},
        "sources": {"$ref": FIELDS + "sources"},
        "body": {"$ref": FIELDS + "body"},
    },
    "required": ["title", "kind", "access", "sources", "body"],
    "additionalProperties": False,
}

ERROR_RESPONSE: dict[str, Any] = {
    "title": "ErrorResponse",
    "description": "Every error answer of the local API. Messages are fixed texts: no paths, record text or secrets.",
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "minLength": 1, "description": "Stable machine-readable code."},
                "message": {"type": "string", "minLength": 1, "description": "Human-readable explanation."},
            },
            "required": ["code", "message"],
            "additionalProperties": False,
        }
    },
    "required": ["error"],
    "additionalProperties": False,
}
