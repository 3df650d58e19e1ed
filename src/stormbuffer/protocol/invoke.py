"""The version-1 protocol entry points: one request in, one envelope out.

`handle` is shared by `sbuf invoke` and the MCP adapter: it parses and validates the request,
dispatches the operation and turns its result or failure into an envelope. It never raises.
`invoke_line` adds what only the command line has: the input bound, the output bound and the
single output line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from . import reads, writes
from .errors import from_core
from .limits import MAX_INPUT_BYTES, MAX_OUTPUT_BYTES
from .requests import OPERATIONS, VERSION, check_envelope, check_schema, parse_json
from .session import Session

_DISPATCH: dict[str, Callable[[Mapping[str, Any], Session], Any]] = {
    "search": reads.search,
    "context": reads.context,
    "get": reads.get,
    "remember": writes.remember,
    "update": writes.update,
    "propose": writes.propose,
    "supersede": writes.supersede,
    "archive": writes.archive,
}
_WRITES = frozenset({"remember", "update", "propose", "supersede", "archive"})

__all__ = ["OPERATIONS", "Answer", "encode", "failure", "handle", "invoke_line", "success", "validate_envelope"]


def success(operation: str, result: Any) -> dict[str, Any]:
    return {"version": VERSION, "operation": operation, "ok": True, "result": result}


def failure(operation: str, code: str, message: str) -> dict[str, Any]:
    return {"version": VERSION, "operation": operation, "ok": False, "error": {"code": code, "message": message}}


def handle(operation: str, request: bytes | Mapping[str, Any], session: Session) -> dict[str, Any]:
    """The envelope answering `request` (JSON bytes, or an already parsed object) for `operation`."""
    try:
        value = parse_json(request) if isinstance(request, bytes) else request
        checked = check_envelope(operation, value)
        check_schema(operation, checked)
        return success(operation, _DISPATCH[operation](checked, session))
    except Exception as exc:  # every failure becomes an envelope; the mapping sanitizes it
        error = from_core(exc)
        return failure(operation, error.code, error.message)
    finally:
        if operation in _WRITES:
            session.written()


def encode(envelope: Mapping[str, Any]) -> str:
    """Compact JSON with sorted keys and unescaped non-ASCII text, without a trailing newline."""
    return json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class Answer(NamedTuple):
    """What `sbuf invoke` prints: one line; whether it reports success; schema problems when checked."""

    line: str
    ok: bool
    problems: list[str]


def invoke_line(operation: str, data: bytes, session: Session, *, validate: bool = False) -> Answer:
    """The answer to stdin `data`, read up to one byte past the input bound.

    With `validate`, the envelope is checked against `schema/v1`; a mismatch is answered with
    `internal_error` and the problems are returned (tests turn this on; it costs a few milliseconds).
    """
    if len(data) > MAX_INPUT_BYTES:
        envelope = failure(operation, "input_too_large", "request exceeds the bounded input limit")
    else:
        envelope = handle(operation, data, session)
    line = encode(envelope)
    if len(line.encode("utf-8")) + 1 > MAX_OUTPUT_BYTES:
        envelope = failure(operation, "output_too_large", "response exceeds the bounded protocol output")
        line = encode(envelope)
    problems = validate_envelope(envelope) if validate else []
    if problems:
        envelope = failure(operation, "internal_error", "the response does not match its schema")
        line = encode(envelope)
    return Answer(line, envelope["ok"], problems)


def validate_envelope(envelope: Mapping[str, Any]) -> list[str]:
    """Schema problems of an envelope and, on success of a known operation, of its result."""
    from . import schemas

    checks: list[tuple[str, Any]] = [("envelope", envelope)]
    if envelope.get("ok") is True and envelope.get("operation") in OPERATIONS:
        checks.append((f"{envelope['operation']}.result", envelope["result"]))
    return [
        f"{name}: {'/'.join(map(str, error.absolute_path))}: {error.message}"
        for name, instance in checks
        for error in schemas.validator(name).iter_errors(instance)
    ]
