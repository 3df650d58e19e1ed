"""The human commands a running daemon answers for `sbuf` (`add`, `list`).

They make the same repository calls as in `sbuf`'s own process, on the daemon's warm repository,
whose watcher spares them the check of every record file and whose projection is already open.
`add` carries the new record as its canonical Markdown (the file it becomes); `list` answers the
summaries and the invalid files. A failure travels as the words `sbuf` reports (`failure`):
`not_initialized`, `no_space`, `error` with the core's own message, or `internal` for anything
unexpected (logged by the daemon); never a traceback, and no path beyond the store-relative names
`sbuf` shows itself.
"""

from __future__ import annotations

import logging
from typing import Any

from ..core.codec import parse_markdown
from ..core.errors import NotInitialized, StormbufferError, out_of_space
from ..protocol.session import Session

OPERATIONS = ("add", "list")

logger = logging.getLogger("stormbuffer.daemon")


def answer(session: Session, operation: str, payload: bytes) -> dict[str, Any]:
    """The reply to one human command, made on `session`'s repository."""
    try:
        repository = session.repository()
        if operation == "add":
            record = repository.add(parse_markdown(payload, "draft"))
            return {"ok": True, "id": record.id}
        summaries, invalid = repository.listing()
        return {"ok": True, "summaries": summaries, "invalid": invalid}  # tuples travel as arrays
    except NotInitialized:
        return {"ok": False, "failure": "not_initialized"}
    except Exception as exc:
        if out_of_space(exc):
            return {"ok": False, "failure": "no_space"}
        if isinstance(exc, StormbufferError):
            return {"ok": False, "failure": "error", "message": str(exc)}
        if isinstance(exc, OSError):
            return {"ok": False, "failure": "error", "message": exc.strerror or type(exc).__name__}
        logger.warning("sbuf %s failed: %s", operation, type(exc).__name__)
        return {"ok": False, "failure": "internal"}
