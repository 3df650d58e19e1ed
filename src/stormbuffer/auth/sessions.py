"""Review-page sessions of a team server: a browser signs in with a team token once, then sends a
random session id in a cookie instead.

Each session is bound to the token that opened it (its id and hash, never the token): every lookup
asks the store's tokens again, so a revoked or expired token ends its sessions at the next
request, and the principal always carries the token's current role and scopes. A session ends
after `LIFETIME_S`, and at most `MAX_SESSIONS` are kept (the oldest go first). Only the SHA-256 of a
session id is kept, where the store's storage says (`storage.session_storage`): for a directory
store in the serving process (`SessionMemory`: they end when it stops) or, when several worker
processes serve it, in a file they share (`SessionFile`: emptied when the server starts), for a
PostgreSQL store in its database (every server of the store knows them).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from pathlib import Path

from .principals import Principal
from .shared import SESSIONS_FILE, SharedDatabase, shared_file
from .storage import Bound, session_storage
from .tokens import TeamToken, TeamTokens, TokenError, now

LIFETIME_S = 12 * 3600
MAX_SESSIONS = 10_000


def _key(session: str) -> str:
    return hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()


class TeamSessions:
    """The sessions of one team server, over the store's `tokens`."""

    def __init__(self, tokens: TeamTokens, lifetime_s: float = LIFETIME_S, shared: bool = False) -> None:
        self.tokens = tokens
        self.lifetime_s = lifetime_s
        self.storage = session_storage(tokens.paths, shared)

    def open(self, token: str) -> tuple[str, Principal] | None:
        """A new session id and its principal when `token` is an active team token, else None."""
        try:
            entry, state = self.tokens.find(token)
        except TokenError:  # a damaged token file opens nothing
            return None
        if entry is None or state != "active":
            return None
        session = secrets.token_urlsafe(32)
        self.storage.open(_key(session), Bound(entry.id, entry.digest), self.lifetime_s)
        return session, entry.principal()

    def principal(self, session: str) -> Principal | None:
        """Who holds `session`: None when it is unknown, too old, or its token is no longer active."""
        bound = self.storage.bound(_key(session), self.lifetime_s)
        if bound is None:
            return None
        entry = self._entry(bound)
        return entry.principal() if entry is not None else None

    def close(self, session: str) -> None:
        """End `session` (signing out)."""
        self.storage.close(_key(session))

    def _entry(self, bound: Bound) -> TeamToken | None:
        try:
            entry = self.tokens.storage.with_id(bound.token_id)
        except TokenError:
            return None
        if entry is None or not hmac.compare_digest(entry.digest, bound.digest) or not self.tokens.admits(entry):
            return None
        return entry if entry.state(now()) == "active" else None


class SessionMemory:
    """The `SessionStorage` of a directory store's server: a dictionary of this process."""

    def __init__(self) -> None:
        self._sessions: dict[str, tuple[Bound, float]] = {}  # key → (bound, opened on the monotonic clock)
        self._lock = threading.Lock()

    def open(self, key: str, bound: Bound, lifetime_s: float) -> None:
        at = time.monotonic()
        with self._lock:
            for old in [k for k, (_, opened) in self._sessions.items() if at - opened > lifetime_s]:
                del self._sessions[old]
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[key] = (bound, at)

    def bound(self, key: str, lifetime_s: float) -> Bound | None:
        with self._lock:
            found = self._sessions.get(key)
        if found is None or time.monotonic() - found[1] > lifetime_s:
            return None
        return found[0]

    def close(self, key: str) -> None:
        with self._lock:
            self._sessions.pop(key, None)


class SessionFile:
    """The `SessionStorage` of a directory store served by several worker processes: a SQLite file
    under `<store>/team/` (`shared`), with each session's opening time on the wall clock."""

    SCHEMA = """CREATE TABLE IF NOT EXISTS sessions (key TEXT PRIMARY KEY, token_id TEXT NOT NULL,
                digest TEXT NOT NULL, opened REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS sessions_opened ON sessions (opened);"""

    def __init__(self, root: Path) -> None:
        self.database = SharedDatabase(shared_file(root, SESSIONS_FILE), self.SCHEMA)

    def open(self, key: str, bound: Bound, lifetime_s: float) -> None:
        at = time.time()
        with self.database.transaction() as db:
            db.execute("DELETE FROM sessions WHERE opened < ?", (at - lifetime_s,))
            (count,) = db.execute("SELECT count(*) FROM sessions").fetchone()
            if count >= MAX_SESSIONS:
                db.execute("DELETE FROM sessions WHERE key IN (SELECT key FROM sessions ORDER BY opened LIMIT ?)",
                           (count - MAX_SESSIONS + 1,))  # fmt: skip
            db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?)", (key, bound.token_id, bound.digest, at))

    def bound(self, key: str, lifetime_s: float) -> Bound | None:
        with self.database.transaction() as db:
            found = db.execute("SELECT token_id, digest, opened FROM sessions WHERE key = ?", (key,)).fetchone()
        if found is None or time.time() - found[2] > lifetime_s:
            return None
        return Bound(found[0], found[1])

    def close(self, key: str) -> None:
        with self.database.transaction() as db:
            db.execute("DELETE FROM sessions WHERE key = ?", (key,))
