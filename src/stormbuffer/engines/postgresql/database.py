"""Reaching the database a PostgreSQL store's `store.toml` names through an environment variable.

The URL is read from the variable when the store is opened and never written anywhere. Every
failure becomes one DatabaseUnavailable naming the variable and the reason (not set, not a PostgreSQL URL,
unreachable, authentication failed, no such database, no pgvector, schema missing) and never the
URL, its password or its host.

The variable is read from the process's environment, or, inside `environment(env)`, from `env`: the
memory daemon answers each caller with the database of the caller's environment.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from ...core.errors import DatabaseUnavailable, StoreError
from ...core.stores import EMBEDDED

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, Executable, Row

_REASONS = {  # SQLSTATE → what a person can act on
    "28P01": "authentication failed (check the user and password)",
    "28000": "authentication failed (check the user and password)",
    "3D000": "the database does not exist",
    "42501": "the database user lacks a privilege Stormbuffer needs",
    "53300": "the server has no free connection",
    "57P03": "the server is starting up or shutting down",
}
SCHEMA_MISSING = "the database has no Stormbuffer tables yet (run `sbuf init --engine postgresql`)"


_CALLER: ContextVar[Mapping[str, str] | None] = ContextVar("stormbuffer_database_environment", default=None)


@contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """Read database variables from `env` instead of this process's environment inside the block (in this
    thread or task, and in the worker threads it starts)."""
    token = _CALLER.set(env)
    try:
        yield
    finally:
        _CALLER.reset(token)


def database_url(variable: str) -> str:
    """The URL in the environment variable `variable`, as the SQLAlchemy psycopg dialect wants it (for
    `EMBEDDED`: the embedded server's, started when it is not running)."""
    if variable == EMBEDDED:
        from .embedded import attach

        return attach()
    url = (_CALLER.get() or os.environ).get(variable, "").strip()
    if not url:
        raise DatabaseUnavailable(
            f"{variable} is not set: this store keeps its records in the PostgreSQL database it names"
        )
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise DatabaseUnavailable(f"{variable} is not a postgresql:// URL")
    return f"postgresql+psycopg://{rest}"


POOLS = 8  # URLs whose connections a process keeps (a daemon serves callers of several databases)
_pools: OrderedDict[tuple[str, bool], Engine] = OrderedDict()
_pools_lock = threading.Lock()


def engine_for(url: str) -> Engine:
    """One pool of connections per URL and process, for the POOLS URLs used last; an older URL's pool
    is disposed (its idle connections closed; those lent out close when they come back)."""
    return _pool(url, autocommit=False)


def autocommit_engine_for(url: str) -> Engine:
    """A second pool per URL and process, without a ping at checkout, in autocommit: for single
    statements that need no transaction, so a statement is one round trip, and for read snapshots,
    whose transaction begins with their first statement (`projection._connected`). Their callers retry
    once on a connection the server dropped."""
    return _pool(url, autocommit=True)


def _pool(url: str, *, autocommit: bool) -> Engine:
    from sqlalchemy import create_engine

    key = (url, autocommit)
    with _pools_lock:
        engine = _pools.pop(key, None)
        if engine is None and autocommit:
            engine = create_engine(url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
        elif engine is None:
            engine = create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5})
        _pools[key] = engine
        while len(_pools) > 2 * POOLS:
            _pools.popitem(last=False)[1].dispose()
        return engine


def reason(exc: BaseException) -> str:
    """What went wrong with the database, in words that contain no part of the URL."""
    from sqlalchemy.exc import ArgumentError, DBAPIError

    if isinstance(exc, ArgumentError):
        return "the URL cannot be read"
    original = exc.orig if isinstance(exc, DBAPIError) else exc
    state = getattr(original, "sqlstate", None)
    if state in _REASONS:
        return _REASONS[state]
    if state == "42P01" or state == "3F000":
        return SCHEMA_MISSING
    text = str(original).lower()
    if "password" in text or "authentication" in text:
        return _REASONS["28P01"]
    if "does not exist" in text and "database" in text:
        return _REASONS["3D000"]
    if isinstance(exc, DBAPIError) and exc.connection_invalidated or state is None or state.startswith("08"):
        return "the server cannot be reached"
    return f"the database refused the operation (SQLSTATE {state})"


def named(variable: str) -> str:
    """How messages name the database: by its variable, or as the embedded one."""
    if variable == EMBEDDED:
        return "the embedded PostgreSQL database"
    return f"the PostgreSQL database named by {variable}"


@contextmanager
def talking_to(variable: str) -> Iterator[None]:
    """Turn any database failure inside the block into a sanitized DatabaseUnavailable naming `variable`."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, ArgumentError) as exc:
        raise DatabaseUnavailable(f"{named(variable)} cannot be used: {reason(exc)}") from None


_SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('stormbuffer:schema', 0))"
_current: set[str] = set()  # URLs whose schema this process found up to date


def up_to_date(url: str) -> None:
    """Bring a database whose projection an earlier version made up to this version's, once per process
    and URL (one statement when there is nothing to do): the tables added since are created and filled
    (`tables.create`) under the schema lock, so concurrent processes upgrade it once."""
    from sqlalchemy import text

    from ...embedding.constants import DIMENSION
    from .tables import OUTDATED, create

    if url in _current:
        return
    with engine_for(url).begin() as conn:
        if conn.execute(text(OUTDATED)).scalar():
            conn.execute(text(_SCHEMA_LOCK))
            create(conn, DIMENSION)
    _current.add(url)


def one_statement(variable: str, statement: Executable) -> list[Row[Any]]:
    """The rows of one statement, run in autocommit (tried once more on a fresh connection when the
    server had dropped the pooled one)."""
    from sqlalchemy.exc import DBAPIError

    url = database_url(variable)
    with talking_to(variable):
        up_to_date(url)
        engine = autocommit_engine_for(url)
        for attempt in (1, 2):
            try:
                with engine.connect() as conn:
                    result = conn.execute(statement)
                    return list(result.all()) if result.returns_rows else []
            except DBAPIError as exc:
                if not exc.connection_invalidated or attempt == 2:
                    raise
    raise AssertionError("unreachable")


@contextmanager
def connection(variable: str) -> Iterator[Connection]:
    """A connection in a transaction, committed when the block ends normally."""
    url = database_url(variable)
    with talking_to(variable):
        up_to_date(url)
        with engine_for(url).begin() as conn:
            yield conn


def prepare_database(variable: str) -> None:
    """Make the database ready for stores: pgvector, the `stormbuffer` schema, the records table and the
    projection's tables (idempotent)."""
    from sqlalchemy import text

    from ...embedding.constants import DIMENSION
    from .schema import SCHEMA_VERSION, metadata, settings
    from .tables import create as projection_tables

    with connection(variable) as conn:
        conn.execute(text(_SCHEMA_LOCK))
        available = conn.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")).first()
        if available is None:
            raise DatabaseUnavailable(
                f"{named(variable)} cannot be used: the server has no pgvector "
                "extension (install pgvector 0.5 or later)"
            )
        projection_tables(conn, DIMENSION)  # pgvector, the schema and the projection's tables
        metadata.create_all(conn)
        found = conn.execute(settings.select().where(settings.c.name == "schema_version")).first()
        if found is None:
            conn.execute(settings.insert().values(name="schema_version", value=SCHEMA_VERSION))
        elif found.value != SCHEMA_VERSION:
            raise StoreError(
                f"{named(variable)} holds Stormbuffer schema version {found.value}; this version uses {SCHEMA_VERSION}"
            )
