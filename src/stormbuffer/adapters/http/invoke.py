"""`POST /v1/invoke/{operation}`: the version-1 agent protocol over HTTP.

The body is the request `sbuf invoke <operation>` reads on stdin; the answer's body is exactly the
line it prints (without the newline), so every door gives the same envelope, receipts included.
The status mirrors the envelope: 200 for `ok`, otherwise a status for the error code. Reads run
on the reader threads; everything else waits for its turn as a write. The protocol's writes run
its secret guard whoever calls: a bearer token is never a person. On a team server the caller's
name replaces the `actor` of every source in the request, and a store outside the caller's scopes
is answered as a record that does not exist (`not_found`).
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response

from stormbuffer.auth import PROTOCOL_OPERATIONS
from stormbuffer.core.errors import MutationBusy
from stormbuffer.protocol.errors import from_core
from stormbuffer.protocol.invoke import encode, failure, invoke_line
from stormbuffer.protocol.session import Session

from . import bodies
from .access import allow, author, stamped_request
from .audit import noted_from_envelope
from .context import store_context
from .errors import ApiError

READ_OPERATIONS = frozenset({"search", "context", "get"})
STATUS = {
    "invalid_json": 400, "invalid_request": 400, "unsupported_version": 400, "path_denied": 400,
    "unknown_operation": 404, "not_found": 404,
    "input_too_large": 413,
    "scope_denied": 403, "access_denied": 403, "permission_denied": 403,
    "not_initialized": 409, "conflict": 409,
    "invalid_state": 422, "invalid_record": 422, "secret_detected": 422,
    "output_too_large": 500, "internal_error": 500,
}  # fmt: skip


async def invoke_operation(request: Request) -> Response:
    operation = request.path_params["operation"]
    try:
        allow(request, PROTOCOL_OPERATIONS.get(operation, "recall"))  # an unknown operation is answered, never run
    except ApiError as exc:
        if exc.code != "not_found":
            raise
        return Response(encode(failure(operation, exc.code, exc.message)).encode("utf-8"), 404,
                        media_type="application/json")  # fmt: skip
    data = await bodies.read(request)
    name = author(request)
    if name is not None:
        data = _stamped(data, name)
    store = store_context(request)
    if operation in READ_OPERATIONS:
        line, ok = await store.read(_answer, operation, data, store.session)
    else:
        try:
            line, ok = await store.write(_answer, operation, data, store.session)
        except MutationBusy as exc:  # its turn did not come in time
            busy = from_core(exc)
            line, ok = encode(failure(operation, busy.code, busy.message)), False
    if name is not None:
        noted_from_envelope(request, json.loads(line))
    status = 200 if ok else STATUS.get(json.loads(line)["error"]["code"], 500)
    return Response(line.encode("utf-8"), status, media_type="application/json")


def _answer(operation: str, data: bytes, session: Session) -> tuple[str, bool]:
    answer = invoke_line(operation, data, session)
    return answer.line, answer.ok


def _stamped(data: bytes, name: str) -> bytes:
    """The request with `name` as the actor of each source it carries; a body that is not a JSON
    object is left for the protocol to refuse."""
    try:
        request = json.loads(data)
    except (ValueError, RecursionError):
        return data
    if not isinstance(request, dict):
        return data
    return json.dumps(stamped_request(request, name), ensure_ascii=False).encode("utf-8")
