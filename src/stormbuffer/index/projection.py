"""The disposable SQLite projection of a store: tables, connections and versions.

Written with SQLAlchemy Core; the lexical postings and their upkeep live in `postings.py`. The projection can always
be rebuilt from the Markdown records, so a missing, unreadable or differently versioned file is
replaced rather than migrated.

Two version numbers are kept apart on purpose:

- `PROJECTION_VERSION` is this layout, stored in `PRAGMA user_version` and checked on open. A
  projection of one of `LEGACY_VERSIONS` (chunk rows stored whole; inserted chunks logged one by one)
  is read as it is and upgraded in place by the first writer (`upgrade`); versions of Stormbuffer
  before this one find a number they do not know and rebuild the file rather than misread a chunk row
  stored without its text or miss chunks that no trigger logged.
- `PROTOCOL_INDEX_VERSION` (6) is what context receipts report as `index_version`; clients of the
  version-1 protocol know the index by that number, whatever the layout on disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.dirs import PRIVATE_FILE_MODE
from ..core.errors import IndexUnavailable
from ..core.stores import StorePaths, trusted_fallback_index_dir

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, MetaData, Table

PROJECTION_VERSION = 9
# 7: before a chunk's retrieval text was stored without its text (`kept_chunks`); 8: before new chunks
# were found by their ids rather than logged by a trigger (`postings.apply_changes`)
LEGACY_VERSIONS = (7, 8)
PROTOCOL_INDEX_VERSION = 6
PROJECTION_FORMAT = "stormbuffer-projection"
UNAVAILABLE_MESSAGE = (
    "the SQLite projection could not be opened; check that its directory is writable, then reindex the selected store"
)


class ProjectionUnusable(Exception):
    """The file exists but is not a projection this version can use (corrupt, foreign or other version)."""


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    records: Table
    chunks: Table
    vectors: Table
    released: Table
    invalid_files: Table
    settings: Table
    postings: Table
    lexical_changes: Table


def _define() -> Tables:
    from sqlalchemy import (
        Column,
        ForeignKey,
        Index,
        Integer,
        LargeBinary,
        MetaData,
        Table,
        Text,
        UniqueConstraint,
    )

    metadata = MetaData()
    records = Table(
        "records", metadata,
        Column("id", Text, primary_key=True),
        Column("scope", Text, nullable=False),
        Column("path", Text, nullable=False, unique=True),  # store-relative, e.g. records/<id>.md
        Column("title", Text, nullable=False),
        Column("title_key", Text, nullable=False),  # normalized title: what duplicate and overlap checks match
        Column("kind", Text, nullable=False),
        Column("status", Text, nullable=False),
        Column("access", Text, nullable=False),
        Column("created_at", Text, nullable=False),
        Column("updated_at", Text, nullable=False),
        Column("tags", Text, nullable=False),  # JSON array
        Column("aliases", Text, nullable=False),  # JSON array
        Column("sources", Text, nullable=False),  # JSON array of protocol source objects
        Column("content_sha256", Text, nullable=False),
        Column("size", Integer, nullable=False),
        Column("mtime_ns", Integer, nullable=False),
        Column("inode", Integer, nullable=False),
        Index("records_title_key", "title_key", "kind", "scope"),
    )  # fmt: skip
    chunks = Table(
        "chunks", metadata,
        Column("id", Integer, primary_key=True),  # postings and matrix rows refer to it; never reused (AUTOINCREMENT)
        Column("record_id", Text, ForeignKey("records.id", ondelete="CASCADE"), nullable=False),
        Column("ordinal", Integer, nullable=False),
        Column("heading", Text),
        Column("text", Text, nullable=False),
        Column("embed_text", Text, nullable=False),  # empty past the vector cap (never embedded)
        Column("retrieval_text", Text, nullable=False),
        Column("token_count", Integer, nullable=False),  # model tokens of embed_text (0 past the vector cap)
        Column("word_count", Integer, nullable=False),  # whitespace words of text
        Column("embed_hash", Text, nullable=False),  # sha256 of the embedding text (made past the cap too)
        UniqueConstraint("record_id", "ordinal"),
        Index("chunks_embed_hash", "embed_hash"),
        sqlite_autoincrement=True,
    )  # fmt: skip
    vectors = Table(
        "vectors", metadata,
        Column("embed_hash", Text, primary_key=True),  # shared by every chunk with this embed_text
        Column("model_version", Text, nullable=False),
        Column("vector", LargeBinary, nullable=False),  # float32, little-endian
        Column("sentence_vectors", LargeBinary),  # float32 rows, one per `chunking.sentences`; NULL for one
    )  # fmt: skip
    released = Table(
        "released_hashes", metadata,
        Column("embed_hash", Text, primary_key=True),  # of deleted chunks: their vectors may now be unused
    )  # fmt: skip
    invalid_files = Table(
        "invalid_files", metadata,
        Column("path", Text, primary_key=True),
        Column("size", Integer, nullable=False),
        Column("mtime_ns", Integer, nullable=False),
        Column("inode", Integer, nullable=False),
        Column("message", Text, nullable=False),
    )  # fmt: skip
    settings = Table(
        "metadata", metadata,
        Column("key", Text, primary_key=True),
        Column("value", Text, nullable=False),
    )  # fmt: skip
    postings = Table(
        "postings", metadata,
        Column("term", Text, primary_key=True),
        Column("entries", LargeBinary, nullable=False),  # packed (chunk id, occurrences, chunk length)
        sqlite_with_rowid=False,
    )  # fmt: skip
    lexical_changes = Table(
        "lexical_changes", metadata,
        Column("seq", Integer, primary_key=True),
        Column("chunk", Integer, nullable=False),
        Column("added", Integer, nullable=False),  # 1: inserted, 0: deleted
        Column("text", Text),  # a deleted chunk's retrieval text
    )  # fmt: skip
    return Tables(metadata, records, chunks, vectors, released, invalid_files, settings, postings, lexical_changes)


_tables: Tables | None = None


def tables() -> Tables:
    global _tables
    if _tables is None:
        _tables = _define()
    return _tables


# ---- metadata keys -------------------------------------------------------------------------

FORMAT = "format"
PROJECTION_ID = "projection_id"  # random per database file; names its vector matrix files
GENERATION = "generation"  # bumped by every change to records or chunks
LAST_SYNC = "last_sync"  # RFC 3339 UTC with milliseconds
SYNC_STARTED_NS = "sync_started_ns"  # wall clock when the last sync looked at the files
FILES = "files"  # digest of every record file's path and metadata as the last sync stored them
CHUNKER = "chunker"  # which token counter cut the chunks
VERIFY = "verify"  # JSON path → sha256 of files a write stored with a stat taken too soon to trust alone
VECTOR_GENERATION = "vector_generation"  # generation the vector matrix files describe
VECTOR_MODEL = "vector_model"  # JSON: model_id, model_version, model_checksum, dimension
VECTOR_FILES = "vector_files"  # JSON: matrix token and scope names of the current matrix files
VECTOR_PENDING = "vector_pending"  # texts that should have vectors and have none yet (absent: none)


# ---- engines ---------------------------------------------------------------------------------


def engine_for(path: Path, *, create: bool) -> Engine:
    """A writer's engine on the file; every connection gets the projection's pragmas (WAL,
    synchronous NORMAL, foreign keys, busy timeout). With `create=False` a missing file is an error
    instead of a new empty database. The caller disposes of it."""
    import logging

    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import NullPool

    quiet = logging.getLogger("sqlalchemy")  # its pool logs a close interrupted by Ctrl-C with a traceback
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())  # so nothing reaches a terminal through logging's last resort
    engine = create_engine(
        "sqlite+pysqlite://",
        creator=lambda: connect(path, create=create, writer=True),  # autocommit: SQLAlchemy's BEGIN is below
        poolclass=NullPool,  # a file renamed over the projection is picked up by the next connection
    )

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    """One read transaction (a consistent snapshot) on an existing projection, without a lock.

    Readers use the driver's connection directly: a one-shot process answers a query without
    importing SQLAlchemy. The connection is the process's idle one to this very file when it has one
    (`readers`: its page cache is warm), else a new one; a file renamed over the projection is seen
    by the next read either way. Raises IndexUnavailable when the file is missing or cannot be read
    as a projection of this version.
    """
    from .readers import POOL, identity

    try:
        opened_on = identity(path)
        conn = POOL.take(path, opened_on) or connect(path)
    except (OSError, sqlite3.Error) as exc:
        raise IndexUnavailable(UNAVAILABLE_MESSAGE) from exc
    reusable = False
    try:
        conn.execute("BEGIN")
        check_version(conn)
        yield conn
        reusable = True
    except (sqlite3.Error, ProjectionUnusable) as exc:
        raise IndexUnavailable(UNAVAILABLE_MESSAGE) from exc
    finally:
        _end_read(path, opened_on, conn, reusable)


def _end_read(path: Path, opened_on: tuple[int, int], conn: sqlite3.Connection, reusable: bool) -> None:
    """End the read transaction; keep the connection for the next reader, or close it after a failure."""
    from .readers import POOL

    try:
        if conn.in_transaction:
            conn.rollback()
    except sqlite3.Error:
        reusable = False
    if reusable:
        POOL.give(path, opened_on, conn)
    else:
        conn.close()


# A writer's page cache (64 MiB, taken only as pages are touched) holds a large record's rows for the
# whole transaction, and its temporary files (statement journals, sorts) stay in memory: with SQLite's
# default 2 MB cache a 5 MB record's chunk rows spill to the write-ahead log before the commit and its
# forget reads them back, about twice the CPU time (`docs/performance.md`, "Large writes").
WRITER_CACHE = ("cache_size = -65536", "temp_store = MEMORY")


def connect(path: Path, *, create: bool = False, writer: bool = False) -> sqlite3.Connection:
    """A driver connection with the projection's pragmas (a writer's: WAL, synchronous NORMAL, foreign
    keys, `WRITER_CACHE`), in autocommit mode: transactions are explicit `BEGIN`s. With `create=False`
    a missing file is an error, not a new database."""
    if create:  # private whatever the umask; SQLite gives its journal files the database's mode
        with contextlib.suppress(OSError):  # SQLite reports what went wrong
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE))
    conn = sqlite3.connect(f"file:{path}?mode={'rwc' if create else 'rw'}", uri=True, check_same_thread=False,
                           isolation_level=None)  # fmt: skip
    # `auto_vacuum` only takes on a database without tables, and before WAL (see `give_back_space`).
    pragmas = ("busy_timeout = 5000", *(("auto_vacuum = INCREMENTAL",) if create and writer else ()),
               *(("foreign_keys = ON", "journal_mode = WAL", "synchronous = NORMAL", *WRITER_CACHE)
                 if writer else ()))  # fmt: skip
    try:
        for pragma in pragmas:
            conn.execute(f"PRAGMA {pragma}")
        if writer:
            upgrade(conn)
    except sqlite3.Error:
        conn.close()
        raise
    return conn


def driver_connection(conn: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under a SQLAlchemy connection; statements on it join its transaction."""
    driver = conn.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    return driver


def check_version(conn: sqlite3.Connection) -> None:
    """Raise ProjectionUnusable unless the database is a projection of `PROJECTION_VERSION` (or of one
    of `LEGACY_VERSIONS`, which read the same)."""
    known = (PROJECTION_VERSION, *LEGACY_VERSIONS)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        marker = get_setting(conn, FORMAT) if version in known else None
    except sqlite3.Error as exc:
        raise ProjectionUnusable("unreadable") from exc
    if version not in known or marker != PROJECTION_FORMAT:
        raise ProjectionUnusable(f"version {version}")


def upgrade(conn: sqlite3.Connection) -> None:
    """Make a projection of one of `LEGACY_VERSIONS` one of `PROJECTION_VERSION` in one transaction: its
    rows stay as they are; the triggers that log chunk changes are renewed (`postings.renew_triggers`)."""
    from . import postings

    def version() -> int:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    if version() not in LEGACY_VERSIONS:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version() in LEGACY_VERSIONS:
            postings.renew_triggers(conn)
            conn.execute(f"PRAGMA user_version = {PROJECTION_VERSION}")
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.rollback()


def create_schema(conn: Connection) -> None:
    """Create every table of an empty database and stamp its version."""
    from . import postings

    tables().metadata.create_all(conn)
    conn.exec_driver_sql(
        "CREATE TRIGGER chunks_release AFTER DELETE ON chunks BEGIN "
        "INSERT OR IGNORE INTO released_hashes(embed_hash) VALUES (old.embed_hash); END"
    )
    postings.create(conn)
    set_settings(
        driver_connection(conn), {FORMAT: PROJECTION_FORMAT, PROJECTION_ID: uuid.uuid4().hex[:16], GENERATION: "0"}
    )
    conn.exec_driver_sql(f"PRAGMA user_version = {PROJECTION_VERSION}")


INCREMENTAL_VACUUM = 2  # `PRAGMA auto_vacuum` of a projection that gives space back without a rebuild
GIVE_BACK_PAGES = 256  # free pages beyond which a write gives them back to the file system at once


def give_back_space(conn: sqlite3.Connection, *, at_least: int = GIVE_BACK_PAGES) -> None:
    """Return the projection's free pages (rows deleted by a forget, a sync or a vector refresh) to the
    file system when there are at least `at_least`, outside any transaction. Projections made since
    `auto_vacuum` was set do it page by page (`incremental_vacuum`, a short write); readers in WAL mode
    keep reading their snapshot meanwhile. Older ones keep their free pages until `sbuf gc` rebuilds them."""
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL_VACUUM:
        return
    if conn.execute("PRAGMA freelist_count").fetchone()[0] >= max(at_least, 1):
        conn.executescript("PRAGMA incremental_vacuum;")  # stepped to the end (`execute` frees one page)


def give_back_space_of(path: Path, *, thorough: bool = False) -> None:
    """`give_back_space` on the projection file at `path`, for a caller holding the projection lock.
    `thorough` (`sbuf gc`): every free page, a projection made before incremental mode switched to it
    by one `VACUUM` (a WAL write too), and the write-ahead log truncated. A busy or unreadable file is
    left as it is: its free pages are reused by the next writes."""
    try:
        conn = connect(path, writer=True)
    except sqlite3.Error:
        return
    try:
        if thorough and conn.execute("PRAGMA auto_vacuum").fetchone()[0] != INCREMENTAL_VACUUM:
            conn.execute(f"PRAGMA auto_vacuum = {INCREMENTAL_VACUUM}")
            conn.execute("PRAGMA temp_store = DEFAULT")  # VACUUM's copy of the whole file goes to disk, not memory
            conn.execute("VACUUM")
        give_back_space(conn, at_least=1 if thorough else GIVE_BACK_PAGES)
        if thorough:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    except sqlite3.Error:
        pass
    finally:
        conn.close()


def free_bytes(conn: sqlite3.Connection) -> int:
    """Bytes of the projection's free pages (what `give_back_space` or a vacuum would return)."""
    pages = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])


# ---- settings ------------------------------------------------------------------------------


def get_setting(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM metadata WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def get_settings(conn: sqlite3.Connection) -> dict[str, str]:
    return {key: value for key, value in conn.execute("SELECT key, value FROM metadata")}


def set_settings(conn: sqlite3.Connection, values: dict[str, str]) -> None:
    conn.executemany(
        "INSERT INTO metadata(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )


def pending_vectors(settings: Mapping[str, str]) -> int:
    """How many texts the projection's last vector refresh left without vectors (`VECTOR_PENDING`)."""
    return int(settings.get(VECTOR_PENDING) or 0)


def model_identity(model: Any) -> str:
    """The stored identity of the model that made the vectors (id, version, checksum, dimension)."""
    return json.dumps(
        {"model_id": model.model_id, "model_version": model.model_version,
         "model_checksum": model.model_checksum, "dimension": model.dimension},
        sort_keys=True,
    )  # fmt: skip


# ---- locations -----------------------------------------------------------------------------


def index_candidates(paths: StorePaths) -> list[Path]:
    """Where a store's projection file can be, in the order readers look (nothing is created); the
    temporary fallback only when it is this user's private directory."""
    if paths.kind == "project":
        return [paths.root / paths.index_name]
    fallback = trusted_fallback_index_dir(paths.root)
    return [paths.cache_dir / paths.index_name, *([fallback / paths.index_name] if fallback else [])]


def existing_index_path(paths: StorePaths) -> Path | None:
    """The projection file of a store if one exists, found without creating anything."""
    return next((path for path in index_candidates(paths) if path.is_file()), None)


def stored_settings(paths: StorePaths) -> tuple[Path, dict[str, str]] | None:
    """The store's projection file and its metadata, read without a lock; None when there is no
    readable projection. Creates nothing."""
    path = existing_index_path(paths)
    if path is None:
        return None
    try:
        with reading(path) as conn:
            return path, get_settings(conn)
    except IndexUnavailable:
        return None


def describe(paths: StorePaths) -> dict[str, Any]:
    """`index_version`, `embedding_version`, `last_sync` of a store's projection (None when absent)
    and `vectors_pending`, the texts still waiting for vectors of the model in use, counted now (0
    when absent or when no model has made vectors yet).

    Opens nothing for writing and creates no file or directory.
    """
    from .chunking import VECTOR_CHUNKS

    absent = {"index_version": None, "embedding_version": None, "last_sync": None, "vectors_pending": 0}
    path = existing_index_path(paths)
    if path is None:
        return absent
    try:
        with reading(path) as conn:
            settings = get_settings(conn)
            (pending,) = conn.execute(
                "SELECT count(DISTINCT c.embed_hash) FROM chunks AS c LEFT JOIN vectors AS v "
                "ON v.embed_hash = c.embed_hash WHERE c.ordinal < ? AND v.embed_hash IS NULL",
                (VECTOR_CHUNKS,),
            ).fetchone()
    except IndexUnavailable:
        return absent
    model = json.loads(settings[VECTOR_MODEL]) if VECTOR_MODEL in settings else None
    return {
        "index_version": PROTOCOL_INDEX_VERSION,  # the number receipts report, not the layout on disk
        "embedding_version": model["model_version"] if model else None,
        "last_sync": settings.get(LAST_SYNC),
        "vectors_pending": int(pending) if model else 0,
    }
