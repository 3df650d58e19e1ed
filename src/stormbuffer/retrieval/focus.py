"""Focused context: which ranked hits are too weak, on both sides, to be given to an agent.

A hit is *weak lexically* when its BM25 is under `LEXICAL_SHARE` of the best BM25 among the
query's candidates of its store (no query term at all counts as 0), and *weak by meaning* when its
cosine similarity to the query is under `SIMILARITY_FLOOR` or under `VECTOR_SHARE` of the best
similarity among the candidates. Context leaves out a hybrid hit that is weak on both sides,
whatever budget is left; an exact title, alias or file name match is never left out.

The two shares are relative to the best candidate, so they follow each query's own scale. The
floor is absolute, because the nearest of several unrelated notes is still "the best": it is about
the 95th percentile of the similarity all-MiniLM-L6-v2 gives texts that have nothing to do with
each other (0.257 over 4,000 such pairs, mean 0.07; bench/unrelated_similarity.py), while half of
the questions' evidence lies above 0.50.

A semantic-mode hit has no lexical side: it is left out when weak by meaning. A lexical-mode
ranking (no model, or the caller asked for it) is never cut: every hit matched a query term and
nothing is known of meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fusion import EXACT_BOOSTS
from .hits import SearchHit

LEXICAL_SHARE = 0.5
VECTOR_SHARE = 0.5
SIMILARITY_FLOOR = 0.25
REASON = "weak_lexical_and_semantic"


@dataclass(frozen=True)
class Focus:
    """The hits kept, best first, and how many were left out as weak on both sides."""

    kept: list[SearchHit]
    omitted: int

    def receipt(self) -> dict[str, object] | None:
        """The receipt's `focus` entry; None when nothing was left out."""
        if not self.omitted:
            return None
        return {
            "omitted": self.omitted,
            "reason": REASON,
            "lexical_share": LEXICAL_SHARE,
            "vector_share": VECTOR_SHARE,
            "similarity_floor": SIMILARITY_FLOOR,
        }


def focus(hits: list[SearchHit], mode: str) -> Focus:
    """`hits` (one ranking, best first) without those weak on both sides; lexical rankings stay whole."""
    if mode == "lexical":
        return Focus(hits, 0)
    best = max((similarity(hit) for hit in hits), default=0.0)
    kept = [hit for hit in hits if _strong(hit, best, mode)]
    return Focus(kept, len(hits) - len(kept))


def similarity(hit: SearchHit) -> float:
    """The hit's cosine similarity to the query (0 without a vector side)."""
    if hit.vector_distance is None:
        return 0.0
    return 1.0 - hit.vector_distance**2 / 2.0


def _strong(hit: SearchHit, best_similarity: float, mode: str) -> bool:
    if hit.lexical_match_reason in EXACT_BOOSTS:
        return True
    if mode == "hybrid" and hit.lexical_part >= LEXICAL_SHARE:
        return True
    value = similarity(hit)
    return value >= SIMILARITY_FLOOR and value >= VECTOR_SHARE * best_similarity
