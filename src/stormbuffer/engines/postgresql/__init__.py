"""The PostgreSQL engine: a store's records as canonical Markdown bytes in one table, written in transactions,
and their projection (chunks, postings, pgvector vectors) beside them in the same database."""

from .database import prepare_database
from .store import PostgreSQLStore

__all__ = ["PostgreSQLStore", "prepare_database"]
