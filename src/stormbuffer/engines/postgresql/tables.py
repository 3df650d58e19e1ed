"""The projection's tables in PostgreSQL, in SQLAlchemy Core: records' fields, chunks with their vectors
(pgvector `vector(N)`), BM25 postings (one row per term and chunk), how many chunks hold each term
and the lexical statistics, each
row marked with its store's record scope (`store`), as the records are (`schema`): several stores
can share one database, and each store's BM25 statistics are its own.

Like the SQLite projection, these tables are disposable: everything in them is derived from the
records. Terms sort byte-wise (`COLLATE "C"`), as in SQLite, so a query word that is only a prefix
finds the same terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy import Connection, MetaData, Table

from .schema import SCHEMA

HNSW_INDEX = "projection_chunks_embedding_hnsw"
WAITING_INDEX = "projection_chunks_waiting"
POSTINGS_PRIMARY_KEY = "projection_postings_pkey"
POSTINGS_KEY = ("store", "term", "chunk")
POSTINGS_INCLUDED = ("count", "length")
TERMS_TABLE = "projection_terms"
# A term's chunk count from its postings: what fills the table of a store made before it, and what
# `doctor` compares it with.
TERM_COUNTS = f"SELECT store, term, count(*) AS chunks FROM {SCHEMA}.projection_postings GROUP BY store, term"


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    records: Table
    chunks: Table
    postings: Table
    stats: Table
    settings: Table
    terms: Table


@cache
def tables(dimension: int) -> Tables:
    """The projection's tables for vectors of `dimension` (the model's)."""
    from pgvector.sqlalchemy import VECTOR
    from sqlalchemy import (
        BigInteger,
        Column,
        ForeignKey,
        ForeignKeyConstraint,
        Identity,
        Index,
        Integer,
        LargeBinary,
        MetaData,
        PrimaryKeyConstraint,
        Table,
        Text,
        UniqueConstraint,
        text,
    )

    from ...index.chunking import VECTOR_CHUNKS

    metadata = MetaData(schema=SCHEMA)
    records = Table(
        "projection_records", metadata,
        Column("store", Text, primary_key=True),
        Column("id", Text, primary_key=True),
        Column("scope", Text, nullable=False),
        Column("path", Text, nullable=False),  # store-relative, e.g. records/<id>.md
        Column("title", Text, nullable=False),
        Column("kind", Text, nullable=False),
        Column("status", Text, nullable=False),
        Column("access", Text, nullable=False),
        Column("created_at", Text, nullable=False),
        Column("aliases", Text, nullable=False),  # JSON array
        Column("sources", Text, nullable=False),  # JSON array of protocol source objects
        Index("projection_records_filters", "store", "scope", "status"),
    )  # fmt: skip
    chunks = Table(
        "projection_chunks", metadata,
        Column("id", BigInteger, Identity(), primary_key=True),  # grows only: ties rank by it, as in SQLite
        Column("store", Text, nullable=False),
        Column("record_id", Text, nullable=False),
        Column("ordinal", Integer, nullable=False),
        Column("heading", Text),
        Column("text", Text, nullable=False),
        Column("embed_text", Text, nullable=False),
        Column("retrieval_text", Text, nullable=False),
        Column("token_count", Integer, nullable=False),
        Column("word_count", Integer, nullable=False),
        Column("embed_hash", Text, nullable=False),
        Column("length", Integer, nullable=False),  # weighted terms of the retrieval text (BM25), unclamped
        Column("embedding", VECTOR(dimension)),  # unit length; NULL past the vector cap or not yet embedded
        Column("sentence_vectors", LargeBinary),  # float32 rows, one per sentence; NULL for one
        UniqueConstraint("store", "record_id", "ordinal"),
        # the chunks waiting for a vector, counted by every read: an index as small as the wait, not a scan
        Index(WAITING_INDEX, "store", postgresql_where=text(f"embedding IS NULL AND ordinal < {VECTOR_CHUNKS}")),
        ForeignKeyConstraint(["store", "record_id"], [f"{SCHEMA}.projection_records.store",
                             f"{SCHEMA}.projection_records.id"], ondelete="CASCADE"),
    )  # fmt: skip
    postings = Table(
        "projection_postings", metadata,
        Column("store", Text, nullable=False),
        Column("term", Text(collation="C"), nullable=False),
        Column("chunk", BigInteger, ForeignKey(f"{SCHEMA}.projection_chunks.id", ondelete="CASCADE"), nullable=False),
        Column("count", Integer, nullable=False),  # weighted occurrences (saturating at postings.MAX_COUNT)
        Column("length", Integer, nullable=False),  # the chunk's weighted length (saturating likewise)
        # a term's postings lie side by side in the key's index, with every column a query reads
        PrimaryKeyConstraint(*POSTINGS_KEY, name=POSTINGS_PRIMARY_KEY, postgresql_include=list(POSTINGS_INCLUDED)),
        Index("projection_postings_chunk", "chunk"),
    )  # fmt: skip
    stats = Table(
        "projection_stats", metadata,
        Column("store", Text, primary_key=True),
        Column("chunks", BigInteger, nullable=False),
        Column("terms", BigInteger, nullable=False),  # total weighted length of the store's chunks
    )  # fmt: skip
    settings = Table(
        "projection_settings", metadata,
        Column("store", Text, primary_key=True),
        Column("key", Text, primary_key=True),
        Column("value", Text, nullable=False),
    )  # fmt: skip
    terms = Table(
        TERMS_TABLE, metadata,
        Column("store", Text, primary_key=True),
        Column("term", Text(collation="C"), primary_key=True),
        Column("chunks", BigInteger, nullable=False),  # how many of the store's chunks hold the term (> 0)
    )  # fmt: skip
    return Tables(metadata, records, chunks, postings, stats, settings, terms)


def create(conn: Connection, dimension: int) -> None:
    """Create the extension, the schema and the projection's tables where missing (the caller commits)."""
    from sqlalchemy import text

    conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    found = tables(dimension)
    counted = conn.execute(text("SELECT to_regclass(:name)"), {"name": f"{SCHEMA}.{TERMS_TABLE}"}).scalar()
    found.metadata.create_all(conn)
    if counted is None:  # made before the chunk counts were kept: counted once from the postings
        conn.execute(text(f"INSERT INTO {SCHEMA}.{TERMS_TABLE} (store, term, chunks) {TERM_COUNTS}"))
    for index in found.chunks.indexes:  # those added since the table was made
        index.create(conn, checkfirst=True)
    _cover_postings(conn, f"{SCHEMA}.{found.postings.name}")
    table = f"{SCHEMA}.{found.chunks.name}"
    storage = conn.execute(text("SELECT attstorage FROM pg_attribute WHERE attrelid = CAST(:table AS regclass) "
                                "AND attname = 'embedding'"), {"table": table}).scalar()  # fmt: skip
    if storage != "p":  # vectors inline: an exact scan reads them with the row, not from TOAST (3 pages each)
        conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE PLAIN"))


# Whether a database's projection was made before the chunk counts of its terms were kept.
OUTDATED = (f"SELECT to_regclass('{SCHEMA}.projection_postings') IS NOT NULL "
            f"AND to_regclass('{SCHEMA}.{TERMS_TABLE}') IS NULL")  # fmt: skip


def _cover_postings(conn: Connection, table: str) -> None:
    """Give a postings table made before its primary key covered the counts that key (rebuilt once)."""
    from sqlalchemy import text

    covered = conn.execute(text("SELECT indnatts > indnkeyatts FROM pg_index WHERE indrelid = CAST(:table AS regclass) "
                                "AND indisprimary"), {"table": table}).scalar()  # fmt: skip
    if covered is False:
        conn.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {POSTINGS_PRIMARY_KEY}, ADD CONSTRAINT "
                          f"{POSTINGS_PRIMARY_KEY} PRIMARY KEY ({', '.join(POSTINGS_KEY)}) "
                          f"INCLUDE ({', '.join(POSTINGS_INCLUDED)})"))  # fmt: skip
