"""Every answer that is not a success: `{"error": {"code": …, "message": …}}` with a fixed message.

Core exceptions are mapped by class, as the reference's local API maps them; their text reaches a
message only for lifecycle refusals (`invalid_state`), whose core messages name record ids and
states, never paths. Anything unexpected is logged by class name and answered with a generic 500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.responses import Response

from stormbuffer.core.errors import (
    Conflict,
    IndexBusy,
    InvalidInput,
    MutationBusy,
    NotFound,
    RecordError,
    RepositoryError,
)

logger = logging.getLogger("stormbuffer.http")

NO_STORE = {"Cache-Control": "no-store"}
STORE_BUSY = "the store is busy; retry the operation"
INTERNAL = "the local API could not complete the operation"
REVISION_CONFLICT = "record changed while it was being edited; reload it before trying again"
PRECONDITION_REQUIRED = "supply the current ETag in an If-Match header before editing a record"


class ApiError(Exception):
    """An error answer: HTTP status, stable code, fixed message, extra headers."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}

    def response(self) -> Response:
        return error_response(self.status, self.code, self.message, self.headers)


def json_body(value: Any) -> bytes:
    """Compact UTF-8 JSON, keys in the order the value holds them."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_body(value), status, headers, media_type="application/json")


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return json_response({"error": {"code": code, "message": message}}, status, headers)


def validation_error(field: str, reason: str) -> ApiError:
    return ApiError(422, "validation_error", f"field `{field}` is invalid: {reason}")


def from_core(exc: BaseException) -> ApiError:
    """The answer for an exception raised by the core (or anything else)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NotFound):
        return ApiError(404, "not_found", "record was not found")
    if isinstance(exc, (MutationBusy, IndexBusy)):
        return ApiError(409, "store_busy", STORE_BUSY)
    if isinstance(exc, Conflict):
        return ApiError(412, "revision_conflict", REVISION_CONFLICT)
    if isinstance(exc, RecordError):
        return ApiError(422, "invalid_record", "a canonical record is invalid")
    if isinstance(exc, InvalidInput):
        return ApiError(422, "invalid_request", "invalid input: the request cannot be applied")
    if isinstance(exc, RepositoryError):
        return ApiError(422, "invalid_state", str(exc))  # the core says what the lifecycle refused
    logger.error("local API operation failed: %s", type(exc).__name__)
    return ApiError(500, "internal_error", INTERNAL)
