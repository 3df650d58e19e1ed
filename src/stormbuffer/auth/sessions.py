"""Review-page sessions of a team server: a browser signs in with a team token once, then sends a
random session id in a cookie instead.

Each session is bound to the token that opened it (its id and hash, never the token): every lookup
asks the store's token file again (`TeamTokens.entries` rereads it when it changed), so a revoked
or expired token ends its sessions at the next request, and the principal always carries the
token's current role and scopes. Sessions live in this server process only: they end after
`LIFETIME` or when the server stops, and at most `MAX_SESSIONS` are kept (the oldest go first).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from .principals import Principal
from .tokens import TeamToken, TeamTokens, TokenError, now

LIFETIME_S = 12 * 3600
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class _Bound:
    token_id: str
    digest: str
    opened: float


class TeamSessions:
    """The sessions of one team server, over the store's `tokens`."""

    def __init__(self, tokens: TeamTokens, lifetime_s: float = LIFETIME_S) -> None:
        self.tokens = tokens
        self.lifetime_s = lifetime_s
        self._sessions: dict[str, _Bound] = {}
        self._lock = threading.Lock()

    def open(self, token: str) -> tuple[str, Principal] | None:
        """A new session id and its principal when `token` is an active team token, else None."""
        try:
            entry, state = self.tokens.find(token)
        except TokenError:  # a damaged token file opens nothing
            return None
        if entry is None or state != "active":
            return None
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._prune(time.monotonic())
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[session] = _Bound(entry.id, entry.digest, time.monotonic())
        return session, entry.principal()

    def principal(self, session: str) -> Principal | None:
        """Who holds `session`: None when it is unknown, too old, or its token is no longer active."""
        with self._lock:
            bound = self._sessions.get(session)
        if bound is None or time.monotonic() - bound.opened > self.lifetime_s:
            return None
        entry = self._entry(bound)
        return entry.principal() if entry is not None else None

    def close(self, session: str) -> None:
        """End `session` (signing out)."""
        with self._lock:
            self._sessions.pop(session, None)

    def _entry(self, bound: _Bound) -> TeamToken | None:
        try:
            entries = self.tokens.entries()
        except TokenError:
            return None
        for entry in entries:
            if entry.id == bound.token_id and hmac.compare_digest(entry.digest, bound.digest):
                return entry if entry.state(now()) == "active" else None
        return None

    def _prune(self, at: float) -> None:
        for session in [s for s, bound in self._sessions.items() if at - bound.opened > self.lifetime_s]:
            del self._sessions[session]
