"""The team server's audit entries: one per request under `/v1/` and per review-page request (door
`web`; signing in included, static files and the sign-in form not), refusals included, and one per
MCP request refused (its token, its rate, its body, its protocol: any error status) before the MCP
server (which appends one per tool call or resource read).

`AuditRequests` (ASGI middleware, inside the security checks and around the credential check)
appends, as the answer starts, who asked (the principal's name, None without a valid token),
when, the door (`http`), the operation `allow` was asked for (None when refused before), the
method and path (never the query), the status, the record id the path names and the record ids
and receipt id a route noted with `note`. Nothing from the request's headers or body is kept.
`keep_pruned` applies a retention (`sbuf serve --team --audit-retention`); `off_the_loop` makes an
append that waits on a database (a PostgreSQL store's trail) on a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stormbuffer.auth import Principal
from stormbuffer.auth.storage import AuditTrail
from stormbuffer.core.errors import StormbufferError

logger = logging.getLogger("stormbuffer.http")
MCP_PATH = "/mcp"
MAX_NAMED = 64  # characters of a record id named in the path that the entry keeps
UNAUDITED_PREFIXES = ("/static/", "/.well-known/")  # hold no record
UNAUDITED = frozenset({("/openapi.json", "GET"), ("/sign-in", "GET"), ("/favicon.ico", "GET")})
PRUNE_EVERY_S = 3600.0


def note(request: Request, records: Iterable[str] = (), receipt: str | None = None) -> None:
    """The record ids a route named, returned or wrote, and its receipt id, for the audit entry."""
    request.state.audit_records = [*getattr(request.state, "audit_records", ()), *records]
    if receipt is not None:
        request.state.audit_receipt = receipt


def noted_from_envelope(request: Request, envelope: dict[str, Any]) -> None:
    """`note` the ids a protocol envelope's result holds."""
    note(request, *envelope_ids(envelope))


def envelope_ids(envelope: dict[str, Any]) -> tuple[list[str], str | None]:
    """The record ids a protocol envelope's result holds (the record written or read, hits, blocks)
    and the context's receipt id."""
    result = envelope.get("result")
    if not isinstance(result, dict | list):
        return [], None
    items = result if isinstance(result, list) else [result, *_list(result.get("hits")), *_list(result.get("blocks"))]
    records = [str(value) for item in items if isinstance(item, dict)
               for key in ("record_id", "id") if isinstance(value := item.get(key), str)]  # fmt: skip
    receipt = result.get("receipt") if isinstance(result, dict) else None
    return records, receipt.get("receipt_id") if isinstance(receipt, dict) else None


def append_entry(trail: AuditTrail, caller: Principal | None, door: str, operation: str | None, request: str,
                 status: int, records: Iterable[str] = (), receipt: str | None = None) -> None:  # fmt: skip
    """Append one entry to `trail`; a failure to write it is logged, never raised."""
    entry = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "who": caller.name if caller is not None else None,
        "door": door,
        "operation": operation,
        "request": request,
        "status": status,
        "records": list(dict.fromkeys(records)),
        "receipt": receipt,
    }
    try:
        trail.append(entry)
    except (OSError, StormbufferError) as exc:  # a full disk, a database out of reach
        logger.error("audit entry could not be written: %s", type(exc).__name__)


async def off_the_loop(trail: AuditTrail, append: Callable[..., None], *args: Any) -> None:
    """`append(*args)`, on a worker thread when appending to `trail` waits on a database."""
    if trail.waits:
        await anyio.to_thread.run_sync(append, *args)
    else:
        append(*args)


async def keep_pruned(trail: AuditTrail, retention: timedelta) -> None:
    """Drop the entries of `trail` older than `retention`, now and every `PRUNE_EVERY_S`, on a worker
    thread; a failure is logged by class name and tried again next time."""
    while True:
        try:
            dropped = await anyio.to_thread.run_sync(trail.prune, datetime.now(UTC) - retention)
        except (OSError, StormbufferError) as exc:
            logger.error("audit trail could not be pruned: %s", type(exc).__name__)
        else:
            if dropped:
                logger.info("audit trail pruned entries=%s", dropped)
        await anyio.sleep(PRUNE_EVERY_S)


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


class AuditRequests:
    """ASGI middleware appending one audit entry per `/v1/` request to `trail`."""

    def __init__(self, app: ASGIApp, trail: AuditTrail) -> None:
        self.app = app
        self.trail = trail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._audited(scope):
            await self.app(scope, receive, send)
            return
        appended = False

        async def sending(message: Message) -> None:
            nonlocal appended
            if message["type"] == "http.response.start" and not appended:
                appended = True  # before the answer leaves: a client that got it finds the entry
                await off_the_loop(self.trail, self._append, scope, message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if not appended:  # no answer started: answered as an internal error further out
                self._append(scope, 500)

    @staticmethod
    def _audited(scope: Scope) -> bool:
        path = scope["path"]
        if path.startswith(("/v1/", MCP_PATH)):
            return True
        return not path.startswith(UNAUDITED_PREFIXES) and (path, scope["method"]) not in UNAUDITED

    def _append(self, scope: Scope, status: int) -> None:
        state = scope.get("state", {})
        door = "mcp" if scope["path"] == MCP_PATH else "http" if scope["path"].startswith("/v1/") else "web"
        if door == "mcp" and state.get("principal") is not None and status < 400:
            return  # the MCP server audited each call it answered; a refused request reached none
        named = scope.get("path_params", {}).get("id")
        records = [named] if isinstance(named, str) and len(named) <= MAX_NAMED else []
        append_entry(self.trail, state.get("principal"), door, state.get("operation"),
                     f"{scope['method']} {scope['path'][: MAX_NAMED * 4]}", status,
                     [*records, *state.get("audit_records", ())], state.get("audit_receipt"))  # fmt: skip
