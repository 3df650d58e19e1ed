"""MCP over Streamable HTTP at `/mcp` on a team server: the stdio server's handlers, per caller.

`TeamMcp` is the `StormbufferServer` of `stormbuffer-mcp` (the same five tools, three resource
templates and envelopes) with three differences, all from the authenticated caller that
`Authenticate` put in the request's state before the SDK saw the request:

- every tool call and resource read asks `authorize` first: a store outside the caller's scopes
  is `not_found` (the tool's envelope, or the resource error of a missing record), a role too low
  `permission_denied` (the code of a stdio server without a write grant, the message naming the
  role needed), so the write mode is the role's: a reader reads, an agent writes candidates, a
  reviewer may also archive;
- the caller's name is the `actor` of every source a call writes (the client's claim dropped);
- every call appends an audit entry, door `mcp`.

A request's body is read within the API's bounds (`bodies.read`: 413 beyond 256 KiB, 408 when
slow) before the SDK sees it. Core work runs like the HTTP API's: reads on its reader threads,
writes one at a time. The SDK's session manager runs stateless (no session kept between requests)
and answers JSON: clients of the stateless revision and older clients' `initialize` alike.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ReadResourceRequestParams, ReadResourceResult
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from stormbuffer.auth import PROTOCOL_OPERATIONS, Principal, Refused, authorize
from stormbuffer.auth.storage import AuditTrail
from stormbuffer.core.errors import MutationBusy
from stormbuffer.protocol.errors import from_core
from stormbuffer.protocol.invoke import failure, handle

from ..mcp import resources
from ..mcp.server import Context, StormbufferServer
from ..mcp.tools import ToolSpec, WriteGrant, arguments_for
from . import bodies
from .access import NOT_FOUND, stamped_request
from .audit import MCP_PATH, append_entry, envelope_ids, off_the_loop
from .context import StoreContext
from .invoke import READ_OPERATIONS, STATUS
from .security import MAX_BODY_BYTES

RESOURCE_NOT_FOUND = "could not read the requested resource: not_found"


class TeamMcp(StormbufferServer):
    """The MCP handlers of a team server: each call authorized, stamped and audited for its caller."""

    def __init__(self, store: StoreContext, trail: AuditTrail) -> None:
        super().__init__(store.session, WriteGrant.NONE)  # never consulted: the caller's role decides
        self.store = store
        self.trail = trail

    def refusal(self, ctx: Context, operation: str) -> dict[str, Any] | None:
        try:
            authorize(_caller(ctx), PROTOCOL_OPERATIONS[operation], self.store.scope)
        except Refused as exc:
            return (
                failure(operation, "not_found", NOT_FOUND)
                if exc.out_of_scope
                else failure(operation, "permission_denied", str(exc))
            )
        return None

    def request_for(self, ctx: Context, spec: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any]:
        return stamped_request(arguments_for(spec, arguments), _caller(ctx).name)

    async def run_operation(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        if operation in READ_OPERATIONS:
            return await self.store.read(handle, operation, request, self.session)
        try:
            return await self.store.write(handle, operation, request, self.session)
        except MutationBusy as exc:  # its turn did not come in time
            busy = from_core(exc)
            return failure(operation, busy.code, busy.message)

    async def answered(self, ctx: Context, spec: ToolSpec, envelope: dict[str, Any]) -> None:
        status = 200 if envelope.get("ok") is True else STATUS.get(envelope["error"]["code"], 500)
        records, receipt = envelope_ids(envelope)
        await off_the_loop(self.trail, append_entry, self.trail, _caller(ctx), "mcp",
                           PROTOCOL_OPERATIONS[spec.operation], f"tools/call {spec.name}", status, records,
                           receipt)  # fmt: skip

    async def read_resource(self, ctx: Context, params: ReadResourceRequestParams) -> ReadResourceResult:
        caller = _caller(ctx)
        named = [params.uri.rsplit("/", 1)[-1]] if params.uri.count("/") == 3 else []  # record/{id}, candidate/{id}
        try:
            authorize(caller, "resources", self.store.scope)
            result = await self.store.read(resources.read, params.uri, self.session)
        except Refused:  # only ever out of scope: every role reads resources
            await self._read_entry(caller, 404, named)
            raise MCPError(code=INVALID_PARAMS, message=RESOURCE_NOT_FOUND) from None
        except MCPError:
            await self._read_entry(caller, 400, named)
            raise
        await self._read_entry(caller, 200, named)
        return result

    async def _read_entry(self, caller: Principal, status: int, named: list[str]) -> None:
        await off_the_loop(self.trail, append_entry, self.trail, caller, "mcp", "resources", "resources/read",
                           status, named)  # fmt: skip


def _caller(ctx: Context) -> Principal:
    """The principal `Authenticate` admitted for the HTTP request carrying this message."""
    request = ctx.request
    assert isinstance(request, Request)
    caller: Principal = request.state.principal
    return caller


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` that first hands over the whole `body`, already read."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class McpEndpoint:
    """The ASGI endpoint of `/mcp`, and the lifespan that runs the SDK's session manager."""

    def __init__(self, store: StoreContext, trail: AuditTrail) -> None:
        server = TeamMcp(store, trail).sdk_server()
        self.manager = StreamableHTTPSessionManager(
            app=server, json_response=True, stateless=True, max_request_body_size=MAX_BODY_BYTES
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await bodies.read(Request(scope, receive))  # within the API's size and time bounds
        await self.manager.handle_request(scope, _replaying(body, receive), send)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    def route(self) -> Route:
        return Route(MCP_PATH, self, methods=["POST"])  # stateless: no stream to GET, no session to DELETE
