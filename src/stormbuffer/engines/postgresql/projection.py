"""The read side of a PostgreSQL projection, behind `engines.projection`.

A reader works in one REPEATABLE READ, READ ONLY snapshot, as a SQLite read transaction does: its
own transaction, and for the vector search a second connection's on the same snapshot (`Beside`), so
that the server searches vectors while the first answers the lexical side. Postings come back packed
per term (in PostgreSQL's binary format) into the entries `index.postings` ranks, so BM25 is
computed by the same code as for a directory store. Vectors are searched in the
database: exactly (ordered by cosine distance, then chunk id, which no index can serve) until an
HNSW index exists (`projecting.ensure_vector_index`), then through it with pgvector's iterative scan,
so that filters on scopes, status, access and kind still leave enough rows.

Each chunk row comes with its vector and its sentences' vectors, and the vector search returns the rows
of the chunks it finds with their sentences' vectors. A hybrid recall waits for three round trips on
the first connection, the first of them with its `BEGIN`, one on the second, and for none to end its
transactions, which commit so that psycopg keeps the statements it prepared (docs/postgresql.md). The
statements are SQL text made once (`statements`); their rows come in PostgreSQL's binary format.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...index import postings
from ...index import projection as pj
from ..projection import ChunkRow, Nearest
from . import statements
from .projecting import VECTOR_MODEL

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection, Engine

    from ...core.stores import StorePaths
    from ...index.sync import Embedder
    from ...retrieval.hits import SearchOptions

MAX_EF_SEARCH = 1000  # pgvector's bound on hnsw.ef_search
# PostgreSQL's default of 4 prices a random page read as a disk seek: with it the planner joins a
# recall's few chunks to their records by hashing every record (1.1 ms at 2,000 records) rather than
# looking each one up (0.2 ms). The projection a recall reads is cached; 1.1 is the usual SSD setting.
RANDOM_PAGE_COST = 1.1
# ends reads' transactions; threads start lazily
_BACKGROUND = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stormbuffer-pg-snapshot")


@dataclass(frozen=True)
class VectorCheck:
    """What a read's opening checks in passing (`check_vectors`): that the store's vectors come from the
    model `model` (its identity) and none waits; when they do not, `embed` is run, between two openings."""

    model: str
    embed: Callable[[], object]


# The stores (by root) whose next read checks their vectors in its opening, in this request's context
_CHECKS: ContextVar[Mapping[Path, VectorCheck] | None] = ContextVar("stormbuffer_vector_checks", default=None)


def check_vectors(paths: StorePaths, check: VectorCheck) -> None:
    """Have the next read of the PostgreSQL store at `paths` in this context make `check` with its opening,
    which already learns the store's model and how many chunks wait: a read with nothing waiting then
    sends no statement of its own to find that out. When something waits, the read ends the snapshot it
    opened, runs `check.embed` and opens another, which sees the vectors just made."""
    _CHECKS.set({**(_CHECKS.get() or {}), paths.root: check})


@contextmanager
def reading_store(paths: StorePaths, store: str, variable: str) -> Iterator[PostgresProjection]:
    """`reading` the projection of a PostgreSQL store whose database URL is in the environment variable
    `variable` (making the store's `check_vectors` check); any database failure, during the read too, is
    a StoreError naming the variable."""
    from .database import autocommit_engine_for, database_url, talking_to, up_to_date

    url = database_url(variable)
    checks = _CHECKS.get() or {}
    check = checks.get(paths.root)
    if check is not None:
        _CHECKS.set({root: kept for root, kept in checks.items() if root != paths.root})
    with talking_to(variable):
        up_to_date(url)
        with reading(autocommit_engine_for(url), store, paths.root, check=check) as projection:
            yield projection


@contextmanager
def reading(engine: Engine, store: str, store_root: Path, *, exact: bool = False,
            check: VectorCheck | None = None) -> Iterator[PostgresProjection]:  # fmt: skip
    """A read snapshot of the projection of `store` (its record scope) in `engine`'s database; `exact`
    searches vectors exactly even where an HNSW index exists; `check`: see `check_vectors`."""
    opening = statements.OPENING_EXACT if exact else statements.OPENING
    values = {"store": store, "random_page_cost": str(RANDOM_PAGE_COST)}
    conn, transaction, opened = _connected(engine, [], opening, values)
    if check is not None and not _vectors_current(opened[0], check.model):
        _BACKGROUND.submit(_finish, conn, transaction)
        check.embed()
        conn, transaction, opened = _connected(engine, [], opening, values)
    beside = None
    try:
        [(kept, chunks, terms, pending, indexed, snapshot, _cost)] = opened
        settings = dict(kept or {})
        settings[postings.STATS] = json.dumps({"chunks": int(chunks or 0), "terms": int(terms or 0)})
        if VECTOR_MODEL in settings:
            settings[pj.VECTOR_PENDING] = str(pending or 0)
        projection = PostgresProjection(conn, store, store_root, settings, indexed=bool(indexed))
        projection.beside = beside = Beside(engine, snapshot)
        yield projection
    finally:  # nothing was written: the transactions end (and their connections go back) off the reader's path
        _BACKGROUND.submit(_end, conn, transaction, beside)


def _vectors_current(opening: Sequence[Any], model: str) -> bool:
    """Whether the opening's row shows every vector made by the model `model` and none waiting."""
    kept, pending = opening[0] or {}, opening[3]
    return bool(kept.get(VECTOR_MODEL) == model and not pending)


def _end(conn: Connection, transaction: Any, beside: Beside | None) -> None:
    """End a read: its vector search's transaction, then its own."""
    try:
        if beside is not None:
            beside.close()
    finally:
        _finish(conn, transaction)


def _finish(conn: Connection, transaction: Any) -> None:
    """Commit a read's transaction and return its connection. It wrote nothing, so a commit ends it as a
    rollback would, but keeps the statements psycopg prepared on the connection (a rollback discards
    them all, and they would be parsed and planned again on every read)."""
    try:
        if transaction.is_active:
            transaction.commit()
    finally:
        conn.close()


_SNAPSHOT: dict[str, Any] = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}


def _connected(engine: Engine, commands: Sequence[str], sql: str, values: Mapping[str, object], *,
               binary: bool = False) -> tuple[Connection, Any, list[Any]]:  # fmt: skip
    """A connection of `engine` in a READ ONLY, REPEATABLE READ transaction begun with `commands` and the
    statement `sql` (`_pipelined`): the connection, its transaction and the rows of `sql`. Nothing is
    sent before (no ping): when the server had dropped the pooled connection, this is tried once more
    on a new one."""
    from sqlalchemy.exc import DBAPIError

    for attempt in (1, 2):
        conn = engine.connect()
        try:
            transaction = conn.execution_options(**_SNAPSHOT).begin()
            return conn, transaction, _pipelined(conn, commands, sql, values, binary=binary)
        except DBAPIError as exc:
            if exc.connection_invalidated:  # the pool's other connections are as likely gone: a new pool
                conn.invalidate()
                engine.dispose(close=False)
            conn.close()
            if not exc.connection_invalidated or attempt == 2:
                raise
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")


def _pipelined(conn: Connection, commands: Sequence[str], sql: str, values: Mapping[str, object], *,
               binary: bool = False) -> list[Any]:  # fmt: skip
    """Send `commands` (no parameters, no rows), then the statement `sql` with `values`, in one round trip
    (psycopg's pipeline mode), behind the transaction's `BEGIN` when they are the first of it; the rows
    of `sql` (`binary`: in PostgreSQL's binary format). A failure is a DBAPIError, as through SQLAlchemy."""
    driver = _driver(conn)
    with _as_dbapi_errors(driver), driver.pipeline(), driver.cursor(binary=binary) as cursor:
        for command in commands:
            driver.execute(command.encode())
        cursor.execute(sql, values)
        return cursor.fetchall()


def _driver(conn: Connection) -> Any:
    """The psycopg connection beneath the SQLAlchemy connection `conn`."""
    driver = conn.connection.driver_connection
    assert driver is not None
    return driver


def _fetched(driver: Any, sql: str, values: Mapping[str, object]) -> list[tuple[Any, ...]]:
    """The rows of the statement `sql` with `values` on the driver's connection `driver`, in PostgreSQL's
    binary format: `bytea` values (postings, vectors) come as their bytes, not as hex text to decode."""
    with _as_dbapi_errors(driver), driver.cursor(binary=True) as cursor:
        cursor.execute(sql, values)
        return cursor.fetchall()


@contextmanager
def _as_dbapi_errors(driver: Any) -> Iterator[None]:
    """psycopg's errors on the driver's connection `driver`, raised as SQLAlchemy raises them (DBAPIError,
    which `database.talking_to` reports), so that statements sent past SQLAlchemy fail as the others."""
    import psycopg
    from sqlalchemy.exc import DBAPIError

    try:
        yield
    except psycopg.Error as exc:
        raise DBAPIError(None, None, exc, connection_invalidated=driver.closed) from None


def filter_values(options: SearchOptions) -> dict[str, object]:
    """The values of the options' filters in `statements` (status, scope, and access and kind when given)."""
    values: dict[str, object] = {"statuses": list(options.statuses), "scopes": list(options.scopes or ())}
    if options.access is not None:
        values["access"] = list(options.access)
    if options.kinds is not None:
        values["kinds"] = list(options.kinds)
    return values


@dataclass
class PostgresProjection:
    """One read transaction on a PostgreSQL projection. Its methods may be called from two threads: the
    query's vector search runs on a second connection in the same snapshot (`Beside`), so the server
    works on it while this one answers the lexical side's statements."""

    conn: Connection
    store: str
    store_root: Path
    settings: Mapping[str, str]
    indexed: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    # chunk id → its vector (as `vector_send` gives it) and → its sentences' vectors, read with the chunk's
    # row: the similarities and sentences of chunks already loaded cost no further statement
    vectors: dict[int, bytes | None] = field(default_factory=dict)
    sentences: dict[int, bytes | None] = field(default_factory=dict)
    # the options of the last vector search and the rows of the chunks it found, read in the same statement
    nearest_rows: tuple[SearchOptions | None, dict[int, ChunkRow]] = (None, {})
    beside: Beside | None = None  # the second connection the vector search runs on

    @property
    def terms(self) -> PostgresTerms:
        return PostgresTerms(self)

    def rows(self, statement: Any, parameters: Mapping[str, object] | None = None) -> list[Any]:
        """The rows of the SQLAlchemy statement `statement` (none for one that returns none, such as SET)."""
        with self.lock:
            result = self.conn.execute(statement, parameters)
            return list(result) if result.returns_rows else []

    def query(self, sql: str, values: Mapping[str, object]) -> list[tuple[Any, ...]]:
        """The rows of one of the `statements` with `values` (`_fetched`)."""
        with self.lock:
            return _fetched(_driver(self.conn), sql, values)

    def set_local(self, command: str) -> None:
        """Run a `SET LOCAL` command in this transaction and in the vector search's."""
        from sqlalchemy import text

        self.rows(text(command))
        if self.beside is not None:
            self.beside.set_local(command)

    def chunk_rows(self, chunk_ids: Sequence[int], options: SearchOptions) -> Iterable[ChunkRow]:
        near, read = self.nearest_rows
        if near == options and all(chunk in read for chunk in chunk_ids):  # the vector search read them
            return [read[chunk] for chunk in chunk_ids]
        sql = statements.chunk_rows(options.access is not None, options.kinds is not None)
        rows = self.query(sql, {"chunks": list(chunk_ids), **filter_values(options)})
        for row in rows:
            self.vectors[row[0]], self.sentences[row[0]] = row[13], row[14]
        return [row[:13] for row in rows]

    def sentence_blobs(self, chunks: Iterable[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        missing = []
        for chunk in chunks:
            if chunk not in self.sentences:
                missing.append(chunk)
            elif (blob := self.sentences[chunk]) is not None:
                found[chunk] = bytes(blob)
        if missing:
            rows = self.query(statements.SENTENCES, {"chunks": missing, "store": self.store})
            found.update((chunk, bytes(blob)) for chunk, blob in rows)
        return found

    def vector_search(self, embedder: Embedder) -> PgVectorSearch | None:
        if self.settings.get(VECTOR_MODEL) != pj.model_identity(embedder):
            return None
        return PgVectorSearch(self)


@dataclass
class Beside:
    """A second connection reading the snapshot `snapshot` of a projection's transaction (exported by
    its opening), for the vector search, so that the server searches vectors while the first connection
    answers the lexical side. It opens with its first statement, in that statement's round trip (`BEGIN`,
    `SET TRANSACTION SNAPSHOT`, the `SET LOCAL`s and the statement, pipelined), and is closed with the
    projection's transaction. Its statements take turns under its own lock."""

    engine: Engine
    snapshot: str
    commands: list[str] = field(default_factory=list)  # `SET LOCAL` commands sent as it opens
    opened: tuple[Connection, Any] | None = None  # the connection and its transaction
    closed: bool = False
    applied: str = ""  # the `SET LOCAL hnsw.…` settings in force
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set_local(self, command: str) -> None:
        """Run a `SET LOCAL` command in this transaction (as it opens, if it is not open yet)."""
        with self.lock:
            if self.opened is None:
                self.commands.append(command)
                return
            driver = _driver(self.opened[0])
            with _as_dbapi_errors(driver):
                driver.execute(command.encode())

    def rows(self, sql: str, values: Mapping[str, object] | None = None, *, settings: str = "") -> list[Any]:
        """The rows of the statement `sql` with `values` (`_fetched`), after the `SET LOCAL` statements in
        `settings` (unless in force)."""
        with self.lock:
            if self.closed:
                raise RuntimeError("the projection's read transaction has ended")
            if self.opened is None:
                if not re.fullmatch(r"[0-9A-Fa-f-]+", self.snapshot):
                    raise RuntimeError("the server exported a snapshot id of an unknown form")
                commands = [f"SET TRANSACTION SNAPSHOT '{self.snapshot}'",
                            f"SET LOCAL random_page_cost = {RANDOM_PAGE_COST}", *self.commands]  # fmt: skip
                commands += settings.split("; ") if settings else []
                conn, transaction, found = _connected(self.engine, commands, sql, values or {}, binary=True)
                self.opened, self.applied = (conn, transaction), settings
                return found
            driver = _driver(self.opened[0])
            if settings and settings != self.applied:
                with _as_dbapi_errors(driver):
                    driver.execute(settings.encode())
                self.applied = settings
            return _fetched(driver, sql, values or {})

    def close(self) -> None:
        """End the second transaction (waiting for a statement running on it)."""
        with self.lock:
            self.closed = True
            if self.opened is not None:
                _finish(*self.opened)


# The fewest candidates a search through the HNSW index considers: on the real model's vectors of real
# text (100,000), 40 found 0.968 of the exact 10, 100 found 0.989 for 1 ms more (docs/postgresql.md,
# "Why the HNSW recall falls").
MIN_EF_SEARCH = 100

# When two connections pack a query's postings (`PostgresTerms.own`): from this many query terms (a
# short query's take a few milliseconds, not worth a second round trip) in a store of this many chunks.
# Below it packing is cheap, and the second connection's share waits behind the vector search there:
# at 19,000 chunks the warm recall's p50 rose 0.8 ms; at 190,000 it moved within 1 ms and its p95 fell
# (42.5-55.2 -> 38.2-40.2 ms); at 1,000,000 its p50 fell 76.5-83.0 -> 69.4-72.3 ms (docs/postgresql.md).
SHARED_FROM = 4
SHARED_FROM_CHUNKS = 100_000


def hnsw_settings(take: int) -> str:
    """The `SET LOCAL` statements of a search through the HNSW index for the `take` nearest chunks."""
    return (f"SET LOCAL hnsw.ef_search = {max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, take))}; "
            "SET LOCAL hnsw.iterative_scan = relaxed_order")  # fmt: skip


@dataclass(frozen=True)
class PostgresTerms:
    """The postings rows of terms, packed as `index.postings` ranks them."""

    projection: PostgresProjection

    def own(self, terms: Sequence[str]) -> list[bytes | int | None]:
        """Each term's chunk count, and its postings unless it is in at least half of the chunks while
        another query term is proven to match fewer (`statements.OWN`): `rank` then leaves it out. With
        `SHARED_FROM` terms or more in a store of `SHARED_FROM_CHUNKS` chunks or more, the vector search's
        connection packs every other term's postings at the same time (the server spends most of a long
        query's time packing them)."""
        projection = self.projection
        # the terms that may match as prefixes: those `postings.rank` would look up with `prefixed`
        prefixes = [term for term in terms if not (len(term) == 1 and term.isascii()) and ord(term[-1]) < 0x10FFFF]
        total = postings.Stats.of(projection.settings).chunks
        values = {"store": projection.store, "terms": list(terms), "lows": prefixes,
                  "highs": [_after(term) for term in prefixes], "total": total}  # fmt: skip
        beside = projection.beside
        if beside is None or len(terms) < SHARED_FROM or total < SHARED_FROM_CHUNKS:
            found = projection.query(statements.OWN, {**values, "packed": list(terms)})
        else:
            theirs = _BACKGROUND.submit(copy_context().run, beside.rows, statements.OWN,
                                        {**values, "packed": list(terms[1::2])})  # fmt: skip
            ours = projection.query(statements.OWN, {**values, "packed": list(terms[::2])})
            packed = {term: entries for term, _chunks, entries in theirs.result() if entries is not None}
            found = [(term, chunks, packed.get(term, entries)) for term, chunks, entries in ours]
        read = {term: (int(chunks), entries) for term, chunks, entries in found}
        return [None if (row := read.get(term)) is None else row[0] if row[1] is None else _little_endian(row[1])
                for term in terms]  # fmt: skip

    def prefixed(self, term: str) -> list[bytes]:
        store = self.projection.store
        if ord(term[-1]) < 0x10FFFF:
            found = self.projection.query(statements.PREFIXED, {"store": store, "low": term, "high": _after(term)})
        else:
            values = {"store": store, "low": term, "length": len(term)}
            found = self.projection.query(statements.PREFIXED_TO_THE_END, values)
        return [_little_endian(packed) for _term, packed in found]


def _after(term: str) -> str:
    """The first string after every string that begins with `term` (whose last character is not the last)."""
    return term[:-1] + chr(ord(term[-1]) + 1)


@dataclass(frozen=True)
class PgVectorSearch:
    """Cosine search in the database (exact, or through the HNSW index when there is one)."""

    projection: PostgresProjection

    def nearest(self, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
        """In one statement (`statements.nearest`): the `take` nearest chunks (exactly, or through the index
        and then ordered exactly), the nearest of each record among them, and the rows of the best `records`
        of those that pass the filters (kept for `chunk_rows`); `take` grows while fewer records than wanted
        pass and the store holds more chunks."""
        from pgvector import Vector

        projection = self.projection
        assert projection.beside is not None
        sql = statements.nearest(options.access is not None, options.kinds is not None, projection.indexed)
        values = {"query": Vector(query_vector).to_text(), "store": projection.store, "records": records,
                  **filter_values(options)}  # fmt: skip
        take = records * 4
        while True:
            settings = hnsw_settings(take) if projection.indexed else ""
            read = projection.beside.rows(sql, {**values, "take": take}, settings=settings)
            found = [row for row in read if row[0] is not None]
            if len(found) >= records or read[0][-1] < take:  # enough records, or every chunk was found
                for row in found:
                    projection.sentences[row[0]] = row[13]
                projection.nearest_rows = (options, {row[0]: row[:13] for row in found})
                return Nearest([row[0] for row in found], [1.0 - float(row[14]) for row in found])
            take *= 4

    def similarities(self, query_vector: np.ndarray, chunks: Sequence[int]) -> tuple[list[int], list[float]]:
        import numpy as np

        projection = self.projection
        if all(chunk in projection.vectors for chunk in chunks):  # loaded with their rows: no statement
            read = [(chunk, vector) for chunk in chunks if (vector := projection.vectors[chunk]) is not None]
        else:
            rows = projection.query(statements.VECTORS, {"store": projection.store, "chunks": list(chunks)})
            read = [(int(chunk), vector) for chunk, vector in rows]
        if not read:
            return [], []
        matrix = np.frombuffer(b"".join(vector[_VECTOR_HEADER:] for _chunk, vector in read), dtype=">f4")
        matrix = matrix.reshape(len(read), -1).astype("<f4")  # the float32 product a directory store computes
        return [chunk for chunk, _vector in read], np.einsum("ij,j->i", matrix, query_vector).tolist()


_BIG_ENDIAN = [("chunk", ">i4"), ("count", ">u2"), ("length", ">u2")]
_VECTOR_HEADER = 4  # `vector_send`: dimensions and a reserved field (int16 each), then big-endian float32s


def _little_endian(packed: bytes) -> bytes:
    """Entries as `index.postings` reads them (little-endian), from the server's big-endian packing."""
    import numpy as np

    entries = np.frombuffer(packed, dtype=_BIG_ENDIAN)
    return entries.astype(postings.entry_dtype()).tobytes()
