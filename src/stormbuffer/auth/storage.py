"""Where a store's team data lives: the one seam between the team server's rules and their storage.

The rules — how a token is made, checked, revoked or rotated (`tokens`), what an audit entry holds
(`audit`), how a review-page session is bound to its token (`sessions`) — are written once. They ask
a storage for what this module's protocols name; `token_storage`, `audit_trail` and
`session_storage` pick the storage the store's `store.toml` names, as `engines.open_record_store`
picks its records' engine:

- a directory store keeps its tokens in `<store>/team/tokens.toml` and its audit trail in
  `<store>/team/audit.jsonl` (`tokens.TokenFile`, `audit.AuditFile`); its page sessions live in the
  serving process (`sessions.SessionMemory`), since one host serves it, or in a file its worker
  processes share (`sessions.SessionFile`);
- a PostgreSQL store keeps all three in tables of its database, beside its records
  (`engines.postgresql.team`): every server of the store, on any host, sees a token made, revoked
  or rotated, an audit entry and a session at once.

Nothing above this module knows which is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from stormbuffer.core.stores import StorePaths

    from .audit import Filter
    from .tokens import TeamToken


class TokenStorage(Protocol):
    """The token entries of one store (never a token itself, only its hash)."""

    waits: bool  # whether a lookup waits on the network (a database): a door makes it off its event loop

    def entries(self) -> list[TeamToken]:
        """Every entry, revoked and expired ones included, oldest first."""
        ...

    def with_id(self, token_id: str) -> TeamToken | None:
        """The entry of this id (ids are unique in a store), if any."""
        ...

    def add(self, entry: TeamToken) -> None:
        """Keep `entry`; TokenError when an unrevoked token has its name."""
        ...

    def revoke(self, name: str, at: datetime, successor: Callable[[TeamToken], TeamToken] | None = None) -> int:
        """Revoke every unrevoked entry named `name` (TokenError when there is none) and, with
        `successor`, keep what it makes of the last one, all at once; how many were revoked."""
        ...


class AuditTrail(Protocol):
    """The audit trail of one store: only ever appended, pruned by age."""

    waits: bool  # whether an append waits on the network (a database): a door makes it off its event loop

    def append(self, entry: dict[str, Any]) -> None:
        """Add `entry` (its `records` bounded to `audit.MAX_IDS`)."""
        ...

    def prune(self, before: datetime) -> int:
        """Drop the entries older than `before`; how many were dropped."""
        ...

    def entries(self, wanted: Filter) -> Iterator[dict[str, Any]]:
        """The entries `wanted` matches, oldest first."""
        ...


@dataclass(frozen=True)
class Bound:
    """What a session is bound to: its token's id and hash."""

    token_id: str
    digest: str


class SessionStorage(Protocol):
    """The review-page sessions of one store's team servers, each known by the hash of its id."""

    def open(self, key: str, bound: Bound, lifetime_s: float) -> None:
        """Keep the session `key` (dropping the ones older than `lifetime_s`, and the oldest past a cap)."""
        ...

    def bound(self, key: str, lifetime_s: float) -> Bound | None:
        """What the session `key` is bound to, unless it is unknown or older than `lifetime_s`."""
        ...

    def close(self, key: str) -> None:
        """End the session `key`."""
        ...


def _database(paths: StorePaths) -> str | None:
    from stormbuffer.core.stores import read_config

    return read_config(paths).database


def token_storage(paths: StorePaths) -> TokenStorage:
    """The token storage of the store at `paths`."""
    database = _database(paths)
    if database is not None:
        from stormbuffer.engines.postgresql.team import TokenTable

        return TokenTable(paths, database)
    from .tokens import TokenFile

    return TokenFile(paths)


def audit_trail(paths: StorePaths) -> AuditTrail:
    """The audit trail of the store at `paths`."""
    database = _database(paths)
    if database is not None:
        from stormbuffer.engines.postgresql.team import AuditTable

        return AuditTable(paths, database)
    from .audit import AuditFile

    return AuditFile(paths)


def session_storage(paths: StorePaths, shared: bool = False) -> SessionStorage:
    """The session storage of the store at `paths`; `shared` by the worker processes of one server."""
    database = _database(paths)
    if database is not None:
        from stormbuffer.engines.postgresql.team import SessionTable

        return SessionTable(paths, database)
    from .sessions import SessionFile, SessionMemory

    return SessionFile(paths.root) if shared else SessionMemory()
