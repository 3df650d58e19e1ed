"""Keeping a PostgreSQL projection up to date: one record at a time, inside the writer's transaction.

`project` replaces a record's rows (chunks, postings, vectors) and `unproject` removes them, both in
the caller's transaction, so every server reading the database sees a write together with its
projection. Chunking and the terms are exactly the directory store's (`index.sync.record_chunks`,
`index.postings.weighted_terms`), so the same records give the same BM25 statistics.

Vector search is exact (a sequential scan) until the database holds `HNSW_FROM` vectors;
`ensure_vector_index` then builds an HNSW index (`vector_cosine_ops`), which searches use from then
on. It is built when an embedding step leaves no text waiting (`embed_store`), in one pass over every
vector rather than grown vector by vector through a bulk fill.

A fill (`fill_vectors`) takes its rows with `FOR UPDATE SKIP LOCKED` and sets their vectors in one
statement, in pgvector's binary form.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...index import postings
from ...index.sync import _chunk_vectors, record_chunks
from .schema import SCHEMA
from .tables import HNSW_INDEX, Tables, tables

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ...core.records import Record
    from ...core.stores import StorePaths
    from ...index.sync import Embedder, SyncReport

HNSW_FROM = 5_000  # vectors from which an HNSW index answers instead of an exact scan (docs/postgresql.md)
# The HNSW graph's degree and its candidates while building: at a million records 16 / 64 found 0.949 of
# the exact 10 nearest (ef_search 100), 32 / 128 found 0.987 for a build 3.3 times as long (docs/postgresql.md)
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 128
HNSW_KB_PER_VECTOR = 4  # memory an HNSW build needs per vector (a 384-d vector and its neighbour lists), generous
HNSW_MEMORY_CAP_KB = 1024 * 1024  # at most 1 GiB for a build; past it pgvector finishes the graph on disk
VECTOR_MODEL = "vector_model"  # the model that made the vectors (`index.projection.model_identity`)
# The fields of `index.sync.record_chunks`, in order.
CHUNK_FIELDS = ("record_id", "ordinal", "heading", "text", "embed_text", "retrieval_text", "token_count", "word_count",
                "embed_hash")  # fmt: skip


def project(conn: Connection, store: str, items: Sequence[tuple[str, Record]], *, dimension: int,
            count_tokens: Callable[[str], int], embedder: Embedder | None = None) -> int:  # fmt: skip
    """Replace the projection of these (store-relative path, record) items of `store` (its record scope)
    in the caller's transaction, with vectors when `embedder` is given; returns the chunks written."""
    from sqlalchemy import insert

    from ...index import projection as pj
    from ...index.chunking import VECTOR_CHUNKS

    found = tables(dimension)
    unproject(conn, store, [record.id for _path, record in items], dimension=dimension)
    if not items:
        return 0
    conn.execute(insert(found.records), [
        {"store": store, "id": record.id, "scope": record.scope, "path": path, "title": record.title,
         "kind": record.kind, "status": record.status, "access": record.access,
         "created_at": record.created_at.render(), "aliases": _json(list(record.aliases)),
         "sources": _json([source.to_json() for source in record.sources])}
        for path, record in items
    ])  # fmt: skip
    rows = [row for path, record in items for row in record_chunks(record, path, count_tokens)]
    if not rows:
        return 0
    weighted = [postings.weighted_terms(row[5]) for row in rows]
    values: list[dict[str, Any]] = [
        {
            **dict(zip(CHUNK_FIELDS, row, strict=True)),
            "store": store,
            "length": length,
            "embedding": None,
            "sentence_vectors": None,
        }
        for row, (_counts, length) in zip(rows, weighted, strict=True)
    ]
    if embedder is not None:
        wanted = [position for position, row in enumerate(rows) if row[1] < VECTOR_CHUNKS]
        if wanted:
            matrix, sentences = _chunk_vectors(embedder, [(rows[at][4], rows[at][3]) for at in wanted])
            for at, vector, blob in zip(wanted, matrix, sentences, strict=True):
                values[at]["embedding"], values[at]["sentence_vectors"] = vector, blob
            _set(conn, found, store, VECTOR_MODEL, pj.model_identity(embedder))
    ids = conn.execute(insert(found.chunks).returning(found.chunks.c.id, sort_by_parameter_order=True), values)
    _copy_postings(conn, found, store, zip(ids.scalars(), weighted, strict=True))
    count_terms(conn, found, store, Counter(term for counts, _length in weighted for term in counts))
    _count(conn, found, store, len(rows), sum(length for _counts, length in weighted))
    return len(rows)


def _copy_postings(conn: Connection, found: Tables, store: str,
                   chunks: Iterable[tuple[int, tuple[Counter[str], int]]]) -> None:  # fmt: skip
    """Write the postings rows of these (chunk id, (weighted term counts, weighted length)) with COPY:
    one stream, not a row of parameters per posting (a record of a few chunks has hundreds of them)."""
    table = found.postings
    columns = ", ".join(column.name for column in table.columns)
    driver = conn.connection.driver_connection  # the psycopg connection of this transaction
    assert driver is not None
    with driver.cursor() as cursor, cursor.copy(f"COPY {SCHEMA}.{table.name} ({columns}) FROM STDIN") as copy:
        for chunk_id, (counts, length) in chunks:
            stored = min(length, postings.MAX_COUNT)
            for term, count in counts.items():
                copy.write_row((store, term, chunk_id, min(count, postings.MAX_COUNT), stored))


def unproject(conn: Connection, store: str, record_ids: Sequence[str], *, dimension: int) -> None:
    """Remove these records' projection (chunks and postings follow) in the caller's transaction."""
    from sqlalchemy import delete, func, select

    if not record_ids:
        return
    found = tables(dimension)
    chunks, records = found.chunks, found.records
    gone = conn.execute(select(func.count(), func.coalesce(func.sum(chunks.c.length), 0))
                        .where(chunks.c.store == store, chunks.c.record_id.in_(record_ids))).one()  # fmt: skip
    if gone[0]:
        p = found.postings.c
        held = conn.execute(select(p.term, func.count()).join_from(found.postings, chunks, chunks.c.id == p.chunk)
                            .where(chunks.c.store == store, chunks.c.record_id.in_(record_ids))
                            .group_by(p.term))  # fmt: skip
        count_terms(conn, found, store, {term: -int(number) for term, number in held})
    conn.execute(delete(records).where(records.c.store == store, records.c.id.in_(record_ids)))
    if gone[0]:
        _count(conn, found, store, -int(gone[0]), -int(gone[1]))


def fill_vectors(conn: Connection, store: str, embedder: Embedder, *, dimension: int, limit: int | None = None,
                 defer: bool = False) -> tuple[int, int]:  # fmt: skip
    """Embed up to `limit` of the store's chunks that have no vector yet (every chunk again when another
    model made the others), shortest text first as a directory store does (similar lengths share a
    step: the model pads less), in the caller's transaction. With `defer`, more than `limit` waiting are all
    left (for a background thread). Returns how many were embedded and how many still wait (0 when none
    is left; rows another process is embedding at the same moment are skipped, not waited for)."""
    from sqlalchemy import func, select, update

    from ...index import projection as pj
    from ...index.chunking import VECTOR_CHUNKS

    found = tables(dimension)
    c, kept = found.chunks.c, found.settings.c
    identity = pj.model_identity(embedder)
    made_by = conn.execute(select(kept.value).where(kept.store == store, kept.key == VECTOR_MODEL)).scalar()
    if made_by != identity:
        if made_by is not None:
            conn.execute(update(found.chunks).where(c.store == store).values(embedding=None, sentence_vectors=None))
        _set(conn, found, store, VECTOR_MODEL, identity)
    without = (c.store == store, c.embedding.is_(None), c.ordinal < VECTOR_CHUNKS)
    waiting = (select(c.id, c.embed_text, c.text).where(*without).order_by(func.length(c.embed_text), c.id)
               .limit(None if limit is None else limit + 1).with_for_update(skip_locked=True))  # fmt: skip
    rows = conn.execute(waiting).all()
    more = limit is not None and len(rows) > limit

    def left() -> int:  # counted only when there are more than `limit`
        return int(conn.execute(select(func.count()).where(*without)).scalar() or 0) if more else 0

    if more and defer:
        return 0, left()
    rows = rows[:limit]
    if not rows:
        return 0, 0
    matrix, sentences = _chunk_vectors(embedder, [(embed_text, text) for _id, embed_text, text in rows])
    _write_vectors(conn, found, [row[0] for row in rows], matrix, sentences)
    return len(rows), left()


def _write_vectors(conn: Connection, found: Tables, ids: list[int], matrix: Any, sentences: list[bytes | None]) -> None:
    """Set these chunks' vectors in one statement: three arrays unnested by the server, the vectors in
    pgvector's binary form (not as text, nor a statement per row)."""
    from psycopg.types import TypeInfo

    driver = conn.connection.driver_connection  # the psycopg connection of this transaction
    assert driver is not None
    info = TypeInfo.fetch(driver, "vector")
    assert info is not None  # the store's tables hold vectors: the extension is there
    with driver.cursor(binary=True) as cursor:
        info.register(cursor)  # for this cursor only: the pooled connection stays as it was
        cursor.adapters.register_dumper(_Vector, _vector_dumper(info.oid))
        cursor.execute(
            f"UPDATE {SCHEMA}.{found.chunks.name} AS c SET embedding = f.embedding, sentence_vectors = f.sentences "
            "FROM unnest(%b::bigint[], %b::vector[], %b::bytea[]) AS f(id, embedding, sentences) WHERE c.id = f.id",
            (ids, [_Vector(vector) for vector in matrix], sentences),
        )


class _Vector(bytes):
    """A vector in pgvector's binary form: its dimension, a zero, then big-endian float32 values."""

    def __new__(cls, vector: Any) -> _Vector:
        import struct

        import numpy as np

        values = np.asarray(vector, dtype=">f4")
        return super().__new__(cls, struct.pack(">HH", len(values), 0) + values.tobytes())


def _vector_dumper(oid: int) -> type[Any]:
    """A psycopg dumper sending a `_Vector` as it is, typed as the database's `vector`."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return bytes(obj)

    VectorDumper.oid = oid
    return VectorDumper


def embed_store(paths: StorePaths, embedder: Embedder, *, limit: int | None = None,
                defer: bool = False) -> SyncReport:  # fmt: skip
    """`fill_vectors` for the PostgreSQL store at `paths`, in a transaction of its own, as a `SyncReport`
    (`embedded`, `pending`; `vector_projection_incomplete` when texts are left). The HNSW index is built
    once no text waits and the database is past its threshold: in one pass over every vector, not
    maintained vector by vector through a fill."""
    from ...core.stores import read_config
    from ...embedding.constants import DIMENSION
    from ...embedding.errors import EmbeddingFailed
    from ...index.sync import SyncReport
    from .database import connection

    config = read_config(paths)
    assert config.database is not None
    try:
        with connection(config.database) as conn:
            embedded, pending = fill_vectors(conn, config.record_scope, embedder, dimension=DIMENSION, limit=limit,
                                             defer=defer)  # fmt: skip
            if not pending:
                ensure_vector_index(conn)
    except (ValueError, EmbeddingFailed):  # the model failed: nothing of this step is kept
        return SyncReport(vector_failure="embedding_execution_failed")
    return SyncReport(embedded=embedded, pending=pending,
                      vector_failure="vector_projection_incomplete" if pending else None)  # fmt: skip


def ensure_vector_index(
    conn: Connection, *, at_least: int | None = None, m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION
) -> bool:
    """Build the HNSW index (graph degree `m`, candidates while building `ef_construction`) once the
    projection holds `at_least` (`HNSW_FROM`) vectors; True when it exists. The build gets the memory
    its graph needs (`maintenance_work_mem`, raised for this transaction only), so that it stays in
    memory and can use the server's parallel workers."""
    from sqlalchemy import text

    name = f"{SCHEMA}.{HNSW_INDEX}"
    if conn.execute(text("SELECT to_regclass(:name)"), {"name": name}).scalar() is not None:
        return True
    vectors = conn.execute(text(f"SELECT count(*) FROM {SCHEMA}.projection_chunks WHERE embedding IS NOT NULL"))
    count = int(vectors.scalar() or 0)
    if count < (HNSW_FROM if at_least is None else at_least):
        return False
    wanted_kb = min(HNSW_MEMORY_CAP_KB, count * HNSW_KB_PER_VECTOR)
    current_kb = conn.execute(text("SELECT setting::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'"))
    if wanted_kb > int(current_kb.scalar() or 0):
        conn.execute(text(f"SET LOCAL maintenance_work_mem = '{wanted_kb}kB'"))
    conn.execute(text(f"CREATE INDEX IF NOT EXISTS {HNSW_INDEX} ON {SCHEMA}.projection_chunks "
                      f"USING hnsw (embedding vector_cosine_ops) WITH (m = {int(m)}, "
                      f"ef_construction = {int(ef_construction)})"))  # fmt: skip
    return True


def refresh_statistics(conn: Connection, dimension: int) -> None:
    """ANALYZE the projection's tables, in the caller's transaction: after a bulk write the planner
    would otherwise plan recalls on row counts from before it (nested loops over thousands of rows)
    until autovacuum's next analyze."""
    from sqlalchemy import text

    found = tables(dimension)
    names = ", ".join(f"{SCHEMA}.{table.name}" for table in (found.records, found.chunks, found.postings, found.terms))
    conn.execute(text(f"ANALYZE {names}"))


def _count(conn: Connection, found: Tables, store: str, chunks: int, terms: int) -> None:
    """Add to the store's chunk count and total weighted length (the BM25 statistics)."""
    from sqlalchemy.dialects.postgresql import insert

    stats = found.stats
    statement = insert(stats).values(store=store, chunks=chunks, terms=terms)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[stats.c.store],
            set_={
                "chunks": stats.c.chunks + statement.excluded.chunks,
                "terms": stats.c.terms + statement.excluded.terms,
            },
        )
    )


def count_terms(conn: Connection, found: Tables, store: str, changes: Mapping[str, int]) -> None:
    """Add `changes` (term → chunks gained, or lost when negative) to the store's chunk count of each term,
    in one statement whose rows are locked in term order (concurrent writers cannot deadlock on them);
    a term left in no chunk loses its row."""
    from sqlalchemy import BigInteger, Text, bindparam, func, select
    from sqlalchemy.dialects.postgresql import ARRAY, insert

    changed = sorted(term for term, number in changes.items() if number)
    if not changed:
        return
    t = found.terms.c
    given = select(func.unnest(bindparam("terms", changed, ARRAY(Text))).label("term"),
                   func.unnest(bindparam("numbers", [changes[term] for term in changed], ARRAY(BigInteger)))
                   .label("chunks")).subquery("given")  # fmt: skip
    rows = select(bindparam("store", store, Text), given.c.term, given.c.chunks).order_by(given.c.term)
    statement = insert(found.terms).from_select(["store", "term", "chunks"], rows)
    statement = statement.on_conflict_do_update(index_elements=[t.store, t.term],
                                                set_={"chunks": t.chunks + statement.excluded.chunks})  # fmt: skip
    emptied = [term for term, left in conn.execute(statement.returning(t.term, t.chunks)) if left <= 0]
    if emptied:
        conn.execute(found.terms.delete().where(t.store == store, t.term.in_(emptied)))


def _set(conn: Connection, found: Tables, store: str, key: str, value: str) -> None:
    from sqlalchemy.dialects.postgresql import insert

    settings = found.settings
    statement = insert(settings).values(store=store, key=key, value=value)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[settings.c.store, settings.c.key], set_={"value": value}, where=settings.c.value != value
        )
    )


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)
