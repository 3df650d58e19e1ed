"""Protocol failures: the fixed error codes and sanitized messages of version 1.

Every failure an operation can report is a `ProtocolError(code, message)`. Core exceptions are
mapped by class through one table, never by formatting the exception, so no path, record text,
secret or request value can reach a message.
"""

from __future__ import annotations

from stormbuffer.core.errors import (
    AccessDenied,
    Conflict,
    DatabaseUnavailable,
    IndexBusy,
    IndexUnavailable,
    InvalidInput,
    InvalidState,
    MutationBusy,
    NotFound,
    NotInitialized,
    RecordError,
    ScopeDenied,
    StoreIntegrityError,
    UnsafeWrite,
    out_of_space,
)

STORE_FAILED = "the store operation failed"
NO_SPACE = "no space left on device; free some disk space, then retry the operation"
RECORDS_INVALID = "one or more canonical records are invalid"
SECRET_DETECTED = "candidate contains credential-like material; remove it before retrying"


class ProtocolError(Exception):
    """A failure envelope's `error` object: a stable code and a fixed message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid_request(message: str) -> ProtocolError:
    return ProtocolError("invalid_request", message)


# Core exception class → (code, message). Subclasses are matched through their bases, in order.
_CORE_ERRORS: tuple[tuple[type[Exception], str, str], ...] = (
    (
        NotInitialized,
        "not_initialized",
        "the selected store is not initialized; run `sbuf init` (or `sbuf --project init`)",
    ),
    (
        DatabaseUnavailable,
        "internal_error",
        "the store's PostgreSQL database cannot be used; `sbuf list` on this store says why",
    ),
    (NotFound, "not_found", "record was not found"),
    (ScopeDenied, "scope_denied", "record is outside the selected scope"),
    (AccessDenied, "access_denied", "record is not available to this access class"),
    (InvalidState, "invalid_state", "record lifecycle state does not permit this operation"),
    (MutationBusy, "conflict", "the store stayed busy while this write waited; retry it"),
    (Conflict, "conflict", "record changed or is busy; retry after inspection"),
    (StoreIntegrityError, "internal_error", STORE_FAILED),
    (RecordError, "invalid_record", "record validation failed"),
    (InvalidInput, "invalid_request", "request input is invalid"),
    (
        IndexUnavailable,
        "internal_error",
        "the SQLite projection could not be opened; check that its directory is writable, then reindex the selected "
        "store",
    ),
    (IndexBusy, "conflict", "the SQLite projection is busy; retry the operation"),
)


def from_core(exc: BaseException) -> ProtocolError:
    """The protocol error for an exception raised below the protocol layer."""
    if isinstance(exc, ProtocolError):
        return exc
    if out_of_space(exc):
        return ProtocolError("internal_error", NO_SPACE)
    if isinstance(exc, UnsafeWrite):  # names only the store-relative file, escaped
        return ProtocolError("invalid_record", f"record file {exc.name} is invalid; repair it before this write")
    for cls, code, message in _CORE_ERRORS:
        if isinstance(exc, cls):
            return ProtocolError(code, message)
    return ProtocolError("internal_error", STORE_FAILED)
