"""Search options, hits and the ordering rules shared by every retrieval mode."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..core.records import STATUSES
from ..core.scopes import GLOBAL

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
EXCERPT_CHARS = 280
MODES = ("lexical", "semantic", "hybrid")
FALLBACK_REASONS = (
    "intentionally_unavailable",
    "model_unavailable",
    "embedder_initialization_failed",
    "vector_projection_unavailable",
    "vector_projection_busy",
    "vector_projection_incomplete",
    "embedding_execution_failed",
)

# Lexical match reasons, strongest first, with the boost each adds to the lexical score.
LEXICAL_BOOSTS = {
    "exact_title": 3.0,
    "exact_filename": 2.5,
    "exact_alias": 2.0,
    "phrase": 1.0,
    "prefix": 0.5,
    "term": 0.0,
}


@dataclass(frozen=True)
class SearchOptions:
    """Filters and limits of one search. `None` filters mean "no restriction", except `scopes`,
    which default to the selected stores' own scopes. Filters apply before ranking."""

    limit: int = DEFAULT_LIMIT
    include_inactive: bool = False
    scopes: tuple[str, ...] | None = None
    access: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    current_scope: str | None = None  # default: the first store's scope
    mode: str = "hybrid"
    now: datetime | None = None  # the moment relative times in the query refer to (default: the clock)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown retrieval mode {self.mode!r}")

    @property
    def bounded_limit(self) -> int:
        return min(max(self.limit, 1), MAX_LIMIT)

    @property
    def statuses(self) -> tuple[str, ...]:
        return STATUSES if self.include_inactive else ("active",)

    def with_defaults(self, scopes: tuple[str, ...], current_scope: str | None) -> SearchOptions:
        return replace(
            self,
            scopes=scopes if self.scopes is None else self.scopes,
            current_scope=current_scope if self.current_scope is None else self.current_scope,
        )


@dataclass
class SearchHit:
    """One ranked chunk of a record. `path` is the record file's absolute path (human output only)."""

    record_id: str
    ordinal: int
    title: str
    kind: str
    scope: str
    status: str
    access: str
    text: str
    sources_json: str  # the record's sources as stored; parsed only for hits that are shown
    path: str
    score: float = 0.0
    lexical_match_reason: str = "term"
    match_reasons: list[str] = field(default_factory=list)
    vector_distance: float | None = None
    scope_rank: int = 0  # 2 = current scope, 1 = global, 0 = other
    created_at: str = ""  # the record's, RFC 3339
    bm25: float = 0.0  # the lexical side's BM25 score of this chunk (0 for a vector hit)
    chunk: int = -1  # the chunk's id in the projection (its row in the vector matrix)
    lexical_part: float = 0.0  # hybrid: the record's BM25 over the best of its store's candidates

    def copied(self, **changes: Any) -> SearchHit:
        """A shallow copy with `changes`: what `dataclasses.replace` gives (its lists shared, no field
        checked), without calling `__init__` field by field; a recall copies a hundred hits or more."""
        hit = object.__new__(SearchHit)
        hit.__dict__.update(self.__dict__, **changes)
        return hit

    @property
    def sources(self) -> list[dict[str, str]]:
        sources: list[dict[str, str]] = json.loads(self.sources_json)
        return sources

    @property
    def chunk_id(self) -> str:
        return f"{self.record_id}:{self.ordinal}"

    @property
    def excerpt(self) -> str:
        if len(self.text) <= EXCERPT_CHARS:
            return self.text
        return self.text[:EXCERPT_CHARS] + "…"

    def to_json(self, *, with_path: bool = False) -> dict[str, Any]:
        """The protocol's search hit; `with_path` adds the file path after `sources` (CLI only)."""
        out: dict[str, Any] = {
            "record_id": self.record_id,
            "chunk_id": self.chunk_id,
            "title": self.title,
            "kind": self.kind,
            "scope": self.scope,
            "status": self.status,
            "access": self.access,
            "excerpt": self.excerpt,
            "sources": self.sources,
        }
        if with_path:
            out["path"] = self.path
        out.update(
            score=self.score,
            lexical_match_reason=self.lexical_match_reason,
            match_reasons=list(self.match_reasons),
            vector_distance=self.vector_distance,
        )
        return out


def scope_rank(scope: str, current_scope: str | None) -> int:
    if scope == current_scope:
        return 2
    return 1 if scope == GLOBAL else 0


def by_score(hit: SearchHit) -> tuple[float, int, str, int]:
    """Best score first; then the current scope, then global; then record id and chunk order."""
    return (-hit.score, -hit.scope_rank, hit.record_id, hit.ordinal)


def by_lexical_tier(hit: SearchHit) -> tuple[float, int, float, str, int]:
    """Lexical-only order across stores: match kind first, then scope, then the bm25 part.

    bm25 values from different stores are not comparable (each store has its own statistics),
    the kind of match is; so within one kind of match the current scope comes first.
    """
    tier = LEXICAL_BOOSTS.get(hit.lexical_match_reason, 0.0)
    return (-tier, -hit.scope_rank, -hit.score, hit.record_id, hit.ordinal)
