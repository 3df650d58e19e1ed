"""Score fusion of hand-made ranked lists: normalised parts, boosts, one hit per record, reasons, order,
and properties that hold for any lists."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormbuffer.retrieval.fusion import LEXICAL_WEIGHT, fuse
from stormbuffer.retrieval.hits import SearchHit, by_lexical_tier
from stormbuffer.retrieval.timeref import TIME_WEIGHT, parse

HERE = "project:here"


def hit(record: str, ordinal: int = 0, *, scope: str = HERE, reason: str = "prefix", distance: float | None = None,
        bm25: float = 1.0, score: float = 1.0, observed: str | None = None) -> SearchHit:  # fmt: skip
    source = {"kind": "conversation", "reference": record, "actor": "user"}
    if observed is not None:
        source["observed_at"] = observed
    made = SearchHit(record_id=record, ordinal=ordinal, title=f"title {record}", kind="fact", scope=scope,
                     status="active", access="agent", text=f"text {record}:{ordinal}",
                     sources_json=json.dumps([source]), path=f"/store/records/{record}.md", score=score,
                     scope_rank=2 if scope == HERE else 1 if scope == "global" else 0,
                     created_at="2024-01-01T00:00:00Z")  # fmt: skip
    if distance is None:
        made.lexical_match_reason, made.match_reasons, made.bm25 = reason, [f"lexical:{reason}"], bm25
    else:
        made.lexical_match_reason, made.vector_distance = "vector", distance
        made.match_reasons = [f"vector:distance={distance:.6f}"]
    return made


def similarity(distance: float) -> float:
    return 1 - distance**2 / 2


def test_scores_combine_normalised_parts_plus_boosts() -> None:
    lexical = [hit("a", bm25=8.0), hit("b", reason="exact_title", bm25=4.0)]
    semantic = [hit("b", distance=0.5), hit("c", distance=0.9, scope="global"), hit("d", distance=1.5)]
    fused = {h.record_id: h for h in fuse(lexical, semantic, HERE, 10)}
    vector_c = similarity(0.9) / similarity(0.5)
    assert fused["a"].score == pytest.approx(LEXICAL_WEIGHT * 1.0 + 0.1)
    assert fused["b"].score == pytest.approx(LEXICAL_WEIGHT * 0.5 + (1 - LEXICAL_WEIGHT) * 1.0 + 0.1 + 1.0)
    assert fused["c"].score == pytest.approx((1 - LEXICAL_WEIGHT) * vector_c)
    assert fused["d"].score == pytest.approx(0.1)  # a negative cosine counts 0
    assert fused["b"].match_reasons == [
        "lexical:exact_title", "vector:distance=0.500000", "fusion:lexical=0.500,vector=1.000",
        "boost:current_scope", "boost:exact_title",
    ]  # fmt: skip
    assert fused["b"].lexical_match_reason == "exact_title" and fused["b"].vector_distance == 0.5
    assert fused["c"].match_reasons == ["vector:distance=0.900000", f"fusion:lexical=0.000,vector={vector_c:.3f}"]
    assert fused["c"].lexical_match_reason == "vector" and fused["a"].vector_distance is None


def test_a_clear_lexical_winner_keeps_its_lead_where_rank_fusion_lost_it() -> None:
    # "a" is far ahead lexically and fourth by meaning; "b" is the vector's first and a distant second
    # lexically. Reciprocal-rank fusion (k = 60) put "b" first: 1/61 + 1/62 > 1/61 + 1/64.
    lexical = [hit("a", bm25=12.0), hit("b", bm25=3.0), hit("c", bm25=2.5)]
    semantic = [hit("b", distance=0.80), hit("x", distance=0.81), hit("y", distance=0.82), hit("a", distance=0.83)]
    assert [h.record_id for h in fuse(lexical, semantic, HERE, 3)][:2] == ["a", "b"]


def test_one_hit_per_record_shows_the_chunk_with_the_best_combined_score() -> None:
    lexical = [hit("a", 0, bm25=5.0), hit("a", 2, bm25=4.0), hit("b", 0, bm25=1.0)]
    semantic = [hit("a", 2, distance=0.3), hit("b", 1, distance=0.4), hit("c", 0, distance=1.0)]
    fused = fuse(lexical, semantic, HERE, 10)
    assert [(h.record_id, h.ordinal) for h in fused] == [("a", 2), ("b", 1), ("c", 0)]
    assert fused[0].match_reasons[2] == "fusion:lexical=1.000,vector=1.000"  # the record's best of each side


def test_lexical_parts_are_normalised_per_scope() -> None:
    lexical = [hit("here", bm25=9.0), hit("there", bm25=0.9, scope="global")]
    fused = {h.record_id: h for h in fuse(lexical, [], None, 10)}
    assert fused["here"].score == pytest.approx(fused["there"].score) == pytest.approx(LEXICAL_WEIGHT)


def test_ordering_is_by_score_then_scope_then_ids_and_the_limit_applies() -> None:
    lexical = [hit("z", bm25=3.0), hit("y", bm25=2.0), hit("x", bm25=1.0)]
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


def test_a_time_reference_prefers_records_near_it_and_says_so() -> None:
    now = datetime(2023, 4, 1, 12, tzinfo=UTC)
    lexical = [hit("old", bm25=2.0, observed="2022-11-02T10:00:00Z"), hit("recent", bm25=2.0,
               observed="2023-03-09T10:00:00Z")]  # fmt: skip
    reference = parse("what did I buy three weeks ago", now)
    assert reference is not None
    plain = fuse(lexical, [], HERE, 10)
    timed = fuse(lexical, [], HERE, 10, reference)
    assert [h.record_id for h in plain] == ["old", "recent"]  # a tie: record ids decide
    assert [h.record_id for h in timed] == ["recent", "old"]
    assert timed[0].match_reasons[-1] == "time:window=2023-03-08/2023-03-15,closeness=1.00"
    assert timed[0].score == pytest.approx(plain[1].score + TIME_WEIGHT)
    assert not any(reason.startswith("time:") for reason in timed[1].match_reasons)  # far away: no boost


def scored_lists() -> st.SearchStrategy[tuple[list[SearchHit], list[SearchHit]]]:
    records = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8)
    lexical = records.flatmap(
        lambda ids: st.lists(st.floats(0.01, 50), min_size=len(ids), max_size=len(ids)).map(
            lambda scores: sorted((hit(r, bm25=s) for r, s in zip(ids, scores, strict=True)), key=lambda h: -h.bm25)
        )
    )
    semantic = records.flatmap(lambda ids: st.lists(st.floats(0, 2), min_size=len(ids), max_size=len(ids)).map(
        lambda distances: sorted((hit(r, distance=d) for r, d in zip(ids, distances, strict=True)),
                                 key=lambda h: h.vector_distance or 0)))  # fmt: skip
    return st.tuples(lexical, semantic)


@settings(max_examples=200, deadline=None)
@given(scored_lists(), st.integers(1, 10))
def test_fusion_properties(lists: tuple[list[SearchHit], list[SearchHit]], limit: int) -> None:
    lexical, semantic = lists
    fused = fuse(lexical, semantic, None, limit)
    ids = [h.record_id for h in fused]
    candidates = {h.record_id for h in lexical + semantic}
    assert len(ids) == len(set(ids)) == min(limit, len(candidates))  # one hit per record, up to the limit
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)
    assert all(-1e-9 <= h.score <= 1 + 1e-9 for h in fused)  # no boost applies: a convex combination
    strict_tops = [side[0].record_id for side, value in ((lexical, lambda h: h.bm25), (semantic, lambda h: -(
        h.vector_distance or 0))) if side and all(value(side[0]) > value(other) for other in side[1:])]  # fmt: skip
    if len(strict_tops) == 2 and strict_tops[0] == strict_tops[1]:
        assert ids[0] == strict_tops[0]  # a record strictly first on both sides is first
    for h in fused:
        assert any(reason.startswith("fusion:lexical=") for reason in h.match_reasons)


@settings(max_examples=100, deadline=None)
@given(scored_lists(), st.sampled_from("abcdefgh"), st.floats(1.5, 10))
def test_a_higher_bm25_never_lowers_a_record(lists: tuple[list[SearchHit], list[SearchHit]], target: str,
                                             factor: float) -> None:  # fmt: skip
    lexical, semantic = lists
    if target not in {h.record_id for h in lexical}:
        return
    before = [h.record_id for h in fuse(lexical, semantic, None, 10)]
    raised = sorted((hit(h.record_id, bm25=h.bm25 * (factor if h.record_id == target else 1)) for h in lexical),
                    key=lambda h: -h.bm25)  # fmt: skip
    after = [h.record_id for h in fuse(raised, semantic, None, 10)]
    assert after.index(target) <= before.index(target)
