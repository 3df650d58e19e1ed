"""Loading ranked chunks with their record fields from a store's projection, whichever engine keeps it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..engines.projection import Projection
from .hits import SearchHit, SearchOptions, scope_rank


@dataclass
class LoadedChunk:
    hit: SearchHit
    aliases: list[str]
    file_name: str


def load_chunks(projection: Projection, chunk_ids: Iterable[int], options: SearchOptions) -> dict[int, LoadedChunk]:
    """Chunk id → unscored hit with its record's aliases and file name, for the chunks whose record
    passes the options' filters."""
    wanted = list(chunk_ids)
    if not wanted:
        return {}
    rows = projection.chunk_rows(wanted, options)
    root = str(projection.store_root)
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
            aliases[record_id] = [] if alias_json == "[]" else json.loads(alias_json)  # most records have none
        loaded[chunk_id] = LoadedChunk(hit, aliases[record_id], path.rsplit("/", 1)[-1])
    return loaded
