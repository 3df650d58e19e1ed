"""The read side of a PostgreSQL projection, behind `engines.projection`.

A reader works in one REPEATABLE READ, READ ONLY transaction: a consistent snapshot, as a SQLite
read transaction is. Postings come back as rows and are packed into the entries `index.postings`
ranks, so BM25 is computed by the same code as for a directory store. Vectors are searched in the
database: exactly (ordered by cosine distance, then chunk id, which no index can serve) until an
HNSW index exists (`projecting.ensure_vector_index`), then through it with pgvector's iterative scan,
so that filters on scopes, status, access and kind still leave enough rows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...index import postings
from ...index import projection as pj
from ..projection import ChunkRow, Nearest
from .projecting import VECTOR_MODEL
from .schema import SCHEMA
from .tables import HNSW_INDEX, Tables, tables

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Connection, Engine

    from ...core.stores import StorePaths
    from ...index.sync import Embedder
    from ...retrieval.hits import SearchOptions

MAX_EF_SEARCH = 1000  # pgvector's bound on hnsw.ef_search


@contextmanager
def reading_store(paths: StorePaths, store: str, variable: str) -> Iterator[PostgresProjection]:
    """`reading` the projection of a PostgreSQL store whose database URL is in the environment variable
    `variable`; any database failure, during the read too, is a StoreError naming the variable."""
    from ...embedding import DIMENSION
    from .database import database_url, engine_for, talking_to

    with talking_to(variable), reading(engine_for(database_url(variable)), store, paths.root,
                                       dimension=DIMENSION) as projection:  # fmt: skip
        yield projection


@contextmanager
def reading(engine: Engine, store: str, store_root: Path, *, dimension: int,
            exact: bool = False) -> Iterator[PostgresProjection]:  # fmt: skip
    """A read snapshot of the projection of `store` (its record scope) in `engine`'s database; `exact`
    searches vectors exactly even where an HNSW index exists."""
    found = tables(dimension)
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        with conn.begin():
            kept, chunks, terms, pending, indexed = conn.execute(_opening(found, store, exact)).one()
            settings = dict(kept or {})
            settings[postings.STATS] = json.dumps({"chunks": int(chunks or 0), "terms": int(terms or 0)})
            if VECTOR_MODEL in settings:
                settings[pj.VECTOR_PENDING] = str(pending or 0)
            yield PostgresProjection(conn, store, store_root, settings, found, indexed=bool(indexed))


def _opening(found: Tables, store: str, exact: bool) -> Any:
    """What a reader needs first, in one statement: the store's settings (a JSON object), its BM25
    statistics, how many chunks wait for a vector, and whether the HNSW index answers."""
    from sqlalchemy import func, literal, null, select

    from ...index.chunking import VECTOR_CHUNKS

    c, kept, counted = found.chunks.c, found.settings.c, found.stats.c
    return select(
        select(func.json_object_agg(kept.key, kept.value)).where(kept.store == store).scalar_subquery(),
        select(counted.chunks).where(counted.store == store).scalar_subquery(),
        select(counted.terms).where(counted.store == store).scalar_subquery(),
        select(func.count()).where(c.store == store, c.embedding.is_(None), c.ordinal < VECTOR_CHUNKS)
        .scalar_subquery(),
        null() if exact else func.to_regclass(literal(f"{SCHEMA}.{HNSW_INDEX}")),
    )  # fmt: skip


@dataclass
class PostgresProjection:
    """One read transaction on a PostgreSQL projection. Its methods may be called from two threads (the
    query's vector search runs beside the lexical side): they take turns on the one connection."""

    conn: Connection
    store: str
    store_root: Path
    settings: Mapping[str, str]
    found: Tables
    indexed: bool
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def terms(self) -> PostgresTerms:
        return PostgresTerms(self)

    def rows(self, statement: Any, parameters: Mapping[str, object] | None = None) -> list[Any]:
        """The rows of `statement` (none for one that returns none, such as SET)."""
        with self.lock:
            result = self.conn.execute(statement, parameters)
            return list(result) if result.returns_rows else []

    def chunk_rows(self, chunk_ids: Sequence[int], options: SearchOptions) -> Iterable[ChunkRow]:
        from sqlalchemy import select

        c, r = self.found.chunks.c, self.found.records.c
        statement = select(
            c.id,
            c.record_id,
            c.ordinal,
            c.text,
            r.title,
            r.kind,
            r.scope,
            r.status,
            r.access,
            r.path,
            r.aliases,
            r.sources,
            r.created_at,
        ).join_from(self.found.chunks, self.found.records)
        statement = _filtered(statement.where(c.id == _any(chunk_ids)), r, options)  # fmt: skip
        return self.rows(statement)

    def sentence_blobs(self, chunks: Iterable[int]) -> dict[int, bytes]:
        from sqlalchemy import select

        wanted = list(chunks)
        if not wanted:
            return {}
        c = self.found.chunks.c
        statement = select(c.id, c.sentence_vectors).where(c.id == _any(wanted), c.sentence_vectors.is_not(None),
                                                            c.store == self.store)  # fmt: skip
        return {chunk: bytes(blob) for chunk, blob in self.rows(statement)}

    def vector_search(self, embedder: Embedder) -> PgVectorSearch | None:
        if self.settings.get(VECTOR_MODEL) != pj.model_identity(embedder):
            return None
        return PgVectorSearch(self)


@dataclass(frozen=True)
class PostgresTerms:
    """The postings rows of terms, packed as `index.postings` ranks them."""

    projection: PostgresProjection

    def own(self, terms: Sequence[str]) -> list[bytes | None]:
        from sqlalchemy import Text, and_, any_, literal
        from sqlalchemy.dialects.postgresql import ARRAY

        table = self.projection.found.postings
        p = table.c
        wanted = any_(literal(list(terms), ARRAY(Text(collation="C"))))
        found = dict(self.projection.rows(_packed_entries(table, and_(p.store == self.projection.store,
                                                                      p.term == wanted))))  # fmt: skip
        return [None if (packed := found.get(term)) is None else _little_endian(packed) for term in terms]

    def prefixed(self, term: str) -> list[bytes]:
        from sqlalchemy import and_, func

        table = self.projection.found.postings
        p = table.c
        if ord(term[-1]) < 0x10FFFF:
            after = term[:-1] + chr(ord(term[-1]) + 1)
            where = and_(p.store == self.projection.store, p.term > term, p.term < after)
        else:
            where = and_(p.store == self.projection.store, p.term > term, func.left(p.term, len(term)) == term)
        found = self.projection.rows(_packed_entries(table, where))
        return [_little_endian(packed) for _term, packed in found]


@dataclass(frozen=True)
class PgVectorSearch:
    """Cosine search in the database (exact, or through the HNSW index when there is one)."""

    projection: PostgresProjection

    def nearest(self, query_vector: np.ndarray, options: SearchOptions, records: int) -> Nearest:
        from sqlalchemy import select, text

        projection = self.projection
        c, r = projection.found.chunks.c, projection.found.records.c
        distance = c.embedding.cosine_distance(query_vector).label("distance")
        base = _filtered(select(c.id, c.record_id, distance).join_from(projection.found.chunks,
                         projection.found.records).where(c.store == projection.store, c.embedding.is_not(None)), r,
                         options)  # fmt: skip
        take = records * 4
        while True:
            if projection.indexed:
                projection.rows(text(f"SET LOCAL hnsw.ef_search = {max(40, min(MAX_EF_SEARCH, take))}"))
                projection.rows(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
                found = projection.rows(base.order_by(distance).limit(take))
                found.sort(key=lambda row: (row[2], row[0]))
            else:
                found = projection.rows(base.order_by(distance, c.id).limit(take))
            chunks: list[int] = []
            similarities: list[float] = []
            seen: set[str] = set()
            for chunk, record, away in found:
                if record not in seen and len(seen) < records:
                    seen.add(record)
                    chunks.append(int(chunk))
                    similarities.append(1.0 - float(away))
            if len(seen) >= records or len(found) < take:
                return Nearest(chunks, similarities)
            take *= 4

    def similarities(self, query_vector: np.ndarray, chunks: Sequence[int]) -> tuple[list[int], list[float]]:
        from sqlalchemy import select

        c = self.projection.found.chunks.c
        statement = (select(c.id, c.embedding.cosine_distance(query_vector))
                     .where(c.store == self.projection.store, c.id == _any(chunks), c.embedding.is_not(None))
                     .order_by(c.id))  # fmt: skip
        rows = self.projection.rows(statement)
        return [int(chunk) for chunk, _away in rows], [1.0 - float(away) for _chunk, away in rows]


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


def _packed_entries(table: Any, where: Any) -> Any:
    """The postings rows matching `where` packed by the server: per term, the term and one bytea of
    big-endian (chunk int32, count uint16, length uint16) in chunk order: one value to read, not a row each."""
    from sqlalchemy import literal_column, select

    low16 = "substring(int4send({}) from 3 for 2)"  # the low two bytes of a (non-negative) int4
    aggregate: Any = literal_column(f"string_agg(int4send(chunk::int4) || {low16.format('count')} || "
                               f"{low16.format('length')}, ''::bytea ORDER BY chunk)")  # fmt: skip
    return select(table.c.term, aggregate).where(where).group_by(table.c.term).order_by(table.c.term)


def _little_endian(packed: bytes) -> bytes:
    """Entries as `index.postings` reads them (little-endian), from the server's big-endian packing."""
    import numpy as np

    entries = np.frombuffer(packed, dtype=_BIG_ENDIAN)
    return entries.astype(postings.entry_dtype()).tobytes()
