"""Storage engines behind one seam: the directory of Markdown files (with its SQLite projection) and PostgreSQL.

`base` is the record storage every engine supplies to the repository (read, write with
compare-and-swap, look up, one unit of work per write); `projection` is the read side every engine
supplies to retrieval. The rules (`core.repository`) and the ranking (`retrieval`) are written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import RecordStore

if TYPE_CHECKING:
    from ..core.stores import StorePaths
    from ..index.freshness import StoreFreshness


def open_record_store(paths: StorePaths, scope: str, lock_wait: float, freshness: StoreFreshness | None) -> RecordStore:
    """The engine the store's `store.toml` names, for a store of record scope `scope`."""
    from ..core.stores import read_config

    config = read_config(paths)
    if config.database is not None:
        from .postgresql import PostgreSQLStore

        return PostgreSQLStore(paths, scope, lock_wait, config.database)
    from .directory import DirectoryStore

    return DirectoryStore(paths, scope, lock_wait, freshness)
