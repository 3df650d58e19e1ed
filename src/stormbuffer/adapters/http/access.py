"""Who is calling: the local credential on every request, and the one authorization check per route.

- `/v1/…` takes `Authorization: Bearer <token>`, the secret `sbuf auth token` prints. Its holder is
  the local user acting through a program (`kind` "program"): its writes pass the secret guard.
- The review page also takes its session cookie, set by `GET /sign-in?token=…` (the address
  `sbuf serve` prints) or the sign-in form: HttpOnly, SameSite=Strict, valid while this server
  process runs. Its holder is the person signed in (`kind` "person").
- A team server (`sbuf serve --team`) takes the store's team tokens instead (`auth.tokens`), and
  with an external issuer configured its JWTs (`auth.oidc`, checked on a worker thread since its
  keys may need fetching), nothing else: each names its principal, a program with a role and scopes.
  Its review page also takes the session cookie that signing in with a team token sets
  (`auth.sessions`), bound to that token: revoking the token ends the session.
- `/openapi.json`, `/static/…`, `/sign-in` and the team server's Protected Resource Metadata
  (RFC 9728, `/.well-known/oauth-protected-resource`) need neither (they hold no record). Anything
  else without a valid credential is 401: `unauthorized` with `WWW-Authenticate: Bearer` under
  `/v1/` (on a team server under `/mcp` and wherever a token was sent too, naming the metadata),
  a redirect to the sign-in page elsewhere. Tokens are compared in constant time and never logged.

A route then calls `allow(request, operation)` before any work: `authorize` of the principal for
that operation on the served store's scope (403 `permission_denied` when refused, 404 `not_found`
as for a missing record when the store is outside the caller's scopes). On a team server the
caller's name is the `actor` of every source it writes (`stamped`); what the client claimed is
dropped.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any

import anyio
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from stormbuffer.auth import Principal, Refused, authorize, local_user
from stormbuffer.auth.credential import same_token
from stormbuffer.auth.sessions import TeamSessions
from stormbuffer.auth.tokens import TeamTokens, TokenError
from stormbuffer.core.records import Record
from stormbuffer.protocol import fields
from stormbuffer.protocol.errors import ProtocolError

from .context import store_context
from .errors import ApiError, error_response, json_response

if TYPE_CHECKING:
    from stormbuffer.auth.oidc import OidcIssuer

SIGN_IN = "/sign-in"
API_PREFIXES = ("/v1/", "/mcp", "/.well-known/")  # for programs: a browser's cookie is not their credential
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"
PUBLIC_PATHS = frozenset({"/openapi.json", SIGN_IN, RESOURCE_METADATA})
PUBLIC_PREFIXES = ("/static/",)
UNAUTHORIZED = "send the token `sbuf auth token` prints as `Authorization: Bearer <token>`"
TEAM_UNAUTHORIZED = "send a valid team token (`sbuf team token create`) as `Authorization: Bearer <token>`"
NOT_FOUND = "record was not found"
TEAM_TOKEN_PREFIX = "sbt_"


@dataclass(frozen=True)
class Credentials:
    """What this server accepts: the user's token, and the review page's session for this process;
    on a team server (`team` set), the store's team tokens only."""

    token: str
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    program: Principal = field(default_factory=lambda: local_user("program"))  # who holds the token
    person: Principal = field(default_factory=lambda: local_user("person"))  # who holds the session
    team: TeamTokens | None = None
    sessions: TeamSessions | None = None  # a team server's review-page sessions
    resource: str | None = None  # a team server's public URL, when set: its name in metadata and challenges
    oidc: OidcIssuer | None = None  # a team server's external issuer, whose JWTs it also takes

    @classmethod
    def for_team(cls, tokens: TeamTokens, resource: str | None = None, oidc: OidcIssuer | None = None,
                 shared: bool = False) -> Credentials:  # fmt: skip
        """A team server's: the store's team tokens and the sessions they open (and the JWTs of `oidc`,
        when given), and no local token or session (never shown); `resource` is its public URL, if any;
        `shared`: its sessions are shared by several worker processes."""
        sessions = TeamSessions(tokens, shared=shared)
        return cls(secrets.token_urlsafe(32), team=tokens, sessions=sessions, resource=resource, oidc=oidc)

    def cookie_name(self, port: int | None) -> str:
        """Cookies are shared by every port of a host: the port keeps two servers' sessions apart."""
        return f"stormbuffer_session_{port or 0}"

    def principal(self, scope: Scope) -> Principal | None:
        headers = Headers(scope=scope)
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if self.team is not None and "authorization" in headers:
            return self._team_principal(given.strip() if scheme.lower() == "bearer" else "")
        if self.team is None and scheme.lower() == "bearer" and given and same_token(given.strip(), self.token):
            return self.program
        if scope["path"].startswith(API_PREFIXES):
            return None
        session = self.session_of(scope)
        if session is None:
            return None
        if self.sessions is not None:
            return self.sessions.principal(session)
        return self.person if self.team is None and same_token(session, self.session) else None

    def session_of(self, scope: Scope) -> str | None:
        """The session id the request's cookie carries, if any."""
        cookie = SimpleCookie()
        try:
            cookie.load(Headers(scope=scope).get("cookie", ""))
        except Exception:  # a malformed Cookie header is no credential
            return None
        found = cookie.get(self.cookie_name(_port(scope)))
        return found.value if found is not None else None

    def may_fetch(self, scope: Scope) -> bool:
        """Whether checking this request's credential may wait on the network (an issuer's JWT,
        whose keys may need fetching; any team token or session of a store whose tokens live in a
        database): it is then checked on a worker thread."""
        if self.team is not None and self.team.storage.waits:
            return True
        if self.oidc is None:
            return False
        scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and not given.strip().startswith(TEAM_TOKEN_PREFIX)

    def _team_principal(self, given: str) -> Principal | None:
        assert self.team is not None
        if self.oidc is not None and given and not given.startswith(TEAM_TOKEN_PREFIX):
            return self.oidc.verify(given)
        try:
            entry, state = self.team.find(given)
        except TokenError:  # a damaged token file opens nothing
            return None
        return entry.principal() if entry is not None and state == "active" else None

    def challenge(self, scope: Scope) -> str:
        """The `WWW-Authenticate` value of a 401; a team server's names its resource metadata."""
        if self.team is None:
            return "Bearer"
        presented = "authorization" in Headers(scope=scope)
        metadata = f'Bearer resource_metadata="{self.resource_url(scope)}{RESOURCE_METADATA}"'
        return metadata + (', error="invalid_token"' if presented else "")

    def resource_url(self, scope: Scope) -> str:
        """This server as its clients name it: the public URL when set, else the scheme and the
        `Host` the security checks admitted."""
        return self.resource or f"{scope.get('scheme', 'http')}://{Headers(scope=scope).get('host', '')}"


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
        if self.credentials.may_fetch(scope):
            principal = await anyio.to_thread.run_sync(self.credentials.principal, scope)
        else:
            principal = self.credentials.principal(scope)
        if principal is None and path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
            team = self.credentials.team is not None
            if path.startswith(API_PREFIXES) or (team and "authorization" in Headers(scope=scope)):
                message = UNAUTHORIZED if self.credentials.team is None else TEAM_UNAUTHORIZED
                challenge = {"WWW-Authenticate": self.credentials.challenge(scope)}
                refusal = error_response(401, "unauthorized", message, challenge)
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


def allow(request: Request, operation: str, proposers: Collection[str] = ()) -> Principal:
    """The caller, once `authorize` let it run `operation` on the served store (403 otherwise, 404
    as for a missing record outside its scopes); `proposers` as `authorize` takes them."""
    caller = principal(request)
    request.state.operation = operation  # for the audit entry
    try:
        authorize(caller, operation, store_context(request).scope, proposers)
    except Refused as exc:
        if exc.out_of_scope:
            raise ApiError(404, "not_found", NOT_FOUND) from None
        raise ApiError(403, "permission_denied", str(exc)) from None
    return caller


def author(request: Request) -> str | None:
    """The name a team server writes as the `actor` of every source; None on a loopback server."""
    credentials: Credentials = request.app.state.credentials
    return principal(request).name if credentials.team is not None else None


def stamped(record: Record, name: str | None) -> Record:
    """`record` with `name` (`author`'s) as the actor of every source, unless None."""
    if name is None:
        return record
    return dataclasses.replace(record, sources=tuple(dataclasses.replace(s, actor=name) for s in record.sources))


def stamped_request(request: dict[str, Any], name: str) -> dict[str, Any]:
    """A protocol request with `name` as the actor of each source it carries (`source`, `sources`,
    and those of a nested `record`), changed in place."""
    for value in (request, request.get("record")):
        if not isinstance(value, dict):
            continue
        listed = value.get("sources")
        for source in [value.get("source"), *(listed if isinstance(listed, list) else [])]:
            if isinstance(source, dict):
                source["actor"] = name
    return request


def guard_write(caller: Principal, record: Record) -> None:
    """The secret guard of `sbuf invoke remember` for a record a program writes (422
    `secret_detected`); a person's writes pass, as `sbuf add` does."""
    if caller.person:
        return
    try:
        fields.guard_secrets(record)
    except ProtocolError as exc:
        raise ApiError(422, exc.code, exc.message) from None


async def resource_metadata(request: Request) -> Response:
    """RFC 9728 Protected Resource Metadata of a team server (404 on a loopback server): the resource,
    how it takes tokens, and the external issuer whose JWTs it takes, if any (team tokens are made
    with `sbuf team token create`)."""
    credentials: Credentials = request.app.state.credentials
    if credentials.team is None:
        raise ApiError(404, "not_found", "no route matches this path")
    document: dict[str, Any] = {"resource": credentials.resource_url(request.scope)}
    if credentials.oidc is not None:
        document["authorization_servers"] = [credentials.oidc.issuer]
    return json_response({**document, "bearer_methods_supported": ["header"],
                          "resource_name": "Stormbuffer team server"})  # fmt: skip
