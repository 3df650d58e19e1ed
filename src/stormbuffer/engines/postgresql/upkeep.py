"""Looking after a PostgreSQL store: what `status` counts, what `doctor` checks, what `gc` gives back,
the projection rebuilt from the records, and a destroyed store's rows removed.

Every table of the `stormbuffer` schema with a `store` column holds rows of one store each (the
records, the projection, and whatever else a store keeps there); `erase` finds them in the catalog,
so a table added later goes with its store too. The tables themselves are shared by every store of
the database: `compact` vacuums them whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .database import connection, named
from .schema import SCHEMA
from .tables import TERMS_TABLE

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ...core.stores import StorePaths
    from ...index.sync import Embedder, Progress, SyncReport


@dataclass(frozen=True)
class Counts:
    """One store's rows: its records and their canonical bytes, and its projection."""

    records: int
    record_bytes: int
    projected: int  # records in the projection
    chunks: int
    vectors: int
    waiting: int  # chunks that get a vector and have none yet
    vector_model: str | None  # the model that made the vectors (`index.projection.model_identity`)

    def to_json(self) -> dict[str, int]:
        return {"records": self.projected, "chunks": self.chunks, "vectors": self.vectors,
                "vectors_pending": self.waiting}  # fmt: skip


def counts(variable: str, store: str) -> Counts:
    """The store's rows counted now, in one statement."""
    from sqlalchemy import text

    from ...index.chunking import VECTOR_CHUNKS
    from .projecting import VECTOR_MODEL

    in_chunks = f"FROM {SCHEMA}.projection_chunks WHERE store = :store"
    statement = text(
        f"SELECT (SELECT count(*) FROM {SCHEMA}.records WHERE store = :store), "
        f"(SELECT coalesce(sum(octet_length(markdown)), 0) FROM {SCHEMA}.records WHERE store = :store), "
        f"(SELECT count(*) FROM {SCHEMA}.projection_records WHERE store = :store), "
        f"(SELECT count(*) {in_chunks}), (SELECT count(embedding) {in_chunks}), "
        f"(SELECT count(*) {in_chunks} AND embedding IS NULL AND ordinal < :vector_chunks), "
        f"(SELECT value FROM {SCHEMA}.projection_settings WHERE store = :store AND key = :model)"
    )
    with connection(variable) as conn:
        row = conn.execute(statement, {"store": store, "vector_chunks": VECTOR_CHUNKS, "model": VECTOR_MODEL}).one()
    records, record_bytes, projected, chunks, vectors, waiting = (int(value) for value in row[:6])
    return Counts(records, record_bytes, projected, chunks, vectors, waiting, row[6])


def erase(conn: Connection, store: str) -> int:
    """Delete every row of `store` from every table of the schema keyed by `store` (those that others
    refer to last), in the caller's transaction; returns how many rows went."""
    import pgvector.sqlalchemy  # noqa: F401  (teaches reflection the `vector` type)
    from sqlalchemy import MetaData, delete, text

    keyed = conn.execute(text("SELECT table_name FROM information_schema.columns WHERE table_schema = :schema "
                              "AND column_name = 'store'"), {"schema": SCHEMA}).scalars().all()  # fmt: skip
    metadata = MetaData(schema=SCHEMA)
    metadata.reflect(conn, schema=SCHEMA, only=list(keyed))
    removed = 0
    for table in reversed(metadata.sorted_tables):
        if "store" in table.c:
            removed += conn.execute(delete(table).where(table.c.store == store)).rowcount
    return removed


@dataclass(frozen=True)
class Problem:
    severity: str  # "failure" | "warning"
    kind: str  # "canonical" | "projection" | "model"
    message: str


def diagnose(variable: str, store: str) -> list[Problem]:
    """What is wrong with the store's database side: reachable, pgvector installed, the schema's version,
    and every record projected as it is now (a missing database is the one problem then)."""
    from sqlalchemy import text

    from ...core.errors import DatabaseUnavailable
    from .schema import SCHEMA_VERSION

    try:
        with connection(variable) as conn:
            version = conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar()
            schema = conn.execute(text(f"SELECT value FROM {SCHEMA}.settings WHERE name = 'schema_version'")).scalar()
            drift = conn.execute(text(_DRIFT), {"store": store}).one()
            totals = conn.execute(text(_TOTALS), {"store": store}).one()
            miscounted = conn.execute(text(_MISCOUNTED), {"store": store}).scalar()
    except DatabaseUnavailable as exc:
        return [Problem("failure", "canonical", str(exc))]
    where = named(variable)
    problems = []
    if version is None:
        problems.append(Problem("failure", "canonical", f"{where} has no pgvector extension"))
    elif tuple(int(part) for part in version.split(".")[:2]) < (0, 8):
        problems.append(Problem("warning", "projection", f"{where} has pgvector {version}; searches through "
                                "the HNSW index need 0.8 or newer"))  # fmt: skip
    if schema != SCHEMA_VERSION:
        problems.append(Problem("failure", "canonical", f"{where} holds Stormbuffer schema version {schema}; "
                                f"this version uses {SCHEMA_VERSION}"))  # fmt: skip
    missing, deleted, stale = (int(value) for value in drift)
    for count, what in ((missing, "not in the projection"), (deleted, "deleted but still in the projection"),
                        (stale, "changed since they were projected")):  # fmt: skip
        if count:
            problems.append(Problem("failure", "projection", f"{count} record(s) {what}"))
    chunks, length, counted_chunks, counted_length = (int(value or 0) for value in totals)
    if (chunks, length) != (counted_chunks, counted_length):
        problems.append(Problem("failure", "projection", "the projection's BM25 statistics do not match its chunks"))
    if miscounted:
        problems.append(Problem("failure", "projection", f"the chunk counts of {miscounted} term(s) do not match "
                                "their postings"))  # fmt: skip
    return problems


# Records against their projection: not projected, projected but gone, projected with other fields.
_DRIFT = f"""
SELECT
  (SELECT count(*) FROM {SCHEMA}.records r WHERE r.store = :store AND NOT EXISTS
     (SELECT 1 FROM {SCHEMA}.projection_records p WHERE p.store = r.store AND p.id = r.id)),
  (SELECT count(*) FROM {SCHEMA}.projection_records p WHERE p.store = :store AND NOT EXISTS
     (SELECT 1 FROM {SCHEMA}.records r WHERE r.store = p.store AND r.id = p.id)),
  (SELECT count(*) FROM {SCHEMA}.records r JOIN {SCHEMA}.projection_records p ON p.store = r.store AND p.id = r.id
     WHERE r.store = :store AND (p.status, p.scope, p.kind, p.title, p.path) <> (r.status, r.scope, r.kind, r.title,
     r.path))
"""
_TOTALS = f"""
SELECT (SELECT count(*) FROM {SCHEMA}.projection_chunks WHERE store = :store),
  (SELECT sum(length) FROM {SCHEMA}.projection_chunks WHERE store = :store),
  (SELECT sum(chunks) FROM {SCHEMA}.projection_stats WHERE store = :store),
  (SELECT sum(terms) FROM {SCHEMA}.projection_stats WHERE store = :store)
"""

# Terms whose kept chunk count is not the number of their postings (or that have only one of them).
_MISCOUNTED = f"""
SELECT count(*) FROM (SELECT term, count(*) AS chunks FROM {SCHEMA}.projection_postings WHERE store = :store
  GROUP BY term) AS p
FULL JOIN (SELECT term, chunks FROM {SCHEMA}.{TERMS_TABLE} WHERE store = :store) AS t USING (term)
WHERE p.chunks IS DISTINCT FROM t.chunks
"""


@dataclass(frozen=True)
class Compacted:
    dead_rows: int  # row versions the vacuum could remove
    bytes_before: int
    bytes_after: int

    @property
    def reclaimed_bytes(self) -> int:
        return max(0, self.bytes_before - self.bytes_after)


def compact(variable: str, *, dry_run: bool) -> Compacted:
    """VACUUM the projection's tables (every `projection_*` table of the schema; readers and writers go
    on meanwhile); with `dry_run` only count what it would find. The sizes are those of the tables with
    their indexes and TOAST."""
    from sqlalchemy import text

    from .database import database_url, engine_for, talking_to

    projection = f"FROM pg_stat_user_tables WHERE schemaname = '{SCHEMA}' AND relname LIKE 'projection\\_%'"
    counted = text(f"SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(pg_total_relation_size(relid)), 0) "
                   f"{projection}")  # fmt: skip
    with talking_to(variable), engine_for(database_url(variable)).connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM runs outside a transaction
        dead, before = (int(value) for value in conn.execute(counted).one())
        if dry_run:
            return Compacted(dead, before, before)
        for name in conn.execute(text(f"SELECT relname {projection} ORDER BY relname")).scalars().all():
            conn.execute(text(f'VACUUM (ANALYZE) {SCHEMA}."{name}"'))
        return Compacted(dead, before, int(conn.execute(counted).one()[1]))


def rebuild(paths: StorePaths, store: Any, progress: Progress | None = None) -> SyncReport:
    """The store's projection made again from its records, in the transaction of its write lock (`store`
    is its `PostgreSQLStore`); the vectors wait for the next embedding (the daemon, `sbuf sync`, a read)."""
    from sqlalchemy import delete

    from ...embedding.constants import DIMENSION
    from ...index.sync import SyncReport, token_counter
    from .projecting import project, refresh_statistics
    from .tables import tables

    found = tables(DIMENSION)
    count_tokens = token_counter(paths)
    with store.locked():
        conn = store.held
        for table in (found.records, found.stats, found.settings, found.terms):  # chunks, postings follow records
            conn.execute(delete(table).where(table.c.store == store.scope))
        stored = store.rows(conn)
        items = [(item.path.relative_to(paths.root).as_posix(), item.record) for item in stored]
        report = SyncReport(indexed=len(items))
        for start in range(0, len(items), _BATCH):
            report.chunks += project(conn, store.scope, items[start : start + _BATCH], dimension=DIMENSION,
                                     count_tokens=count_tokens)  # fmt: skip
            if progress is not None:
                progress("indexing", min(start + _BATCH, len(items)), len(items), report)
        refresh_statistics(conn, DIMENSION)
    return report


_BATCH = 200  # records projected per statement group of a rebuild


def reindex(paths: StorePaths, embedder: Embedder | None, progress: Progress | None = None) -> SyncReport:
    """`sbuf reindex` of a PostgreSQL store: its projection rebuilt, then every vector embedded again."""
    from ...core.repository import Repository
    from ...index.backlog import catch_up

    report = rebuild(paths, Repository(paths).engine, progress)
    embedded = catch_up(paths, embedder, progress=progress)
    report.embedded, report.pending = embedded.embedded, embedded.pending
    report.vector_failure, report.rebuilt = embedded.vector_failure, True
    return report
