"""Tokens from an external OpenID Connect issuer: JWTs checked against its published keys, their
claims mapped to a principal (`sbuf serve --team --oidc-issuer URL --oidc-audience AUD`).

`OidcIssuer.discover(issuer, audience)` reads `<issuer>/.well-known/openid-configuration` once (its
`issuer` must be the one configured) and keeps a `PyJWKClient` for its `jwks_uri`. A token is
accepted when it is a JWT signed by one of those keys (RS256, RS384, RS512, ES256, ES384, PS256), by
the key its `kid` names, with `iss` the issuer, `aud` holding the audience, and `exp` in the
future (`nbf` and `iat` are checked when present; 30 s of leeway). Its claims then give:

- the name: `preferred_username`, else `sub`, which must be a valid team token name;
- the role: `stormbuffer_role` (`reader`, `agent`, `reviewer` or `admin`), required;
- the scopes: `stormbuffer_scopes` (a list, or a space-separated string), else `default_scope`.

Anything else is refused as a wrong token is (`verify` returns None); why is logged at debug level
only, never with the token. An unknown `kid` fetches the key set again at most once a minute.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .principals import Principal, Role
from .tokens import NAME, RESERVED_NAMES

if TYPE_CHECKING:
    from jwt import PyJWK, PyJWKClient

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]
ROLE_CLAIM = "stormbuffer_role"
SCOPES_CLAIM = "stormbuffer_scopes"
FETCH_TIMEOUT_S = 10.0
REFRESH_EVERY_S = 60.0
LEEWAY_S = 30
MAX_DOCUMENT = 1 << 20
logger = logging.getLogger("stormbuffer.auth")


class OidcError(Exception):
    """The issuer cannot be used; the message says why, in a line."""


def _checked_url(url: str, what: str) -> str:
    """`url` if https, or http to a loopback address; OidcError otherwise."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and _loopback(parts.hostname):
        return url
    raise OidcError(f"the {what} must be an https URL (or http to a loopback address)")


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fetch_json(url: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as answer:  # noqa: S310 (checked scheme)
        data = answer.read(MAX_DOCUMENT + 1)
    if len(data) > MAX_DOCUMENT:
        raise ValueError("too large")
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


@dataclass
class OidcIssuer:
    """One issuer's keys and the audience its tokens must name for this server."""

    issuer: str
    audience: str
    default_scope: str
    keys: PyJWKClient
    _refreshed: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def discover(cls, issuer: str, audience: str, default_scope: str) -> OidcIssuer:
        """The issuer at `issuer`, from its discovery document; OidcError when it cannot be read."""
        from jwt import PyJWKClient

        issuer = _checked_url(issuer.rstrip("/"), "OIDC issuer")
        try:
            document = _fetch_json(f"{issuer}/.well-known/openid-configuration")
        except (OSError, ValueError):
            raise OidcError("the OIDC issuer's configuration could not be read") from None
        if str(document.get("issuer", "")).rstrip("/") != issuer:
            raise OidcError("the OIDC issuer's configuration names another issuer")
        jwks_uri = _checked_url(str(document.get("jwks_uri", "")), "issuer's jwks_uri")
        keys = PyJWKClient(jwks_uri, cache_keys=False, cache_jwk_set=True, lifespan=300, timeout=FETCH_TIMEOUT_S)
        return cls(issuer, audience, default_scope, keys)

    def verify(self, token: str) -> Principal | None:
        """The principal `token` names, or None when it is not a valid token of this issuer for
        this audience."""
        import jwt

        try:
            key = self._key(jwt.get_unverified_header(token).get("kid"))
            if key is None:
                return None
            claims = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.audience, issuer=self.issuer,
                                leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud"]})  # fmt: skip
        except (jwt.PyJWTError, OSError, ValueError) as exc:
            logger.debug("OIDC token refused: %s", type(exc).__name__)
            return None
        return self._principal(claims)

    def _key(self, kid: object) -> PyJWK | None:
        """The issuer's key named `kid`; the key set is fetched again for an unknown one at most
        once every `REFRESH_EVERY_S`."""
        if not isinstance(kid, str) or not kid:
            return None
        found = self._find(kid, refresh=False)
        if found is None:
            with self._lock:
                due = time.monotonic() - self._refreshed >= REFRESH_EVERY_S
                if due:
                    self._refreshed = time.monotonic()
            if due:
                found = self._find(kid, refresh=True)
        return found

    def _find(self, kid: str, *, refresh: bool) -> PyJWK | None:
        from jwt import PyJWKClientError

        try:
            keys = self.keys.get_signing_keys(refresh=refresh)
        except PyJWKClientError:
            return None
        return next((key for key in keys if key.key_id == kid), None)

    def _principal(self, claims: dict[str, Any]) -> Principal | None:
        name = claims.get("preferred_username") or claims.get("sub")
        role = claims.get(ROLE_CLAIM)
        if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED_NAMES:
            return None
        if not isinstance(role, str) or role.upper() not in Role.__members__:
            return None
        scopes = claims.get(SCOPES_CLAIM, [self.default_scope])
        if isinstance(scopes, str):
            scopes = scopes.split()
        if not isinstance(scopes, list) or not scopes or not all(isinstance(scope, str) for scope in scopes):
            return None
        return Principal(name, Role[role.upper()], frozenset(scopes), "program")
