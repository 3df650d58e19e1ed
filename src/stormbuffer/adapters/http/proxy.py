"""A team server behind a reverse proxy (`sbuf serve --team --behind-proxy IP`): the proxy terminates
TLS, so only its connections are served, and only requests it says arrived over HTTPS.

`ProxyGuard` (ASGI middleware, outermost but the request log) refuses a connection from any other
address (403 `proxy_required`) and a request without `X-Forwarded-Proto: https` (403
`https_required`), before any other check; an accepted request is marked `https` for the answers
that name the server. Nothing else the proxy forwards is believed: the `Host` check still applies,
and the audit trail names the token, not an address.
"""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response


class ProxyGuard:
    """ASGI middleware accepting only forwarded HTTPS requests from the proxy at `proxy`."""

    def __init__(self, app: ASGIApp, proxy: str) -> None:
        self.app = app
        self.proxy = ipaddress.ip_address(proxy)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if client is None or not self._is_proxy(client[0]):
            await error_response(403, "proxy_required", "this server only answers through its proxy")(
                scope, receive, send
            )
            return
        if Headers(scope=scope).getlist("x-forwarded-proto") != ["https"]:
            await error_response(403, "https_required", "this server only answers requests forwarded over HTTPS")(
                scope, receive, send
            )
            return
        scope["scheme"] = "https"
        await self.app(scope, receive, send)

    def _is_proxy(self, address: str) -> bool:
        try:
            return ipaddress.ip_address(address) == self.proxy
        except ValueError:
            return False
