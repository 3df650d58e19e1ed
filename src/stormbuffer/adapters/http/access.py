"""Who is calling: the local credential on every request, and the one authorization check per route.

- `/v1/…` takes `Authorization: Bearer <token>`, the secret `sbuf auth token` prints. Its holder is
  the local user acting through a program (`kind` "program"): its writes pass the secret guard.
- The review page also takes its session cookie, set by `GET /sign-in?token=…` (the address
  `sbuf serve` prints) or the sign-in form: HttpOnly, SameSite=Strict, valid while this server
  process runs. Its holder is the person signed in (`kind` "person").
- `/openapi.json`, `/static/…` and `/sign-in` need neither (they hold no record). Anything else
  without a valid credential is 401: `unauthorized` with `WWW-Authenticate: Bearer` under `/v1/`,
  a redirect to the sign-in page elsewhere. Tokens are compared in constant time and never logged.

A route then calls `allow(request, operation)` before any work: `authorize` of the principal for
that operation on the served store's scope (403 `permission_denied` when refused).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from http.cookies import SimpleCookie

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from stormbuffer.auth import Principal, Refused, authorize, local_user
from stormbuffer.auth.credential import same_token
from stormbuffer.core.records import Record
from stormbuffer.protocol import fields
from stormbuffer.protocol.errors import ProtocolError

from .context import store_context
from .errors import ApiError, error_response

SIGN_IN = "/sign-in"
PUBLIC_PATHS = frozenset({"/openapi.json", SIGN_IN})
PUBLIC_PREFIXES = ("/static/",)
UNAUTHORIZED = "send the token `sbuf auth token` prints as `Authorization: Bearer <token>`"


@dataclass(frozen=True)
class Credentials:
    """What this server accepts: the user's token, and the review page's session for this process."""

    token: str
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    program: Principal = field(default_factory=lambda: local_user("program"))  # who holds the token
    person: Principal = field(default_factory=lambda: local_user("person"))  # who holds the session

    def cookie_name(self, port: int | None) -> str:
        """Cookies are shared by every port of a host: the port keeps two servers' sessions apart."""
        return f"stormbuffer_session_{port or 0}"

    def principal(self, scope: Scope) -> Principal | None:
        headers = Headers(scope=scope)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and given and same_token(given.strip(), self.token):
            return self.program
        if scope["path"].startswith("/v1/"):
            return None  # the API is for programs: a browser's cookie is not its credential
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no credential
            return None
        found = cookie.get(self.cookie_name(_port(scope)))
        return self.person if found is not None and same_token(found.value, self.session) else None


def _port(scope: Scope) -> int | None:
    server = scope.get("server")
    return server[1] if server else None


class Authenticate:
    """ASGI middleware: the request's principal into `scope["state"]`, or a 401 before any route."""

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        principal = self.credentials.principal(scope)
        if principal is None and path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
            if path.startswith("/v1/"):
                refusal = error_response(401, "unauthorized", UNAUTHORIZED, {"WWW-Authenticate": "Bearer"})
            else:
                refusal = RedirectResponse(SIGN_IN, status_code=303)
            await refusal(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def principal(request: Request) -> Principal:
    """The authenticated caller of a route that is not public."""
    found: Principal = request.state.principal
    return found


def allow(request: Request, operation: str) -> Principal:
    """The caller, once `authorize` let it run `operation` on the served store (403 otherwise)."""
    caller = principal(request)
    try:
        authorize(caller, operation, store_context(request).scope)
    except Refused as exc:
        raise ApiError(403, "permission_denied", str(exc)) from None
    return caller


def guard_write(caller: Principal, record: Record) -> None:
    """The secret guard of `sbuf invoke remember` for a record a program writes (422
    `secret_detected`); a person's writes pass, as `sbuf add` does."""
    if caller.person:
        return
    try:
        fields.guard_secrets(record)
    except ProtocolError as exc:
        raise ApiError(422, exc.code, exc.message) from None
