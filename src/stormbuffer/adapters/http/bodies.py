"""Reading what a client sends: bounded JSON bodies, the `RecordInput` object, strict query strings.

Problems are answered with fixed messages that name the field at fault, never the value sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request

from stormbuffer.core.ids import parse_record_id
from stormbuffer.core.records import ACCESS_REASON, KIND_REASON, SOURCE_KIND_REASON
from stormbuffer.protocol import schemas
from stormbuffer.protocol.jsontext import loads

from .errors import ApiError, validation_error
from .security import BODY_TIMEOUT_S, MAX_BODY_BYTES, SLOW_BODY, TOO_LARGE
from .shapes import RECORD_INPUT

if TYPE_CHECKING:
    from jsonschema import ValidationError
    from jsonschema.protocols import Validator

_ENUM_REASONS = {"kind": KIND_REASON, "access": ACCESS_REASON, "sources.kind": SOURCE_KIND_REASON}
_KEYWORD_REASONS = {
    "minLength": "must not be empty",
    "maxLength": "is too long",
    "maxItems": "has too many items",
    "minItems": "must not be empty",
    "pattern": "must be a valid UUID",
    "format": "must be an RFC 3339 timestamp with an offset",
    "enum": "is not one of the allowed values",
}
_TYPE_NAMES = {"string": "a string", "array": "an array", "object": "an object", "integer": "an integer"}


async def read(request: Request) -> bytes:
    """The body, at most `MAX_BODY_BYTES` (413 beyond, whether or not its length was declared), sent
    within `BODY_TIMEOUT_S` (408 after)."""
    chunks, size = [], 0
    with anyio.move_on_after(BODY_TIMEOUT_S) as waiting:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, "payload_too_large", TOO_LARGE)
            chunks.append(chunk)
    if waiting.cancelled_caught:
        raise ApiError(408, "request_timeout", SLOW_BODY, {"Connection": "close"})
    return b"".join(chunks)


async def record_input(request: Request) -> dict[str, Any]:
    """The body as a valid `RecordInput` object (400 for malformed JSON, 422 for a wrong shape)."""
    data = await read(request)
    try:
        value = loads(data)
    except ValueError:  # not JSON, or nested too deeply
        raise ApiError(400, "invalid_json", "request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise ApiError(422, "validation_error", "request body must be a JSON object")
    problem = _first_problem(value)
    if problem is not None:
        raise problem
    return value


def _first_problem(value: dict[str, Any]) -> ApiError | None:
    errors = sorted(_validator().iter_errors(value), key=lambda error: [str(part) for part in error.absolute_path])
    if not errors:
        return None
    return _explain(errors[0])


def _explain(error: ValidationError) -> ApiError:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        return ApiError(422, "validation_error", "request body contains an unknown field" if not path else
                        f"field `{_name(path)}` contains an unknown field")  # fmt: skip
    if error.validator == "required":
        missing = next((name for name in RECORD_INPUT["required"] if name not in error.instance), None)
        if not path and missing is not None:
            return ApiError(422, "validation_error", f"field `{missing}` is required")
        return validation_error(_name(path), "lacks a required field")
    name = _name(path)
    generic = ".".join(str(part) for part in path if not isinstance(part, int))
    if error.validator == "enum" and generic in _ENUM_REASONS:
        return validation_error(name, _ENUM_REASONS[generic])
    if error.validator == "type":
        wanted = error.validator_value if isinstance(error.validator_value, str) else "value of another type"
        return validation_error(name, f"must be {_TYPE_NAMES.get(wanted, wanted)}")
    return validation_error(name, _KEYWORD_REASONS.get(str(error.validator), "is not allowed"))


def _name(path: list[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


@cache
def _validator() -> Validator:
    """RecordInput checked exactly as the protocol checks its requests (strict integers, timestamps)."""
    return schemas.validator("record-fields").evolve(schema=RECORD_INPUT)


def record_id(text: str) -> str:
    """A record id from a path (422 `validation_error` for field `id`)."""
    try:
        return parse_record_id(text)
    except ValueError as exc:
        raise validation_error("id", str(exc)) from None


def query_params(request: Request, allowed: Mapping[str, bool]) -> dict[str, str]:
    """The query string as a dict; 400 for an unknown or repeated parameter, or a missing required one
    (`allowed` maps each name to whether it is required)."""
    pairs = request.query_params.multi_items()
    found: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            raise ApiError(400, "invalid_query", "the query string has an unknown parameter")
        if name in found:
            raise ApiError(400, "invalid_query", f"parameter `{name}` is repeated")
        found[name] = value
    for name, required in allowed.items():
        if required and name not in found:
            raise ApiError(400, "invalid_query", f"parameter `{name}` is required")
    return found


def boolean(params: Mapping[str, str], name: str) -> bool:
    value = params.get(name, "false")
    if value not in ("true", "false"):
        raise ApiError(400, "invalid_query", f"parameter `{name}` must be true or false")
    return value == "true"


def integer(params: Mapping[str, str], name: str, default: int) -> int:
    value = params.get(name)
    if value is None:
        return default
    if not value.isascii() or not value.lstrip("-").isdigit() or len(value) > 20:
        raise ApiError(400, "invalid_query", f"parameter `{name}` must be an integer")
    return int(value)
