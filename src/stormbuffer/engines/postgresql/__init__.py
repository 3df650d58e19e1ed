"""The PostgreSQL engine: a store's records as canonical Markdown bytes in one table, written in transactions."""

from .database import prepare_database
from .store import PostgreSQLStore

__all__ = ["PostgreSQLStore", "prepare_database"]
