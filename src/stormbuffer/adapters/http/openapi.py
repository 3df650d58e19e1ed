"""The OpenAPI 3.1 document of the local API, generated from `schema/v1`.

Every schema file of `schema/v1` (except the MCP tool catalogue) is a component under a name taken
from its file name (`search-hit.schema.json` → `SearchHit`), unchanged except for its references:
a `$ref` to another file (or within the file) becomes a pointer into the document
(`#/components/schemas/Source`), and the document keys `$schema` and `$id` are dropped, so that
tools which do not resolve `$id` read the document too. The shapes only HTTP has (`shapes.py`)
refer to the same files. Paths, parameters and statuses are described here, once.
"""

from __future__ import annotations

from functools import cache
from typing import Any
from urllib.parse import urljoin

from stormbuffer import __version__
from stormbuffer.protocol import schemas
from stormbuffer.protocol.invoke import OPERATIONS

from .search import FALLBACK_HEADER, MODE_HEADER
from .shapes import BASE, ERROR_RESPONSE, RECORD_INPUT

TITLE = "Stormbuffer local API"
API_VERSION = "1.0.0"
EXCLUDED = ("mcp-tools",)
TAGS = [
    {"name": "records", "description": "Browse, create, and edit canonical records."},
    {"name": "lifecycle", "description": "Approve, reject, archive, and restore records."},
    {"name": "search", "description": "Search the selected store view."},
    {"name": "protocol", "description": "The version-1 agent protocol, as `sbuf invoke` speaks it."},
]


def component_name(schema_name: str) -> str:
    """`search-hit` → `SearchHit`, `archive.request` → `ArchiveRequest`."""
    return "".join(part.capitalize() for part in schema_name.replace(".", "-").split("-"))


def component(schema: dict[str, Any], base: str) -> dict[str, Any]:
    """A schema as a component: references as document pointers (resolved against `base`, the
    schema's `$id`), without `$schema` and `$id`."""
    kept = {key: value for key, value in schema.items() if key not in ("$schema", "$id")}
    converted: dict[str, Any] = _pointers(kept, base)
    return converted


def _pointers(node: Any, base: str) -> Any:
    if isinstance(node, list):
        return [_pointers(item, base) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _pointers(value, base) for key, value in node.items()}
    if isinstance(node.get("$ref"), str):
        uri, _, fragment = urljoin(base, node["$ref"]).partition("#")
        name = component_name(uri.rpartition("/")[2].removesuffix(schemas.SUFFIX))
        out["$ref"] = f"#/components/schemas/{name}{fragment}"
    return out


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


ERROR = ref("ErrorResponse")
ETAG = {"ETag": {"$ref": "#/components/headers/ETag"}, "Cache-Control": {"$ref": "#/components/headers/NoStore"}}
# Refusals of the loopback guard and failures that can answer any operation.
GUARDED = {
    "403": _json(ERROR, "`host_not_allowed` or `origin_not_allowed`"),
    "413": _json(ERROR, "`payload_too_large`: the body exceeds 262144 bytes"),
    "415": _json(ERROR, "`unsupported_media_type`: a state-changing request without `Content-Type: application/json`"),
    "500": _json(ERROR, "`internal_error`"),
    "default": _json(ERROR, "Any other error"),
}
ID_PARAMETER = {"name": "id", "in": "path", "required": True, "schema": ref("RecordId")}


def _operation(operation_id: str, tag: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"operationId": operation_id, "tags": [tag], "summary": summary, **extra,
            "responses": {**GUARDED, **responses}}  # fmt: skip


def _record_input() -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref("RecordInput")}}}


def _lifecycle(operation_id: str, summary: str, result: dict[str, Any]) -> dict[str, Any]:
    return {"post": _operation(operation_id, "lifecycle", summary, {
        "200": result,
        "404": _json(ERROR, "`not_found`"),
        "409": _json(ERROR, "`store_busy`"),
        "422": _json(ERROR, "`validation_error` (the id), `invalid_state` or `invalid_record`"),
    }, parameters=[ID_PARAMETER])}  # fmt: skip


def _paths() -> dict[str, Any]:
    record = _json(ref("Record"), "The record", ETAG)
    proposal = _json(ref("ProposalResult"), "The proposal's outcome")
    envelope = ref("Envelope")
    invoke_errors = {
        str(status): _json({"anyOf": [envelope, ERROR]} if status == 403 else envelope, "A failure envelope")
        for status in (400, 403, 404, 409, 422, 500)
    }
    all_parameter = {"name": "all", "in": "query", "required": False, "schema": {"type": "boolean", "default": False},
                     "description": "Include candidate, superseded and archived records."}  # fmt: skip
    return {
        "/v1/records": {
            "get": _operation("list_records", "records", "List the selected store's records, sorted by id", {
                "200": _json({"type": "array", "items": ref("Record")}, "The records"),
                "400": _json(ERROR, "`invalid_query`"),
                "422": _json(ERROR, "`invalid_record`: a canonical record is invalid"),
            }, parameters=[all_parameter]),
            "post": _operation("create_record", "records", "Add a human-authored record", {
                "201": _json(ref("ProposalResult"), "Written: `accepted` (active) or `possible_overlap` (candidate)",
                             {"Location": {"schema": {"type": "string"}}}),
                "400": _json(ERROR, "`invalid_json`"),
                "409": _json({"anyOf": [ref("ProposalResult"), ERROR]}, "`duplicate_of` (nothing written) or "
                             "`store_busy`"),
                "422": _json({"anyOf": [ref("ProposalResult"), ERROR]}, "Outcome `invalid` (nothing written) or "
                             "`validation_error`"),
            }, requestBody=_record_input()),
        },
        "/v1/records/{id}": {
            "get": _operation("get_record", "records", "One record with its ETag", {
                "200": record,
                "404": _json(ERROR, "`not_found`"),
                "422": _json(ERROR, "`validation_error` (the id), `invalid_state` or `invalid_record`"),
            }, parameters=[ID_PARAMETER]),
            "put": _operation("replace_record", "records", "Replace an active record if it is unchanged", {
                "200": record,
                "400": _json(ERROR, "`invalid_json`"),
                "404": _json(ERROR, "`not_found`"),
                "409": _json(ERROR, "`store_busy`"),
                "412": _json(ERROR, "`revision_conflict`; the `ETag` header is the current one", ETAG),
                "422": _json(ERROR, "`validation_error`, `invalid_state` or `invalid_record`"),
                "428": _json(ERROR, "`precondition_required`: no `If-Match`"),
            }, parameters=[ID_PARAMETER, {"name": "If-Match", "in": "header", "required": True,
                                          "schema": {"type": "string"}, "description": "The record's current ETag."}],
               requestBody=_record_input()),
        },
        "/v1/records/{id}/approve": _lifecycle("approve_record", "Approve a candidate", proposal),
        "/v1/records/{id}/reject": _lifecycle("reject_record", "Reject a candidate (it is archived)", proposal),
        "/v1/records/{id}/archive": _lifecycle("archive_record", "Archive an active record", record),
        "/v1/records/{id}/restore": _lifecycle("restore_record", "Restore an archived record", record),
        "/v1/search": {
            "get": _operation("search_records", "search", "Ranked hits, hybrid when the model is ready", {
                "200": _json({"type": "array", "items": ref("SearchHit")}, "The hits, best first", {
                    MODE_HEADER: {"schema": {"type": "string", "enum": ["lexical", "semantic", "hybrid"]}},
                    FALLBACK_HEADER: {"schema": {"type": "string"}, "description": "Why retrieval was lexical."},
                }),
                "400": _json(ERROR, "`invalid_query`"),
                "422": _json(ERROR, "`validation_error` (blank query) or `invalid_request` (invalid records)"),
            }, parameters=[
                {"name": "query", "in": "query", "required": True, "schema": {"type": "string", "minLength": 1}},
                {"name": "limit", "in": "query", "required": False,
                 "schema": {"type": "integer", "default": 20}, "description": "Clamped to 1..100."},
                all_parameter,
            ]),
        },
        "/v1/invoke/{operation}": {
            "post": _operation("invoke_operation", "protocol", "One version-1 request, the envelope `sbuf invoke` "
                               "prints", {"200": _json(envelope, "A success envelope"), **invoke_errors},
                               parameters=[{"name": "operation", "in": "path", "required": True,
                                            "schema": {"type": "string", "enum": list(OPERATIONS)}}],
                               requestBody={"required": True, "content": {"application/json": {"schema": {
                                   "oneOf": [ref(component_name(f"{name}.request")) for name in OPERATIONS]}}}}),
        },
    }  # fmt: skip


@cache
def _document() -> str:
    import json

    loaded = [schemas.load(name) for name in schemas.names() if name not in EXCLUDED]
    components = {component_name(schema["$id"].rpartition("/")[2].removesuffix(schemas.SUFFIX)):
                  component(schema, schema["$id"]) for schema in loaded}  # fmt: skip
    components["RecordInput"] = component(RECORD_INPUT, BASE)
    components["ErrorResponse"] = ERROR_RESPONSE
    document = {
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": TITLE,
            "version": API_VERSION,
            "description": f"The loopback HTTP API of `sbuf serve` (Stormbuffer {__version__}).",
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "tags": TAGS,
        "security": [{"localToken": []}],
        "paths": _paths(),
        "components": {
            "securitySchemes": {
                "localToken": {"type": "http", "scheme": "bearer",
                               "description": "The user's local credential, as `sbuf auth token` prints it."},
            },
            "schemas": components,
            "headers": {
                "ETag": {"description": "BLAKE3 of the record's canonical Markdown, quoted.",
                         "schema": {"type": "string"}},
                "NoStore": {"description": "Always `no-store`.", "schema": {"type": "string", "const": "no-store"}},
            },
        },
    }  # fmt: skip
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def document() -> dict[str, Any]:
    """A fresh copy of the document."""
    import json

    loaded: dict[str, Any] = json.loads(_document())
    return loaded


def document_bytes() -> bytes:
    return _document().encode("utf-8")
