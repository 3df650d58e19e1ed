"""What keeps a loopback server from being used by other sites: checks on every request, before any route.

- DNS rebinding: a request whose `Host` is neither the bound address nor `localhost` (each with or
  without the server's port), nor one of a team server's configured host names, is refused (403
  `host_not_allowed`).
- Cross-site requests from a browser: a state-changing request (anything but GET, HEAD, OPTIONS)
  may carry only the server's own `Origin`, scheme, host and port exactly (`http://127.0.0.1:7342`
  or `http://localhost:7342`; `https://…` over TLS), and a `Sec-Fetch-Site` of `same-origin` or
  `none`; anything else,
  `Origin: null` and `same-site` included, is 403 `origin_not_allowed`. It must say
  `Content-Type: application/json` (415 `unsupported_media_type`), which a page cannot send to
  another origin without a CORS preflight that this server never answers. The one exception: a
  form of the review page (outside `/v1/`) that carries this server's own `Origin`; the page
  checks its CSRF token as well.
- A body declared larger than `MAX_BODY_BYTES` is refused before it is read (413); `bodies.read`
  bounds bodies without a length, and the time they take.

Who the caller is, is checked next (`access.Authenticate`). No CORS headers are ever sent.
"""

from __future__ import annotations

import ipaddress

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import error_response

MAX_BODY_BYTES = 262144
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"
TOO_LARGE = "request body exceeds the 262144-byte limit"
BODY_TIMEOUT_S = 10.0
SLOW_BODY = "the request body did not arrive within 10 seconds"


def host_names(bound: str) -> tuple[str, ...]:
    """The names a client may use in `Host` for a server bound to `bound` (an IP literal)."""
    address = ipaddress.ip_address(bound)
    literal = f"[{address.compressed}]" if address.version == 6 else address.compressed
    return (literal, "localhost")


def host_name(host: str) -> str:
    """The name part of a `Host` value: without its port, IPv6 brackets kept."""
    return host if host.endswith("]") or ":" not in host else host.rsplit(":", 1)[0]


class LoopbackGuard:
    """ASGI middleware applying the checks above to every HTTP request; a team server's `allowed`
    host names are also admitted in `Host`, with any port."""

    def __init__(self, app: ASGIApp, bound: str, allowed: tuple[str, ...] = ()) -> None:
        self.app = app
        self.names = host_names(bound)
        self.allowed = frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is not None:
            status, code, message = refusal
            await error_response(status, code, message)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        headers = Headers(scope=scope)
        port = (scope.get("server") or ("", None))[1]
        allowed = self._allowed_hosts(port)
        host = headers.get("host", "").lower()
        if (host not in allowed and host_name(host) not in self.allowed) or len(headers.getlist("host")) != 1:
            return 403, "host_not_allowed", "the Host header does not name this local server"
        if scope["method"] in SAFE_METHODS:
            return None
        origins = headers.getlist("origin")
        scheme = scope.get("scheme", "http")
        if origins and (len(origins) > 1 or not self._own_origin(origins[0].lower(), scheme, port)):
            return 403, "origin_not_allowed", "cross-origin requests are refused"
        if headers.get("sec-fetch-site", "none").lower() not in ("same-origin", "none"):
            return 403, "origin_not_allowed", "cross-origin requests are refused"
        media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        page_form = media_type == FORM_TYPE and bool(origins) and not scope["path"].startswith("/v1/")
        if media_type != JSON_TYPE and not page_form:  # a review page's form also carries its CSRF token
            return 415, "unsupported_media_type", "state-changing requests need Content-Type: application/json"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return 413, "payload_too_large", TOO_LARGE
        return None

    def _allowed_hosts(self, port: int | None) -> frozenset[str]:
        with_port = (f"{name}:{port}" for name in self.names) if port else ()
        return frozenset((*self.names, *with_port))

    def _own_origin(self, origin: str, scheme: str, port: int | None) -> bool:
        """Whether `origin` is this server's: its bound names exactly, or a host name a team server was
        told is its own (`--allow-host`, `--public-url`; behind a proxy the browser's scheme and port
        are the proxy's)."""
        if origin in self._origins(scheme, port):
            return True
        given_scheme, _, netloc = origin.partition("://")
        return given_scheme in ("http", "https") and host_name(netloc) in self.allowed

    def _origins(self, scheme: str, port: int | None) -> frozenset[str]:
        """This server's own origins: scheme, host and port exactly (a browser leaves out the scheme's
        default port only)."""
        default = 443 if scheme == "https" else 80
        return frozenset(f"{scheme}://{name}" + ("" if port == default else f":{port}") for name in self.names)
