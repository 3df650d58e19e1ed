"""Hybrid ranking: reciprocal-rank fusion of the lexical and vector lists, one hit per record.

A record's score is the sum over both lists of `1 / (60 + rank)`, where rank is the record's
position among distinct records of that list, plus deterministic boosts: +0.01 when it belongs to
the current scope, +0.04 for an exact title match, +0.03 for an exact alias or file name match.
The hit shows the record's chunk on which both lists agree best (highest fused chunk rank), and
its reasons: the record's best `lexical:` reason, its best `vector:` distance, then the boosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .hits import SearchHit

RRF_K = 60
CURRENT_SCOPE_BOOST = 0.01
EXACT_BOOSTS = {"exact_title": 0.04, "exact_alias": 0.03, "exact_filename": 0.03}


@dataclass
class _Record:
    chunks: dict[int, tuple[SearchHit, float]] = field(default_factory=dict)  # ordinal -> (hit, fused chunk rank)
    lexical: SearchHit | None = None  # best lexical chunk
    vector: SearchHit | None = None  # best vector chunk
    score: float = 0.0
    shown: SearchHit | None = None


def fuse(lexical: list[SearchHit], semantic: list[SearchHit], current_scope: str | None, limit: int
         ) -> list[SearchHit]:  # fmt: skip
    """The best `limit` records, one hit each. Both lists must already be sorted best first."""
    records: dict[str, _Record] = {}
    for ranked, slot in ((lexical, "lexical"), (semantic, "vector")):
        record_rank = 0
        for chunk_rank, hit in enumerate(ranked, 1):
            entry = records.setdefault(hit.record_id, _Record())
            if getattr(entry, slot) is None:
                record_rank += 1
                setattr(entry, slot, hit)
                entry.score += 1.0 / (RRF_K + record_rank)
            previous, fused = entry.chunks.get(hit.ordinal, (hit, 0.0))
            entry.chunks[hit.ordinal] = (previous, fused + 1.0 / (RRF_K + chunk_rank))
    for entry in records.values():
        best = max(entry.chunks, key=lambda ordinal: (entry.chunks[ordinal][1], -ordinal))
        entry.shown = entry.chunks[best][0]
        entry.score += _boosts(entry, current_scope)[0]
    ranked_records = sorted(records.values(), key=_order)
    return [_merge(entry, current_scope) for entry in ranked_records[:limit]]


def _order(entry: _Record) -> tuple[float, int, str, int]:
    """`hits.by_score` for a record not yet turned into a hit."""
    shown = _shown(entry)
    return (-entry.score, -shown.scope_rank, shown.record_id, shown.ordinal)


def _shown(entry: _Record) -> SearchHit:
    assert entry.shown is not None
    return entry.shown


def _boosts(entry: _Record, current_scope: str | None) -> tuple[float, list[str]]:
    """The deterministic boosts of a record and their reasons."""
    total, reasons = 0.0, []
    if _shown(entry).scope == current_scope:
        total += CURRENT_SCOPE_BOOST
        reasons.append("boost:current_scope")
    exact = entry.lexical.lexical_match_reason if entry.lexical is not None else None
    if exact in EXACT_BOOSTS:
        total += EXACT_BOOSTS[exact]
        reasons.append(f"boost:{exact}")
    return total, reasons


def _merge(entry: _Record, current_scope: str | None) -> SearchHit:
    reasons: list[str] = []
    if entry.lexical is not None:
        reasons.append(f"lexical:{entry.lexical.lexical_match_reason}")
    if entry.vector is not None:
        reasons.extend(entry.vector.match_reasons)
    reasons += _boosts(entry, current_scope)[1]
    return replace(
        _shown(entry),
        score=entry.score,
        lexical_match_reason=entry.lexical.lexical_match_reason if entry.lexical is not None else "vector",
        match_reasons=list(dict.fromkeys(reasons)),
        vector_distance=entry.vector.vector_distance if entry.vector is not None else None,
    )
