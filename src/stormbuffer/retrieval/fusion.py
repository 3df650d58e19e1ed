"""Hybrid ranking: a convex combination of the lexical and vector scores, one hit per record.

Each side's scores are first put on one scale, per query: a chunk's lexical part is its BM25 score
divided by the best BM25 score among the query's lexical candidates of its scope (each store has
its own BM25 statistics), its vector part is its cosine similarity (0 when negative) divided by
the best among the vector candidates. Both divide by the best from a lower bound of 0 rather than
from the weakest candidate, so that a few candidates of nearly equal similarity stay nearly
equal. A chunk missing from a list has 0 from it; the vector list holds every lexical candidate's
chunk at its own similarity (`semantic.similar_hits`), so that 0 is the lexical side's. A record's
score is

    LEXICAL_WEIGHT · lexical + (1 − LEXICAL_WEIGHT) · vector + boosts,

its parts taken from its best chunk on each side, plus deterministic boosts: +0.1 when it belongs
to the current scope, +1.0 for an exact title match, +0.75 for an exact alias or file name match,
and, when the query names a time, up to +`timeref.TIME_WEIGHT` for a record near it
(`timeref`). Unlike reciprocal-rank fusion, a clear lexical winner (a BM25 score far above the
next) keeps its lead, and a side whose candidates are all about equally good moves little.

A lexical candidate without a vector of its own (`without_vectors`: past a large record's vector
cap, or still waiting for one) has no meaning to weigh: its combined score is its lexical part
alone, and its record's score is at least that. (Counting its vector part as 0 would halve every
such passage against any record that has vectors.) Where every chunk has a vector, nothing changes.

The hit shows the record's chunk with the best combined score, and its reasons: the record's best
`lexical:` reason, its best `vector:` distance, `fusion:lexical=<part>,vector=<part>`, then the
boosts (and the `time:` reason of a time reference).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hits import SearchHit
from .timeref import TIME_WEIGHT, TimeReference, closeness

LEXICAL_WEIGHT = 0.5
CURRENT_SCOPE_BOOST = 0.1
EXACT_BOOSTS = {"exact_title": 1.0, "exact_alias": 0.75, "exact_filename": 0.75}


@dataclass
class _Record:
    chunks: dict[int, tuple[SearchHit, float, float]] = field(default_factory=dict)  # ordinal -> (hit, lex, vec)
    lexical: SearchHit | None = None  # best lexical chunk
    vector: SearchHit | None = None  # best vector chunk
    parts: list[float] = field(default_factory=lambda: [0.0, 0.0])  # normalised lexical and vector parts
    without_vectors: set[int] = field(default_factory=set)  # ordinals of lexical chunks that have no vector
    score: float = 0.0
    shown: SearchHit | None = None


def fuse(lexical: list[SearchHit], semantic: list[SearchHit], current_scope: str | None, limit: int,
         time: TimeReference | None = None, without_vectors: frozenset[tuple[str, int]] = frozenset(),
         ) -> list[SearchHit]:  # fmt: skip
    """The best `limit` records, one hit each. Both lists must already be sorted best first;
    `without_vectors` holds the (record id, ordinal) of lexical candidates that have no vector."""
    records: dict[str, _Record] = {}
    for hit, part in zip(lexical, _lexical_parts(lexical), strict=True):
        entry = _entry(records, hit.record_id)
        if entry.lexical is None:
            entry.lexical = hit
        entry.parts[0] = max(entry.parts[0], part)
        if (hit.record_id, hit.ordinal) in without_vectors:
            entry.without_vectors.add(hit.ordinal)
        shown, lexical_part, vector_part = entry.chunks.get(hit.ordinal, (hit, 0.0, 0.0))
        entry.chunks[hit.ordinal] = (shown, max(lexical_part, part), vector_part)
    for hit, part in zip(semantic, _vector_parts(semantic), strict=True):
        entry = _entry(records, hit.record_id)
        if entry.vector is None:
            entry.vector = hit
        entry.parts[1] = max(entry.parts[1], part)
        shown, lexical_part, vector_part = entry.chunks.get(hit.ordinal, (hit, 0.0, 0.0))
        entry.chunks[hit.ordinal] = (shown, lexical_part, max(vector_part, part))
    nearness = _nearness(records, time)
    for record_id, entry in records.items():
        best = max(entry.chunks, key=lambda ordinal: (_chunk_score(entry, ordinal), -ordinal))
        entry.shown = entry.chunks[best][0]
        score = max(_combined(*entry.parts), _chunk_score(entry, best) if entry.without_vectors else 0.0)
        entry.score = score + _boosts(entry, current_scope, nearness.get(record_id), time)[0]
    ranked_records = sorted(records.items(), key=lambda item: _order(item[1]))
    return [_merge(entry, current_scope, nearness.get(record_id), time) for record_id, entry in ranked_records[:limit]]


def _entry(records: dict[str, _Record], record_id: str) -> _Record:
    """The record's entry, made on its first hit."""
    entry = records.get(record_id)
    if entry is None:
        entry = records[record_id] = _Record()
    return entry


def _chunk_score(entry: _Record, ordinal: int) -> float:
    """A chunk's combined score; its lexical part alone when it has no vector (see the module's docstring)."""
    _hit, lexical, vector = entry.chunks[ordinal]
    return lexical if ordinal in entry.without_vectors else _combined(lexical, vector)


def _combined(lexical: float, vector: float) -> float:
    return LEXICAL_WEIGHT * lexical + (1.0 - LEXICAL_WEIGHT) * vector


def _lexical_parts(hits: list[SearchHit]) -> list[float]:
    """BM25 over the best BM25 of the hits of the same scope (stores' statistics differ)."""
    best: dict[str, float] = {}
    for hit in hits:
        best[hit.scope] = max(best.get(hit.scope, 0.0), hit.bm25)
    return [hit.bm25 / best[hit.scope] if best[hit.scope] > 0 else 0.0 for hit in hits]


def _vector_parts(hits: list[SearchHit]) -> list[float]:
    """Cosine similarity (0 when negative) over the best similarity of the hits."""
    similarities = [max(0.0, 1.0 - (hit.vector_distance or 0.0) ** 2 / 2.0) for hit in hits]
    best = max(similarities, default=0.0)
    return [value / best if best > 0 else 0.0 for value in similarities]


def _nearness(records: dict[str, _Record], time: TimeReference | None) -> dict[str, float]:
    """Record id → closeness to the query's time reference (empty without one)."""
    if time is None:
        return {}
    return closeness(time, {record_id: hit for record_id, entry in records.items()
                            if (hit := entry.lexical or entry.vector) is not None})  # fmt: skip


def _order(entry: _Record) -> tuple[float, int, str, int]:
    """`hits.by_score` for a record not yet turned into a hit."""
    shown = _shown(entry)
    return (-entry.score, -shown.scope_rank, shown.record_id, shown.ordinal)


def _shown(entry: _Record) -> SearchHit:
    assert entry.shown is not None
    return entry.shown


def _boosts(entry: _Record, current_scope: str | None, near: float | None, time: TimeReference | None
            ) -> tuple[float, list[str]]:  # fmt: skip
    """The deterministic boosts of a record and their reasons."""
    total, reasons = 0.0, []
    if _shown(entry).scope == current_scope:
        total += CURRENT_SCOPE_BOOST
        reasons.append("boost:current_scope")
    exact = entry.lexical.lexical_match_reason if entry.lexical is not None else None
    if exact in EXACT_BOOSTS:
        total += EXACT_BOOSTS[exact]
        reasons.append(f"boost:{exact}")
    if time is not None and near:
        total += TIME_WEIGHT * near
        reasons.append(f"time:{time.describe()},closeness={near:.2f}")
    return total, reasons


def _merge(entry: _Record, current_scope: str | None, near: float | None, time: TimeReference | None) -> SearchHit:
    reasons: list[str] = []
    if entry.lexical is not None:
        reasons.append(f"lexical:{entry.lexical.lexical_match_reason}")
    if entry.vector is not None:
        reasons.extend(entry.vector.match_reasons)
    reasons.append(f"fusion:lexical={entry.parts[0]:.3f},vector={entry.parts[1]:.3f}")
    reasons += _boosts(entry, current_scope, near, time)[1]
    return _shown(entry).copied(
        score=entry.score,
        lexical_match_reason=entry.lexical.lexical_match_reason if entry.lexical is not None else "vector",
        match_reasons=list(dict.fromkeys(reasons)),
        vector_distance=entry.vector.vector_distance if entry.vector is not None else None,
        lexical_part=entry.parts[0],
    )
