"""Focused context: blocks weak both lexically and by meaning are left out, whatever budget is left,
and the receipt says how many and why; through the real `sbuf invoke context` and the rule itself."""

from __future__ import annotations

from stormbuffer.retrieval.focus import LEXICAL_SHARE, REASON, SIMILARITY_FLOOR, focus
from stormbuffer.retrieval.hits import SearchHit
from tests.cli.conftest import sandbox  # noqa: F401 - fixture
from tests.mcp.conftest import Store, store  # noqa: F401 - fixture

NOTES = {
    "0190a6b3-7c1e-7a51-9c39-00000000f001": (
        "Kafka retention",
        "Topics keep messages for seven days; the audit topic keeps them for a year.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f002": (
        "Holiday requests",
        "Ask for leave in the HR portal at least two weeks ahead and tell your team lead.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f003": (
        "Docker image builds",
        "Images are built by CI on every merge and pushed to the internal registry with the commit hash as tag.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f004": (
        "API rate limits",
        "The public API allows 100 requests a minute per key; exceeding it returns HTTP 429.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f005": (
        "Database backups",
        "Postgres is snapshotted nightly and snapshots are kept for thirty days in cold storage.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f006": (
        "Branch naming",
        "Feature branches are named after the ticket, for example feat/ABC-123-short-title.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f007": (
        "Sprint planning",
        "Planning happens every second Wednesday; bring estimates for the tickets you own.",
    ),
    "0190a6b3-7c1e-7a51-9c39-00000000f008": (
        "Error budget",
        "The checkout service has a 99.9 percent monthly "
        "availability target; freeze releases when the budget is spent.",
    ),
}


def notes(store: Store) -> None:  # noqa: F811
    for record_id, (title, body) in NOTES.items():
        store.write(record_id, title=title, body=body + "\n")


def recall(store: Store, query: str) -> dict:  # noqa: F811
    envelope = store.invoke("context", {"version": 1, "query": query, "budget": 512}, "--project")
    assert envelope["ok"], envelope
    result: dict = envelope["result"]
    assert result["receipt"]["retrieval_mode"] == "hybrid"
    return result


def test_an_off_topic_query_gets_few_blocks_and_the_receipt_says_why(store: Store) -> None:  # noqa: F811
    notes(store)
    result = recall(store, "a recipe for banana bread with walnuts")
    receipt = result["receipt"]
    assert len(result["blocks"]) <= 1  # the budget had room for every note
    assert receipt["focus"]["reason"] == REASON and receipt["focus"]["omitted"] >= len(NOTES) - 1
    assert receipt["focus"]["similarity_floor"] == SIMILARITY_FLOOR
    assert receipt["omitted_results"] >= receipt["focus"]["omitted"]


def test_an_on_topic_query_still_gets_its_record_first(store: Store) -> None:  # noqa: F811
    notes(store)
    result = recall(store, "how long are database snapshots kept")
    assert result["blocks"][0]["record_id"] == "0190a6b3-7c1e-7a51-9c39-00000000f005"
    assert len(result["blocks"]) < len(NOTES)


def test_every_block_is_kept_when_none_is_weak(store: Store) -> None:  # noqa: F811
    store.write(next(iter(NOTES)), title="Kafka retention", body="Kafka topics keep messages for seven days.\n")
    result = recall(store, "kafka topics retention")
    assert [block["title"] for block in result["blocks"]] == ["Kafka retention"]
    assert "focus" not in result["receipt"]


def hit(name: str, *, lexical_part: float = 0.0, similarity: float | None = None, reason: str = "term") -> SearchHit:
    distance = None if similarity is None else (2.0 - 2.0 * similarity) ** 0.5
    return SearchHit(name, 0, name, "fact", "global", "active", "agent", name, "[]", "", lexical_match_reason=reason,
                     vector_distance=distance, lexical_part=lexical_part)  # fmt: skip


def test_a_hit_strong_on_either_side_is_kept() -> None:
    hits = [
        hit("meaning", similarity=0.62),
        hit("words", lexical_part=LEXICAL_SHARE, similarity=0.05),
        hit("title", reason="exact_title", similarity=0.01),
        hit("half as near", similarity=0.30),  # under half the best similarity
        hit("unrelated", lexical_part=0.2, similarity=SIMILARITY_FLOOR - 0.01),
    ]
    kept = focus(hits, "hybrid")
    assert [found.record_id for found in kept.kept] == ["meaning", "words", "title"]
    assert kept.omitted == 2 and kept.receipt() is not None


def test_the_similarity_floor_holds_even_for_the_best_candidate() -> None:
    kept = focus([hit("nearest of unrelated", similarity=SIMILARITY_FLOOR - 0.05)], "semantic")
    assert kept.kept == [] and kept.omitted == 1


def test_a_lexical_ranking_is_never_cut() -> None:
    hits = [hit("a", lexical_part=0.0), hit("b")]
    assert focus(hits, "lexical").kept == hits and focus(hits, "lexical").receipt() is None
