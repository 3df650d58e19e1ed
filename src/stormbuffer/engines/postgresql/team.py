"""A PostgreSQL store's team data in its database: the token, audit and session storages of
`auth.storage`, over the `team_*` tables of `schema`, each row marked with the store's record scope.

Every call is one short transaction of its own, so every server of the store, on any host, sees a
token made, revoked or rotated, an audit entry or a session as soon as the call returns: a token is
checked against the table on every request (by its public id, the primary key), never cached. The
calls each request makes (a token or session lookup, an audit append) are one statement each, in
autocommit on a pool that does not ping (`database.one_statement`): one round trip, not a ping, a
transaction's start and its commit. The tables are created on first use in a process when a
store made before them lacks them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...auth.audit import Filter, bounded, entry_time
from ...auth.principals import Role
from ...auth.sessions import MAX_SESSIONS
from ...auth.storage import Bound
from ...auth.tokens import TeamToken, TokenError
from ...core.stores import StorePaths, record_scope
from .database import connection, database_url, one_statement

if TYPE_CHECKING:
    from sqlalchemy import Connection

PAGE = 1000  # audit entries read per query
_ready: set[str] = set()  # the URLs whose team tables this process has made sure of


class _Tables:
    """What the three storages share: the store's scope and a connection to tables that exist."""

    waits = True

    def __init__(self, paths: StorePaths, variable: str) -> None:
        self.store = record_scope(paths)
        self.variable = variable
        url = database_url(variable)
        if url not in _ready:
            _create_tables(variable)
            _ready.add(url)


def _create_tables(variable: str) -> None:
    """The team tables where missing (a store made before them), under the schema's lock."""
    from sqlalchemy import text

    from .schema import TEAM_TABLES, metadata

    with connection(variable) as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('stormbuffer:schema', 0))"))
        metadata.create_all(conn, tables=list(TEAM_TABLES))


class TokenTable(_Tables):
    """The `TokenStorage` of a PostgreSQL store."""

    def entries(self) -> list[TeamToken]:
        from .schema import team_tokens

        query = team_tokens.select().where(team_tokens.c.store == self.store)
        with connection(self.variable) as conn:
            rows = conn.execute(query.order_by(team_tokens.c.seq)).all()
        return [_token(row) for row in rows]

    def with_id(self, token_id: str) -> TeamToken | None:
        from .schema import team_tokens

        query = team_tokens.select().where(team_tokens.c.store == self.store, team_tokens.c.id == token_id)
        rows = one_statement(self.variable, query)
        return _token(rows[0]) if rows else None

    def add(self, entry: TeamToken) -> None:
        with connection(self.variable) as conn:
            self._insert(conn, entry)

    def revoke(self, name: str, at: datetime, successor: Callable[[TeamToken], TeamToken] | None = None) -> int:
        from .schema import team_tokens

        unrevoked = team_tokens.c.store == self.store, team_tokens.c.name == name, team_tokens.c.revoked_at.is_(None)
        with connection(self.variable) as conn:
            statement = team_tokens.update().where(*unrevoked).values(revoked_at=at).returning(*team_tokens.c)
            revoked = [_token(row) for row in sorted(conn.execute(statement), key=lambda row: row.seq)]
            if not revoked:
                raise TokenError(f"no unrevoked token is named {name}")
            if successor is not None:
                self._insert(conn, successor(revoked[-1]))
        return len(revoked)

    def _insert(self, conn: Connection, entry: TeamToken) -> None:
        """Insert `entry`; TokenError when an unrevoked token has its name (the unique index says)."""
        from sqlalchemy.dialects.postgresql import insert

        from .schema import team_tokens

        statement = insert(team_tokens).values(
            store=self.store, id=entry.id, name=entry.name, sha256=entry.digest, role=entry.role.name.lower(),
            scopes=list(entry.scopes), audience=entry.audience, created_at=entry.created_at,
            expires_at=entry.expires_at, revoked_at=entry.revoked_at,
        )  # fmt: skip
        if conn.execute(statement.on_conflict_do_nothing().returning(team_tokens.c.id)).first() is None:
            raise TokenError(f"a token named {entry.name} exists; revoke it first")


def _token(row: Any) -> TeamToken:
    return TeamToken(
        name=row.name, id=row.id, digest=row.sha256, role=Role[row.role.upper()], scopes=tuple(row.scopes),
        created_at=_utc(row.created_at), expires_at=_utc(row.expires_at), revoked_at=_utc(row.revoked_at),
        audience=row.audience,
    )  # fmt: skip


def _utc(value: datetime | None) -> Any:
    return None if value is None else value.astimezone(UTC)


class AuditTable(_Tables):
    """The `AuditTrail` of a PostgreSQL store: one row per entry, its JSON kept as written."""

    def append(self, entry: dict[str, Any]) -> None:
        from .schema import team_audit

        entry = bounded(entry)
        row = {
            "store": self.store, "at": entry_time(entry.get("at")), "who": entry.get("who"),
            "records": [str(record) for record in entry.get("records", ())],
            "entry": json.dumps(entry, ensure_ascii=False, separators=(",", ":")),
        }  # fmt: skip
        one_statement(self.variable, team_audit.insert().values(**row))

    def prune(self, before: datetime) -> int:
        from .schema import team_audit

        with connection(self.variable) as conn:
            found = conn.execute(team_audit.delete().where(team_audit.c.store == self.store, team_audit.c.at < before))
        return int(found.rowcount)

    def entries(self, wanted: Filter) -> Iterator[dict[str, Any]]:
        """Page by page, each page its own short query: a slow reader holds no transaction open."""
        from .schema import team_audit

        where = [team_audit.c.store == self.store]
        if wanted.who is not None:
            where.append(team_audit.c.who == wanted.who)
        if wanted.record is not None:
            where.append(team_audit.c.records.contains([wanted.record]))
        if wanted.since is not None:
            where.append(team_audit.c.at >= wanted.since)
        query = team_audit.select().with_only_columns(team_audit.c.seq, team_audit.c.entry).where(*where)
        last = 0
        while True:
            with connection(self.variable) as conn:
                page = conn.execute(query.where(team_audit.c.seq > last).order_by(team_audit.c.seq).limit(PAGE)).all()
            for row in page:
                yield json.loads(row.entry)
            if len(page) < PAGE:
                return
            last = page[-1].seq


class SessionTable(_Tables):
    """The `SessionStorage` of a PostgreSQL store (the servers' clocks are taken to agree, as TLS needs)."""

    def open(self, key: str, bound: Bound, lifetime_s: float) -> None:
        from sqlalchemy import select

        from .schema import team_sessions

        mine = team_sessions.c.store == self.store
        with connection(self.variable) as conn:
            conn.execute(team_sessions.delete().where(mine, team_sessions.c.opened_at < _ago(lifetime_s)))
            newest = select(team_sessions.c.key).where(mine).order_by(team_sessions.c.opened_at.desc())
            conn.execute(team_sessions.delete().where(mine, team_sessions.c.key.in_(newest.offset(MAX_SESSIONS - 1))))
            conn.execute(team_sessions.insert().values(
                store=self.store, key=key, token_id=bound.token_id, sha256=bound.digest, opened_at=datetime.now(UTC)
            ))  # fmt: skip

    def bound(self, key: str, lifetime_s: float) -> Bound | None:
        from .schema import team_sessions

        query = team_sessions.select().where(
            team_sessions.c.store == self.store,
            team_sessions.c.key == key,
            team_sessions.c.opened_at >= _ago(lifetime_s),
        )
        rows = one_statement(self.variable, query)
        return Bound(rows[0].token_id, rows[0].sha256) if rows else None

    def close(self, key: str) -> None:
        from .schema import team_sessions

        with connection(self.variable) as conn:
            conn.execute(team_sessions.delete().where(team_sessions.c.store == self.store, team_sessions.c.key == key))


def _ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)
