"""One store's projection as a reader sees it, and loading ranked chunks with their record fields."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..index import projection as pj
from .hits import SearchHit, SearchOptions, scope_rank


@dataclass(frozen=True)
class Snapshot:
    """A read transaction on one store's projection, with the metadata read at its start."""

    conn: sqlite3.Connection
    store_root: Path
    index_path: Path
    settings: dict[str, str]

    @property
    def generation_key(self) -> tuple[str, str, str]:
        """Identifies this exact content of the projection (changes with every sync that changed it)."""
        return (str(self.index_path), self.settings.get(pj.PROJECTION_ID, ""), self.settings.get(pj.GENERATION, ""))


@dataclass
class LoadedChunk:
    hit: SearchHit
    aliases: list[str]
    file_name: str


def load_chunks(snapshot: Snapshot, chunk_ids: Iterable[int], options: SearchOptions) -> dict[int, LoadedChunk]:
    """Chunk id → unscored hit with its record's aliases and file name, for the chunks whose record
    passes the options' filters.

    """
    wanted = list(chunk_ids)
    if not wanted:
        return {}
    filters: list[tuple[str, Sequence[object]]] = [
        ("c.id", wanted), ("r.status", options.statuses), ("r.scope", options.scopes or ())
    ]  # fmt: skip
    if options.access is not None:
        filters.append(("r.access", options.access))
    if options.kinds is not None:
        filters.append(("r.kind", options.kinds))
    where = " AND ".join(f"{column} IN ({', '.join('?' * len(values))})" for column, values in filters)
    rows = snapshot.conn.execute(
        "SELECT c.id, c.record_id, c.ordinal, c.text, r.title, r.kind, r.scope, r.status, r.access, r.path, "
        f"r.aliases, r.sources, r.created_at FROM chunks AS c JOIN records AS r ON r.id = c.record_id WHERE {where}",
        tuple(value for _column, values in filters for value in values),
    )
    root = str(snapshot.store_root)
    aliases: dict[str, list[str]] = {}
    loaded: dict[int, LoadedChunk] = {}
    for row in rows:
        chunk_id, record_id, ordinal, text, title, kind, scope, status, access, path, alias_json, sources, created = row
        hit = SearchHit(
            record_id=record_id,
            ordinal=ordinal,
            title=title,
            kind=kind,
            scope=scope,
            status=status,
            access=access,
            text=text,
            sources_json=sources,
            path=f"{root}/{path}",
            scope_rank=scope_rank(scope, options.current_scope),
            created_at=created,
            chunk=chunk_id,
        )
        if record_id not in aliases:
            aliases[record_id] = json.loads(alias_json)
        loaded[chunk_id] = LoadedChunk(hit, aliases[record_id], path.rsplit("/", 1)[-1])
    return loaded
