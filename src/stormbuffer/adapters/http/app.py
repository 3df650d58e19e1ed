"""The Starlette application: routes, error answers, the loopback guard and one log line per request.

`build_app(store, bound, credentials, extra_routes, proxy)` is the one way to make it. Extra routes
(the review pages) are matched after the API's (and a team server's MCP endpoint, `/mcp`) and sit
behind the same middleware: the request log (which also marks every answer `nosniff` and, outside
`/static/`, `no-store`), behind a proxy the proxy guard, the loopback guard, on a team server the
audit trail, the credential check, on a team server each token's rate limit, and the error mapping
apply to every route. A route finds the
store through `store_context` and its caller through `access.allow`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import anyio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stormbuffer.auth.storage import AuditTrail, audit_trail

from . import invoke, records, search
from .access import PUBLIC_PREFIXES, RESOURCE_METADATA, Authenticate, Credentials, resource_metadata
from .audit import AuditRequests, keep_pruned
from .context import StoreContext
from .errors import ApiError, error_response, from_core
from .openapi import document_bytes
from .proxy import ProxyGuard
from .ratelimit import RateLimit
from .security import LoopbackGuard
from .team import TeamSettings

if TYPE_CHECKING:
    from .team_mcp import McpEndpoint

logger = logging.getLogger("stormbuffer.http")
Lifespan = Callable[[Any], contextlib.AbstractAsyncContextManager[None]]

HTTP_ERRORS = {
    404: ("not_found", "no route matches this path"),
    405: ("method_not_allowed", "this path does not accept the method"),
}


async def openapi_json(request: Request) -> Response:
    return Response(document_bytes(), media_type="application/json")


def api_routes() -> list[BaseRoute]:
    return [
        Route("/openapi.json", openapi_json, methods=["GET"]),
        Route(RESOURCE_METADATA, resource_metadata, methods=["GET"]),
        Route("/v1/records", records.list_records, methods=["GET"]),
        Route("/v1/records", records.create_record, methods=["POST"]),
        Route("/v1/records/{id}", records.get_record, methods=["GET"]),
        Route("/v1/records/{id}", records.replace_record, methods=["PUT"]),
        *(
            Route(f"/v1/records/{{id}}/{action}", records.change_lifecycle, methods=["POST"])
            for action in records.LIFECYCLE_ACTIONS
        ),
        Route("/v1/search", search.search_records, methods=["GET"]),
        Route("/v1/invoke/{operation}", invoke.invoke_operation, methods=["POST"]),
    ]


def build_app(
    store: StoreContext,
    bound: str,
    credentials: Credentials,
    extra_routes: Sequence[BaseRoute] = (),
    proxy: str | None = None,
    team: TeamSettings | None = None,
) -> Starlette:
    """The app serving `store` on the address `bound` to holders of `credentials`, with
    `extra_routes` after the API's; behind the reverse proxy at `proxy` when given; a team server
    (`credentials.team`) run as `team` says (by default, `TeamSettings()`)."""
    audit, limited, team_routes, lifespan = [], [], [], None
    hosts: tuple[str, ...] = ()
    if credentials.team is not None:
        from .team_mcp import McpEndpoint

        team = team or TeamSettings()
        trail = audit_trail(credentials.team.paths)
        mcp = McpEndpoint(store, trail)
        audit, team_routes = [Middleware(AuditRequests, trail=trail)], [mcp.route()]
        lifespan = _team_lifespan(mcp, trail, team.audit_retention)
        shared = credentials.team.paths.root if team.workers > 1 else None
        limited = [] if team.rate is None else [Middleware(RateLimit, rate=team.rate, shared=shared)]
        hosts = team.allowed_hosts()
    forwarded = [] if proxy is None else [Middleware(ProxyGuard, proxy=proxy)]
    app = Starlette(
        routes=[*api_routes(), *team_routes, *extra_routes],
        lifespan=lifespan,
        middleware=[
            Middleware(RequestLog),
            *forwarded,
            Middleware(LoopbackGuard, bound=bound, allowed=hosts),
            *audit,
            Middleware(Authenticate, credentials=credentials),
            *limited,
        ],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
    app.router.redirect_slashes = False  # `/v1/records/` is no route, not a redirect to one
    app.state.store = store
    app.state.credentials = credentials
    return app


def _team_lifespan(mcp: McpEndpoint, trail: AuditTrail, retention: timedelta | None) -> Lifespan:
    """A team server's lifespan: the MCP endpoint's, and the audit trail kept to `retention`."""

    @contextlib.asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        async with mcp.lifespan(app), anyio.create_task_group() as tasks:
            if retention is not None:
                tasks.start_soon(keep_pruned, trail, retention)
            yield
            tasks.cancel_scope.cancel()

    return lifespan


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _http_error(request: Request, exc: Exception) -> Response:
    """The router's own refusals (no such route, wrong method) in the error shape."""
    assert isinstance(exc, HTTPException)
    code, message = HTTP_ERRORS.get(exc.status_code, ("bad_request", "the request cannot be served"))
    return error_response(exc.status_code, code, message, dict(exc.headers or {}))


class RequestLog:
    """Logs `local API request method=… path=… status=…` once per request (the path without its query,
    which may hold the sign-in token), marks every answer, and turns any exception a route let
    through into its error answer (logged by class name, never with a traceback)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0

        cacheable = scope["path"].startswith(PUBLIC_PREFIXES)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if not cacheable:
                    headers["Cache-Control"] = "no-store"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if status:  # the answer already started: the connection is all that can be closed
                logger.error("local API response failed: %s", type(exc).__name__)
                return
            await from_core(exc).response()(scope, receive, sending)
        finally:
            path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
            logger.info("local API request method=%s path=%s status=%s", scope["method"], path, status)
