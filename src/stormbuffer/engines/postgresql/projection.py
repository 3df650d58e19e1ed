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
of the chunks it finds. A hybrid recall waits for three round trips on the first connection, the first
of them with its `BEGIN`, and for none to end its transactions (docs/postgresql.md).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...index import postings
from ...index import projection as pj
from ..projection import ChunkRow, Nearest
from .projecting import VECTOR_MODEL
from .schema import SCHEMA
from .tables import HNSW_INDEX, TERMS_TABLE, Tables, tables

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection, Engine

    from ...core.stores import StorePaths
    from ...index.sync import Embedder
    from ...retrieval.hits import SearchOptions

MAX_EF_SEARCH = 1000  # pgvector's bound on hnsw.ef_search
FIRST_EF_SEARCH = 200  # set as the vector search's connection opens: four times a hybrid recall's 50 records
# PostgreSQL's default of 4 prices a random page read as a disk seek: with it the planner joins a
# recall's few chunks to their records by hashing every record (1.1 ms at 2,000 records) rather than
# looking each one up (0.2 ms). The projection a recall reads is cached; 1.1 is the usual SSD setting.
RANDOM_PAGE_COST = 1.1
# opens the vector search's connections (`Beside`) and ends reads' transactions; threads start lazily
_BACKGROUND = ThreadPoolExecutor(max_workers=4, thread_name_prefix="stormbuffer-pg-snapshot")


@contextmanager
def reading_store(paths: StorePaths, store: str, variable: str) -> Iterator[PostgresProjection]:
    """`reading` the projection of a PostgreSQL store whose database URL is in the environment variable
    `variable`; any database failure, during the read too, is a StoreError naming the variable."""
    from ...embedding import DIMENSION
    from .database import autocommit_engine_for, database_url, talking_to, up_to_date

    url = database_url(variable)
    with talking_to(variable):
        up_to_date(url)
        with reading(autocommit_engine_for(url), store, paths.root, dimension=DIMENSION) as projection:
            yield projection


def vectors_ready(paths: StorePaths, embedder: Embedder) -> bool:
    """Whether every chunk of the PostgreSQL store at `paths` that takes a vector has one from `embedder`'s
    model: one statement in autocommit (no ping, no transaction), which is all a read of a store with
    nothing waiting costs before its snapshot (`retrieval.prepare`)."""
    from sqlalchemy import exists, select

    from ...core.stores import read_config
    from ...embedding import DIMENSION
    from .database import one_statement

    config = read_config(paths)
    assert config.database is not None
    found = tables(DIMENSION)
    c, kept, store = found.chunks.c, found.settings.c, config.record_scope
    model, waiting = tuple(one_statement(config.database, select(
        select(kept.value).where(kept.store == store, kept.key == VECTOR_MODEL).scalar_subquery(),
        exists().where(c.store == store, c.embedding.is_(None), c.ordinal < _waiting_bound())))[0])  # fmt: skip
    return bool(model == pj.model_identity(embedder) and not waiting)


@contextmanager
def reading(engine: Engine, store: str, store_root: Path, *, dimension: int,
            exact: bool = False) -> Iterator[PostgresProjection]:  # fmt: skip
    """A read snapshot of the projection of `store` (its record scope) in `engine`'s database; `exact`
    searches vectors exactly even where an HNSW index exists."""
    found = tables(dimension)
    conn, _transaction, opened = _connected(engine, [], _opening(found, store, exact))
    beside = None
    try:
        kept, chunks, terms, pending, indexed, snapshot, _cost = opened
        settings = dict(kept or {})
        settings[postings.STATS] = json.dumps({"chunks": int(chunks or 0), "terms": int(terms or 0)})
        if VECTOR_MODEL in settings:
            settings[pj.VECTOR_PENDING] = str(pending or 0)
        projection = PostgresProjection(conn, store, store_root, settings, found, indexed=bool(indexed))
        projection.beside = beside = Beside(engine, snapshot, bool(indexed))
        yield projection
    finally:  # nothing was written: the transactions end (and their connections go back) off the reader's path
        _BACKGROUND.submit(_end, conn, beside)


def _end(conn: Connection, beside: Beside | None) -> None:
    """End a read: its vector search's transaction, then its own (rolled back as its connection is returned)."""
    try:
        if beside is not None:
            beside.close()
    finally:
        conn.close()


def _waiting_bound() -> Any:
    """The bound on a waiting chunk's ordinal written into the statement, as in the partial index's
    predicate: a bound parameter would leave a generic plan unable to use that index."""
    from sqlalchemy import literal_column

    from ...index.chunking import VECTOR_CHUNKS

    return literal_column(str(int(VECTOR_CHUNKS)))


_SNAPSHOT: dict[str, Any] = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}


def _connected(engine: Engine, commands: Sequence[str], statement: Any = None) -> tuple[Connection, Any, Any]:
    """A connection of `engine` in a READ ONLY, REPEATABLE READ transaction begun with `commands` and
    `statement` (`_pipelined`): the connection, its transaction and the row of `statement`. Nothing is
    sent before (no ping): when the server had dropped the pooled connection, this is tried once more
    on a new one."""
    from sqlalchemy.exc import DBAPIError

    for attempt in (1, 2):
        conn = engine.connect()
        try:
            transaction = conn.execution_options(**_SNAPSHOT).begin()
            return conn, transaction, _pipelined(conn, commands, statement)
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


def _pipelined(conn: Connection, commands: Sequence[str], statement: Any = None) -> Any:
    """Send `commands` (no parameters, no rows), then `statement`, in one round trip (psycopg's pipeline
    mode), behind the transaction's `BEGIN` when they are the first of it; the one row of `statement`.
    A failure is a DBAPIError, as through SQLAlchemy."""
    driver = conn.connection.driver_connection
    assert driver is not None
    with _as_dbapi_errors(driver), driver.pipeline(), driver.cursor() as cursor:
        for command in commands:
            driver.execute(command.encode())
        if statement is None:
            return None
        compiled = statement.compile(dialect=conn.dialect)
        cursor.execute(str(compiled), compiled.params)
        return cursor.fetchone()


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


def _opening(found: Tables, store: str, exact: bool) -> Any:
    """What a reader needs first, in one statement: the store's settings (a JSON object), its BM25
    statistics, how many chunks wait for a vector, whether the HNSW index answers, and the snapshot's
    id for the vector search's connection (`Beside`). It also prices
    random page reads as the cached projection costs them (`RANDOM_PAGE_COST`), for this transaction."""
    from sqlalchemy import func, literal, null, select

    c, kept, counted = found.chunks.c, found.settings.c, found.stats.c
    return select(
        select(func.json_object_agg(kept.key, kept.value)).where(kept.store == store).scalar_subquery(),
        select(counted.chunks).where(counted.store == store).scalar_subquery(),
        select(counted.terms).where(counted.store == store).scalar_subquery(),
        select(func.count()).where(c.store == store, c.embedding.is_(None), c.ordinal < _waiting_bound())
        .scalar_subquery(),
        null() if exact else func.to_regclass(literal(f"{SCHEMA}.{HNSW_INDEX}")),
        func.pg_export_snapshot(),
        func.set_config("random_page_cost", str(RANDOM_PAGE_COST), True),
    )  # fmt: skip


@dataclass
class PostgresProjection:
    """One read transaction on a PostgreSQL projection. Its methods may be called from two threads: the
    query's vector search runs on a second connection in the same snapshot (`Beside`), so the server
    works on it while this one answers the lexical side's statements."""

    conn: Connection
    store: str
    store_root: Path
    settings: Mapping[str, str]
    found: Tables
    indexed: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    # chunk id → (vector as `vector_send` gives it, sentence vectors), read with the chunk's row: the
    # similarities and sentences of chunks already loaded cost no further statement
    vectors: dict[int, tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    # the options of the last vector search and the rows of the chunks it found, read in the same statement
    nearest_rows: tuple[SearchOptions | None, dict[int, ChunkRow]] = (None, {})
    beside: Beside | None = None  # the second connection the vector search runs on

    @property
    def terms(self) -> PostgresTerms:
        return PostgresTerms(self)

    def rows(self, statement: Any, parameters: Mapping[str, object] | None = None) -> list[Any]:
        """The rows of `statement` (none for one that returns none, such as SET)."""
        with self.lock:
            result = self.conn.execute(statement, parameters)
            return list(result) if result.returns_rows else []

    def binary_rows(self, statement: Any) -> list[Any]:
        """The rows of `statement` (whose parameters psycopg adapts as they are) in PostgreSQL's binary
        format: `bytea` values (postings, vectors) come as their bytes, not as hex text to decode."""
        compiled = statement.compile(dialect=self.conn.dialect, compile_kwargs={"render_postcompile": True})
        driver = self.conn.connection.driver_connection
        assert driver is not None
        with self.lock, _as_dbapi_errors(driver), driver.cursor(binary=True) as cursor:
            cursor.execute(str(compiled), compiled.params)
            return cursor.fetchall()

    def set_local(self, command: str) -> None:
        """Run a `SET LOCAL` command in this transaction and in the vector search's."""
        from sqlalchemy import text

        self.rows(text(command))
        if self.beside is not None:
            self.beside.set_local(command)

    def chunk_rows(self, chunk_ids: Sequence[int], options: SearchOptions) -> Iterable[ChunkRow]:
        from sqlalchemy import select

        near, read = self.nearest_rows
        if near == options and all(chunk in read for chunk in chunk_ids):  # the vector search read them
            return [read[chunk] for chunk in chunk_ids]
        r = self.found.records.c
        statement = select(*_row_columns(self.found)).join_from(self.found.chunks, self.found.records)
        statement = _filtered(statement.where(self.found.chunks.c.id == _any(chunk_ids)), r, options)
        return self.keep(self.binary_rows(statement))

    def keep(self, rows: Iterable[Any]) -> list[ChunkRow]:
        """The `ChunkRow`s of rows of `_row_columns` (and more after them), keeping their vectors."""
        kept = []
        for row in rows:
            self.vectors[row[0]] = (row[13], row[14])
            kept.append(tuple(row[:13]))
        return kept

    def sentence_blobs(self, chunks: Iterable[int]) -> dict[int, bytes]:
        from sqlalchemy import select

        found: dict[int, bytes] = {}
        missing = []
        for chunk in chunks:
            if chunk not in self.vectors:
                missing.append(chunk)
            elif (blob := self.vectors[chunk][1]) is not None:
                found[chunk] = bytes(blob)
        if missing:
            c = self.found.chunks.c
            statement = select(c.id, c.sentence_vectors).where(c.id == _any(missing), c.sentence_vectors.is_not(None),
                                                                c.store == self.store)  # fmt: skip
            found.update((chunk, bytes(blob)) for chunk, blob in self.rows(statement))
        return found

    def vector_search(self, embedder: Embedder) -> PgVectorSearch | None:
        if self.settings.get(VECTOR_MODEL) != pj.model_identity(embedder):
            return None
        if self.beside is not None:
            self.beside.start()
        return PgVectorSearch(self)


@dataclass
class Beside:
    """A second connection reading the snapshot `snapshot` of a projection's transaction (exported by
    its opening), for the vector search. `start` opens it on a thread of its own while the query is
    embedded and the lexical side reads its rows; it is closed with the projection's transaction. Its
    statements take turns under its own lock."""

    engine: Engine
    snapshot: str
    indexed: bool
    commands: list[str] = field(default_factory=list)  # `SET LOCAL` commands sent as it opens
    opening: Future[Connection] | None = None
    closed: bool = False
    applied: str = ""  # the `SET LOCAL hnsw.…` settings in force
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Open the connection in the background (once)."""
        with self.lock:
            if self.opening is None and not self.closed:
                self.opening = _BACKGROUND.submit(self._open)

    def set_local(self, command: str) -> None:
        """Run a `SET LOCAL` command in this transaction (when it opens, if it is not open yet)."""
        from sqlalchemy import text

        with self.lock:
            if self.opening is None:
                self.commands.append(command)
                return
            self.opening.result().execute(text(command))

    def rows(self, statement: Any, *, settings: str = "") -> list[Any]:
        """The rows of `statement`, after the `SET LOCAL` statements in `settings` (unless in force)."""
        from sqlalchemy import text

        self.start()
        with self.lock:
            if self.closed or self.opening is None:
                raise RuntimeError("the projection's read transaction has ended")
            conn = self.opening.result()
            if settings and settings != self.applied:
                conn.execute(text(settings))
                self.applied = settings
            return list(conn.execute(statement))

    def _open(self) -> Connection:
        if not re.fullmatch(r"[0-9A-Fa-f-]+", self.snapshot):
            raise RuntimeError("the server exported a snapshot id of an unknown form")
        commands = [f"SET TRANSACTION SNAPSHOT '{self.snapshot}'", f"SET LOCAL random_page_cost = {RANDOM_PAGE_COST}",
                    *self.commands]  # fmt: skip
        if self.indexed:
            self.applied = hnsw_settings(FIRST_EF_SEARCH)
            commands += self.applied.split("; ")
        return _connected(self.engine, commands)[0]

    def close(self) -> None:
        """End the second transaction (waiting for its opening or a statement running on it)."""
        with self.lock:
            self.closed = True
            if self.opening is not None and not self.opening.cancel():
                try:
                    conn = self.opening.result()
                except Exception:  # its failure was the vector search's to report
                    return
                conn.close()


# The fewest candidates a search through the HNSW index considers: on the real model's vectors of real
# text (100,000), 40 found 0.968 of the exact 10, 100 found 0.989 for 1 ms more (docs/postgresql.md,
# "Why the HNSW recall falls").
MIN_EF_SEARCH = 100


def hnsw_settings(take: int) -> str:
    """The `SET LOCAL` statements of a search through the HNSW index for the `take` nearest chunks."""
    return (f"SET LOCAL hnsw.ef_search = {max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, take))}; "
            "SET LOCAL hnsw.iterative_scan = relaxed_order")  # fmt: skip


@dataclass(frozen=True)
class PostgresTerms:
    """The postings rows of terms, packed as `index.postings` ranks them."""

    projection: PostgresProjection

    def own(self, terms: Sequence[str]) -> list[bytes | int | None]:
        """In one statement: each term's chunk count, and its postings unless it is in at least half of the
        chunks while another query term is proven to match fewer (`_OWN`): `rank` then leaves it out."""
        from sqlalchemy import Integer, Text, bindparam, text
        from sqlalchemy.dialects.postgresql import ARRAY

        projection = self.projection
        # the terms that may match as prefixes: those `postings.rank` would look up with `prefixed`
        prefixes = [term for term in terms if not (len(term) == 1 and term.isascii()) and ord(term[-1]) < 0x10FFFF]
        statement = text(_OWN).bindparams(
            bindparam("store", projection.store, Text), bindparam("terms", list(terms), ARRAY(Text)),
            bindparam("lows", prefixes, ARRAY(Text)),
            bindparam("highs", [_after(term) for term in prefixes], ARRAY(Text)),
            bindparam("total", postings.Stats.of(projection.settings).chunks, Integer))  # fmt: skip
        found = {term: (int(chunks), packed) for term, chunks, packed in projection.binary_rows(statement)}
        return [None if (row := found.get(term)) is None else row[0] if row[1] is None else _little_endian(row[1])
                for term in terms]  # fmt: skip

    def prefixed(self, term: str) -> list[bytes]:
        from sqlalchemy import and_, func

        table = self.projection.found.postings
        p = table.c
        if ord(term[-1]) < 0x10FFFF:
            where = and_(p.store == self.projection.store, p.term > term, p.term < _after(term))
        else:
            where = and_(p.store == self.projection.store, p.term > term, func.left(p.term, len(term)) == term)
        found = self.projection.rows(_packed_entries(table, where))
        return [_little_endian(packed) for _term, packed in found]


def _after(term: str) -> str:
    """The first string after every string that begins with `term` (whose last character is not the last)."""
    return term[:-1] + chr(ord(term[-1]) + 1)


# One posting as 8 big-endian bytes: the chunk id, then the low two bytes of its (non-negative) count and length.
_PACKED = "int4send(chunk::int4) || substring(int4send(count) from 3 for 2) || substring(int4send(length) from 3 for 2)"
# The query terms' chunk counts and postings (`PostgresTerms.own`). A term's postings are packed (as
# `_packed_entries` packs them) only if it is in fewer than half of the `total` chunks or no other term
# is proven to be: a term of the index that is (`own`), or a term of none whose prefixed terms are in
# fewer than half of the chunks together (`prefixed`: their sum bounds the chunks it matches from above).
_OWN = f"""
WITH own AS (
  SELECT term, chunks FROM {SCHEMA}.{TERMS_TABLE} WHERE store = :store AND term = ANY(:terms)
), prefixed AS (
  SELECT sum(t.chunks) AS chunks FROM unnest(CAST(:lows AS text[]), CAST(:highs AS text[])) AS q (low, high)
  JOIN {SCHEMA}.{TERMS_TABLE} AS t ON t.store = :store AND t.term > q.low COLLATE "C" AND t.term < q.high COLLATE "C"
  WHERE q.low NOT IN (SELECT term FROM own) GROUP BY q.low
), proven AS (
  SELECT EXISTS (SELECT FROM own WHERE 2 * chunks < :total) OR EXISTS (SELECT FROM prefixed WHERE 2 * chunks < :total)
    AS rarer
)
SELECT own.term, own.chunks, CASE WHEN 2 * own.chunks < :total OR NOT (SELECT rarer FROM proven) THEN
  (SELECT string_agg({_PACKED}, ''::bytea ORDER BY chunk) FROM {SCHEMA}.projection_postings AS p
   WHERE p.store = :store AND p.term = own.term) END
FROM own
"""


@dataclass(frozen=True)
class PgVectorSearch:
    """Cosine search in the database (exact, or through the HNSW index when there is one)."""

    projection: PostgresProjection

    def nearest(self, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
        """In one statement: the `take` nearest chunks (exactly, or through the index and then ordered
        exactly), the nearest of each record among them, and the rows of the best `records` of those
        (kept for `chunk_rows`); `take` grows while fewer records than wanted come of it."""
        from sqlalchemy import func, select
        from sqlalchemy.dialects.postgresql import distinct_on

        projection = self.projection
        chunks, records_table = projection.found.chunks, projection.found.records
        c = chunks.c
        distance = c.embedding.cosine_distance(query_vector).label("distance")
        base = _filtered(select(c.id, c.record_id, distance).join_from(chunks, records_table)
                         .where(c.store == projection.store, c.embedding.is_not(None)), records_table.c,
                         options)  # fmt: skip
        take = records * 4
        assert projection.beside is not None
        while True:
            settings = ""
            if projection.indexed:
                settings = hnsw_settings(take)
                near = base.order_by(distance).limit(take).cte("near")
            else:
                near = base.order_by(distance, c.id).limit(take).cte("near")
            each = (select(near).ext(distinct_on(near.c.record_id))
                    .order_by(near.c.record_id, near.c.distance, near.c.id).subquery("each"))  # fmt: skip
            best = select(each).order_by(each.c.distance, each.c.id).limit(records).subquery("best")
            statement = (select(*_row_columns(projection.found), best.c.distance,
                                select(func.count()).select_from(near).scalar_subquery())
                         .select_from(best).join(chunks, c.id == best.c.id)
                         .join(records_table, (records_table.c.store == c.store) & (records_table.c.id == c.record_id))
                         .order_by(best.c.distance, best.c.id))  # only the rows kept are joined  # fmt: skip
            found = projection.beside.rows(statement, settings=settings)
            if len(found) >= records or not found or found[0][-1] < take:
                rows = projection.keep(found)
                projection.nearest_rows = (options, {row[0]: row for row in rows})
                return Nearest([row[0] for row in rows], [1.0 - float(row[-2]) for row in found])
            take *= 4

    def similarities(self, query_vector: np.ndarray, chunks: Sequence[int]) -> tuple[list[int], list[float]]:
        import numpy as np
        from sqlalchemy import LargeBinary, func, select

        projection = self.projection
        if all(chunk in projection.vectors for chunk in chunks):  # loaded with their rows: no statement
            read = [(chunk, vector) for chunk in chunks if (vector := projection.vectors[chunk][0]) is not None]
        else:
            c = projection.found.chunks.c
            statement = (select(c.id, func.vector_send(c.embedding, type_=LargeBinary))
                         .where(c.store == projection.store, c.id == _any(chunks), c.embedding.is_not(None))
                         .order_by(c.id))  # fmt: skip
            read = [(int(chunk), vector) for chunk, vector in projection.rows(statement)]
        if not read:
            return [], []
        matrix = np.frombuffer(b"".join(vector[_VECTOR_HEADER:] for _chunk, vector in read), dtype=">f4")
        matrix = matrix.reshape(len(read), -1).astype("<f4")  # the float32 product a directory store computes
        return [chunk for chunk, _vector in read], np.einsum("ij,j->i", matrix, query_vector).tolist()


def _row_columns(found: Tables) -> list[Any]:
    """The columns of a `ChunkRow`, then the chunk's vector (as `vector_send` gives it) and its sentences'."""
    from sqlalchemy import LargeBinary, func

    c, r = found.chunks.c, found.records.c
    return [c.id, c.record_id, c.ordinal, c.text, r.title, r.kind, r.scope, r.status, r.access, r.path, r.aliases,
            r.sources, r.created_at, func.vector_send(c.embedding, type_=LargeBinary), c.sentence_vectors]  # fmt: skip


def _filtered(statement: Any, r: Any, options: SearchOptions) -> Any:
    """`statement` limited to records passing the options' filters (status, scope, access, kind)."""
    statement = statement.where(r.status.in_(list(options.statuses)), r.scope.in_(list(options.scopes or ())))
    if options.access is not None:
        statement = statement.where(r.access.in_(list(options.access)))
    if options.kinds is not None:
        statement = statement.where(r.kind.in_(list(options.kinds)))
    return statement


def _any(values: Iterable[int]) -> Any:
    """`= ANY(:array)`: one parameter however many ids (an IN list binds each)."""
    from sqlalchemy import BigInteger, any_, literal
    from sqlalchemy.dialects.postgresql import ARRAY

    return any_(literal(list(values), ARRAY(BigInteger)))


_BIG_ENDIAN = [("chunk", ">i4"), ("count", ">u2"), ("length", ">u2")]
_VECTOR_HEADER = 4  # `vector_send`: dimensions and a reserved field (int16 each), then big-endian float32s


def _packed_entries(table: Any, where: Any) -> Any:
    """The postings rows matching `where` packed by the server: per term, the term and one bytea of
    big-endian (chunk int32, count uint16, length uint16) in chunk order: one value to read, not a row each."""
    from sqlalchemy import literal_column, select

    aggregate: Any = literal_column(f"string_agg({_PACKED}, ''::bytea ORDER BY chunk)")
    return select(table.c.term, aggregate).where(where).group_by(table.c.term).order_by(table.c.term)


def _little_endian(packed: bytes) -> bytes:
    """Entries as `index.postings` reads them (little-endian), from the server's big-endian packing."""
    import numpy as np

    entries = np.frombuffer(packed, dtype=_BIG_ENDIAN)
    return entries.astype(postings.entry_dtype()).tobytes()
