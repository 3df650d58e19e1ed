"""Reciprocal-rank fusion of hand-made ranked lists: scores, one hit per record, chunks, reasons, order."""

from __future__ import annotations

import pytest

from stormbuffer.retrieval.fusion import fuse
from stormbuffer.retrieval.hits import SearchHit, by_lexical_tier

HERE = "project:here"


def hit(record: str, ordinal: int = 0, *, scope: str = HERE, reason: str = "prefix", distance: float | None = None,
        score: float = 1.0) -> SearchHit:  # fmt: skip
    made = SearchHit(record_id=record, ordinal=ordinal, title=f"title {record}", kind="fact", scope=scope,
                     status="active", access="agent", text=f"text {record}:{ordinal}", sources_json="[]",
                     path=f"/store/records/{record}.md", score=score,
                     scope_rank=2 if scope == HERE else 1 if scope == "global" else 0)  # fmt: skip
    if distance is None:
        made.lexical_match_reason, made.match_reasons = reason, [f"lexical:{reason}"]
    else:
        made.lexical_match_reason, made.vector_distance = "vector", distance
        made.match_reasons = [f"vector:distance={distance:.6f}"]
    return made


def test_scores_are_reciprocal_ranks_plus_boosts() -> None:
    lexical = [hit("a"), hit("b", reason="exact_title")]
    semantic = [hit("b", distance=0.5), hit("c", distance=0.9, scope="global")]
    fused = {h.record_id: h for h in fuse(lexical, semantic, HERE, 10)}
    assert fused["a"].score == pytest.approx(1 / 61 + 0.01)
    assert fused["b"].score == pytest.approx(1 / 62 + 1 / 61 + 0.01 + 0.04)
    assert fused["c"].score == pytest.approx(1 / 62)
    assert fused["b"].match_reasons == [
        "lexical:exact_title", "vector:distance=0.500000", "boost:current_scope", "boost:exact_title"
    ]  # fmt: skip
    assert fused["b"].lexical_match_reason == "exact_title" and fused["b"].vector_distance == 0.5
    assert fused["c"].match_reasons == ["vector:distance=0.900000"] and fused["c"].lexical_match_reason == "vector"
    assert fused["a"].vector_distance is None


def test_one_hit_per_record_shows_the_chunk_both_lists_agree_on() -> None:
    lexical = [hit("a", 0), hit("a", 2), hit("b", 0)]
    semantic = [hit("a", 2, distance=0.3), hit("b", 1, distance=0.4)]
    fused = fuse(lexical, semantic, HERE, 10)
    assert [(h.record_id, h.ordinal) for h in fused] == [("a", 2), ("b", 1)]  # b: vector rank 2 beats lexical rank 3
    assert fused[0].score == pytest.approx(2 / 61 + 0.01)
    assert fused[1].score == pytest.approx(2 / 62 + 0.01)


def test_ordering_is_by_score_then_scope_then_ids_and_the_limit_applies() -> None:
    lexical = [hit("z", scope="global"), hit("y", scope="project:other"), hit("x")]
    fused = fuse(lexical, [], None, 2)
    assert [h.record_id for h in fused] == ["z", "y"]
    tied_scopes = fuse([hit("m", scope="project:other")], [hit("n", distance=0.2, scope="global")], None, 10)
    assert [h.record_id for h in tied_scopes] == ["n", "m"]
    tied_ids = fuse([hit("q")], [hit("p", distance=0.2)], None, 10)
    assert [h.record_id for h in tied_ids] == ["p", "q"]


def test_lexical_tier_order_puts_match_kind_before_scope_and_scope_before_bm25() -> None:
    hits = [
        hit("weak-here", reason="prefix", score=0.55),
        hit("strong-global", scope="global", reason="prefix", score=0.95),
        hit("title-global", scope="global", reason="exact_title", score=3.1),
    ]
    assert [h.record_id for h in sorted(hits, key=by_lexical_tier)] == ["title-global", "weak-here", "strong-global"]
