"""Reading a version-1 request: JSON, version, operation, then its `schema/v1` request schema.

The envelope checks (JSON text, object, integer `version` 1, matching `operation`, known
operation) come first, in that order. Then the whole request is validated against
`<operation>.request.schema.json`. When it fails, exactly one problem is reported, chosen
deterministically: unknown keys first (alphabetically, path-like keys are `path_denied`), then
fields in the order the operation reads them. Messages come from a fixed catalogue keyed by the
field and the failing schema keyword; they never echo a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import predicates, schemas
from .errors import ProtocolError, invalid_request
from .jsontext import loads

VERSION = 1
OPERATIONS = ("search", "context", "get", "remember", "update", "propose", "supersede", "archive")

PATH_DENIED = ProtocolError("path_denied", "filesystem paths are not accepted by the invocation protocol")
UNKNOWN_FIELD = invalid_request("request contains an unknown field")

RECORD_FIELDS = (
    "id", "title", "kind", "scope", "status", "access", "created_at", "updated_at",
    "tags", "aliases", "supersedes", "sources", "body",
)  # fmt: skip
SOURCE_FIELDS = ("kind", "reference", "actor", "observed_at", "revision", "content_hash")

# Top-level keys in the order each operation reads them; the first failing key is reported.
FIELD_ORDER: dict[str, tuple[str, ...]] = {
    "search": ("query", "limit", "scope", "scopes", "access"),
    "context": ("query", "limit", "budget", "scope", "scopes", "access"),
    "get": ("id", "scope", "scopes", "access"),
    "archive": ("id", "scope", "scopes", "access"),
    "remember": ("actor", "approved", "source", "title", "kind", "scope", "tags", "aliases", "body"),
    "update": ("actor", "approved", "id", "scope", "scopes", "source", "title", "kind", "tags", "aliases", "body"),
    "propose": ("actor", "approved", "record", *RECORD_FIELDS),
    "supersede": (
        "id",
        "scope",
        "access",
        "replacement",
        *(f for f in RECORD_FIELDS if f not in ("id", "scope", "access")),
    ),
}
# Top-level keys that are record fields (the rest are filters, guards or nested objects).
TOP_RECORD_FIELDS: dict[str, frozenset[str]] = {
    "remember": frozenset({"title", "kind", "scope", "tags", "aliases", "body"}),
    "update": frozenset({"title", "kind", "tags", "aliases", "body"}),
    "propose": frozenset(RECORD_FIELDS),
    "supersede": frozenset(RECORD_FIELDS) - {"id", "scope", "access"},
}

_MISSING = object()


def parse_json(data: bytes) -> object:
    """Step 1: the request bytes as one JSON value (strict UTF-8, no NaN, no lone surrogates)."""
    try:
        value = loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, huge integers, nested too deeply
        raise ProtocolError("invalid_json", "stdin must contain one JSON object") from None
    if _has_lone_surrogate(value):
        raise ProtocolError("invalid_json", "stdin must contain one JSON object")
    return value


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_envelope(operation: str, request: object) -> dict[str, Any]:
    """Steps 2–5: a JSON object with integer `version` 1, a matching `operation`, a known operation."""
    if not isinstance(request, dict):
        raise invalid_request("request must be a JSON object")
    version = request.get("version")
    if not _is_u64(version):
        raise invalid_request("request must include integer version 1")
    if version != VERSION:
        raise ProtocolError("unsupported_version", "request version is not supported")
    if "operation" in request and request["operation"] != operation:
        raise invalid_request("request operation does not match the command operation")
    if operation not in OPERATIONS:
        raise ProtocolError("unknown_operation", "operation is not supported by protocol version 1")
    return request


def _is_u64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def check_schema(operation: str, request: Mapping[str, Any]) -> None:
    """Step 6: validate against `<operation>.request.schema.json`; raise the first problem.

    A valid request is recognised by the compiled predicate; only an invalid one pays for
    `jsonschema`, whose errors name the paths and keywords the message catalogue is keyed by.
    """
    name = f"{operation}.request"
    if predicates.accepts(name, request):
        return
    errors = list(schemas.validator(name).iter_errors(request))
    if errors:
        problems = [problem for error in errors for problem in _problems(operation, error)]
        raise min(problems, key=lambda problem: problem[0])[1]


def is_path_like(key: str) -> bool:
    """Keys that name a filesystem location are refused as such, never as merely unknown."""
    return key in ("path", "root", "store") or key.endswith("_path") or "file" in key


# ---- mapping one jsonschema error to (rank, ProtocolError) -----------------------------------

_KEYWORD_RANK = {"type": 0, "required": 1}


def _problems(operation: str, error: Any) -> Iterable[tuple[tuple[int, ...], ProtocolError]]:
    """Every problem one schema error stands for, each with its rank (lower is reported first)."""
    path = list(error.path)
    kinds = _container_kinds(path)
    rank = tuple(_rank(operation, kind, step) for kind, step in zip(kinds, path, strict=False))
    here = kinds[-1]  # the kind of the object the error's instance is
    keyword = error.validator
    if keyword == "additionalProperties":
        extra = sorted(key for key in error.instance if key not in error.schema.get("properties", {}))
        yield (*rank, -1), (PATH_DENIED if is_path_like(extra[0]) else UNKNOWN_FIELD)
    elif keyword == "required":
        for key in error.validator_value:
            if key not in error.instance:
                message = _message(operation, here, key, "required", _MISSING, item=False)
                yield (*rank, _rank(operation, here, key), _KEYWORD_RANK[keyword]), message
    elif keyword == "not":  # `scope` together with `scopes`
        yield (*rank, _rank(operation, here, "scope")), invalid_request("use either scope or scopes, not both")
    else:
        item = bool(path) and isinstance(path[-1], int)
        key_at = len(path) - (2 if item else 1)
        key = str(path[key_at]) if key_at >= 0 else ""
        message = _message(operation, kinds[key_at] if key_at >= 0 else "top", key, keyword, error.instance, item=item)
        yield (*rank, _KEYWORD_RANK.get(keyword, 2)), message


def _container_kinds(path: list[Any]) -> list[str]:
    """`kinds[i]` is the kind of the value at `path[:i]`: top, record, source, sources or list."""
    kinds = ["top"]
    for step in path:
        parent = kinds[-1]
        if parent == "top" and step in ("record", "replacement"):
            kinds.append("record")
        elif parent == "top" and step == "source":
            kinds.append("source")
        elif parent in ("top", "record") and step == "sources":
            kinds.append("sources")
        elif parent == "sources":
            kinds.append("source")
        else:
            kinds.append("list")
    return kinds


def _rank(operation: str, kind: str, step: object) -> int:
    if isinstance(step, int):
        return step
    order = {"top": FIELD_ORDER[operation], "record": RECORD_FIELDS, "source": SOURCE_FIELDS}.get(kind, ())
    return order.index(step) if step in order else len(order)


# ---- the message catalogue --------------------------------------------------------------------

_MAX_BOUNDED_BYTES = 65536


def _bounded_problem(value: object) -> bool:
    """Not a non-empty string of at most 64 KiB (the reference's "bounded string")."""
    return not isinstance(value, str) or not value or len(value.encode("utf-8")) > _MAX_BOUNDED_BYTES


def _bounded(key: str) -> ProtocolError:
    return invalid_request(f"field `{key}` must be a bounded string")


def _message(operation: str, kind: str, key: str, keyword: str, value: object, *, item: bool = False) -> ProtocolError:
    if kind == "source":
        return _source_message(key, keyword)
    if kind == "record" or (kind == "top" and key in TOP_RECORD_FIELDS.get(operation, ())):
        return _record_message(key, keyword, value, item)
    return _top_message(key, keyword, value, item)


def _top_message(key: str, keyword: str, value: object, item: bool) -> ProtocolError:
    if key == "query":
        if keyword == "maxLength" and not _bounded_problem(value):
            return invalid_request("query is too long")
        return _bounded("query")
    if key in ("limit", "budget"):
        if keyword == "minimum":
            return invalid_request(f"field `{key}` must not be negative")
        return invalid_request(f"field `{key}` must be an integer")
    if key == "scope":
        return invalid_request("scope must be a string")
    if key == "scopes":
        if item:
            return invalid_request("scopes must contain strings")
        if keyword == "type":
            return invalid_request("scopes must be an array")
        return invalid_request("scope filter is out of bounds")
    if key == "access":
        return invalid_request("access must be `agent` or `human`")
    if key == "actor":
        return invalid_request("actor must be `agent` or `human`")
    if key == "id":
        return _bounded("id") if _bounded_problem(value) else invalid_request("id must be a valid record identifier")
    if key in ("record", "replacement"):
        return invalid_request("record must be a JSON object")
    if key == "source":
        return invalid_request("source must be an object")
    return invalid_request("request input is invalid")


_RECORD_ENUMS = {"kind": "kind is invalid", "scope": "scope is invalid", "status": "status is invalid",
                 "access": "access is invalid"}  # fmt: skip


def _record_message(key: str, keyword: str, value: object, item: bool) -> ProtocolError:
    if keyword == "required":
        return invalid_request(f"field `{key}` is required")
    if key == "id":
        return invalid_request("id must be a valid record identifier")
    if key in ("title", "body"):
        return _bounded(key)
    if key in _RECORD_ENUMS:
        return _bounded(key) if _bounded_problem(value) else invalid_request(_RECORD_ENUMS[key])
    if key in ("created_at", "updated_at"):
        if isinstance(value, str):
            return invalid_request(f"field `{key}` is not RFC 3339")
        return invalid_request(f"field `{key}` must be a timestamp")
    if key in ("tags", "aliases"):
        if item:
            return invalid_request("record collection contains an invalid string")
        if keyword == "maxItems":
            return invalid_request("record collection is too large")
        return invalid_request(f"field `{key}` must be an array")
    if key == "supersedes":
        if not item:
            return invalid_request("field `supersedes` must be an array")
        if not isinstance(value, str):
            return invalid_request("record id collection contains an invalid value")
        return invalid_request("id must be a valid record identifier")
    if key == "sources":
        if item:
            return invalid_request("source must be an object")
        if keyword == "maxItems":
            return invalid_request("too many sources")
        return invalid_request("sources must be an array")
    return invalid_request("request input is invalid")


def _source_message(key: str, keyword: str) -> ProtocolError:
    if key == "kind" and keyword == "required":
        return invalid_request("source kind is required")
    if key == "observed_at" and keyword == "format":
        return invalid_request("source observed_at must be an RFC 3339 timestamp")
    if key in SOURCE_FIELDS:
        return invalid_request(f"source {key} is invalid")
    return invalid_request("source must be an object")
