"""Hybrid and semantic retrieval with the real embedding model, and every way it falls back to lexical."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from stormbuffer.core.codec import render_markdown
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.stores import StorePaths, View, record_scope
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.embedding import Embedder, EmbeddingFailed
from stormbuffer.engines.directory.projection import MatrixSearch
from stormbuffer.index.chunking import chunk_body, sentence_spans
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import ContextOptions, SearchOptions, context, ready_for_retrieval, search
from stormbuffer.retrieval.hits import FALLBACK_REASONS
from tests.helpers import lock_held_elsewhere
from tests.stores import make_store, write_record

CORPUS = {
    "Database backups": "Nightly snapshots of the Postgres cluster are copied to cold storage and kept for 30 days.",
    "Release checklist": "Before tagging a release, run the full test suite and update the changelog.",
    "Coffee machine": "The espresso grinder in the kitchen must be cleaned every Friday afternoon.",
    "Onboarding": "New engineers pair with a buddy for their first two weeks and shadow on-call.",
    "Incident paging": "When production alerts fire at night, the on-call engineer is woken by a phone call.",
}


class FailingEmbedder:
    """The real model's identity and tokenizer, but embedding fails (a broken runtime)."""

    def __init__(self, real: Embedder) -> None:
        self._real = real
        self.model_id, self.model_version = real.model_id, real.model_version
        self.model_checksum, self.dimension, self.max_tokens = real.model_checksum, real.dimension, real.max_tokens

    def token_count(self, text: str) -> int:
        return self._real.token_count(text)

    def embed(self, texts: list[str]) -> np.ndarray:
        raise EmbeddingFailed("the embedding model failed to run")


@pytest.fixture
def store(tmp_path: Path, embedder: Embedder) -> StorePaths:
    paths = make_store(tmp_path)
    for title, body in CORPUS.items():
        write_record(paths, title, body)
    assert sync_store(paths, embedder).embedded == len(CORPUS)
    return paths


def test_a_paraphrase_is_found_by_meaning(store: StorePaths, embedder: Embedder) -> None:
    hits = search([store], "pager duty outages overnight", embedder=embedder)
    assert hits[0].title == "Incident paging"
    assert any(reason.startswith("vector:distance=") for reason in hits[0].match_reasons)
    assert hits[0].vector_distance is not None and 0 <= hits[0].vector_distance <= 2
    lexical = search([store], "pager duty outages overnight", SearchOptions(mode="lexical"))
    assert "Incident paging" not in [hit.title for hit in lexical]


def test_a_hit_found_both_ways_has_both_reasons(store: StorePaths, embedder: Embedder) -> None:
    hits = search([store], "how long are database snapshots kept", embedder=embedder)
    top = hits[0]
    assert top.title == "Database backups"
    reasons = top.match_reasons
    assert reasons[0].startswith("lexical:") and reasons[1].startswith("vector:distance=")
    assert f"{top.vector_distance:.6f}" == reasons[1].split("=")[1]
    assert "boost:current_scope" in reasons
    assert len({hit.record_id for hit in hits}) == len(hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_hybrid_receipt(store: StorePaths, embedder: Embedder) -> None:
    result = context([store], "cleaning the espresso grinder", ContextOptions(budget=40), embedder=embedder)
    receipt = result.receipt
    assert result.blocks[0].hit.title == "Coffee machine"
    assert receipt["retrieval_mode"] == "hybrid" and receipt["semantic_fallback"] is None
    assert (receipt["embedding_model"], receipt["embedding_version"]) == (embedder.model_id, embedder.model_version)
    assert receipt["index_version"] == 6 and receipt["used_tokens"] <= 40
    assert receipt["current_scope"] == record_scope(store) and receipt["scopes"] == [record_scope(store)]


def test_semantic_mode_ranks_by_similarity_only(store: StorePaths, embedder: Embedder) -> None:
    hits = search([store], "phone call at night for alerts", SearchOptions(mode="semantic"), embedder=embedder)
    assert hits[0].title == "Incident paging"
    assert all(hit.lexical_match_reason == "vector" and len(hit.match_reasons) == 1 for hit in hits)


@pytest.mark.parametrize("reason", FALLBACK_REASONS)
def test_without_an_embedder_the_callers_reason_is_reported(store: StorePaths, reason: str) -> None:
    receipt = context([store], "release checklist", fallback=reason).receipt
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("lexical", reason)
    assert receipt["embedding_model"] is None and receipt["embedding_version"] is None


def test_a_failing_model_falls_back_to_lexical(store: StorePaths, embedder: Embedder) -> None:
    result = context([store], "release checklist", embedder=FailingEmbedder(embedder))  # type: ignore[arg-type]
    assert result.receipt["semantic_fallback"] == "embedding_execution_failed"
    assert result.receipt["retrieval_mode"] == "lexical"
    assert [block.hit.title for block in result.blocks] == ["Release checklist"]
    write_record(store, "Fresh", "A new release note that needs a vector.")
    assert sync_store(store, FailingEmbedder(embedder)).vector_failure == "embedding_execution_failed"  # type: ignore[arg-type]


def test_stale_vectors_fall_back_until_the_next_sync_with_the_model(store: StorePaths, embedder: Embedder) -> None:
    write_record(store, "Vacation policy", "Employees get twenty five days of paid leave per year.")
    sync_store(store)
    stale = context([store], "paid leave", embedder=embedder).receipt
    assert (stale["retrieval_mode"], stale["semantic_fallback"]) == ("lexical", "vector_projection_unavailable")
    assert sync_store(store, embedder).embedded == 1
    fresh = context([store], "how many holidays do staff have", embedder=embedder)
    assert fresh.receipt["retrieval_mode"] == "hybrid" and fresh.blocks[0].hit.title == "Vacation policy"


def test_a_busy_projection_is_read_as_it_is(store: StorePaths, embedder: Embedder) -> None:
    write_record(store, "Parking", "Visitors park in the north garage, level two.")
    with lock_held_elsewhere(store.projection_lock):
        prepared = ready_for_retrieval([store], lambda: (embedder, None))
        assert prepared.fallback == "vector_projection_busy" and prepared.complete
        fresh = context([store], "release checklist", embedder=embedder, fallback=prepared.fallback)
        assert fresh.receipt["retrieval_mode"] == "hybrid"
        assert fresh.blocks[0].hit.title == "Release checklist"
    sync_store(store)  # the parking record is indexed lexically; its vector is still missing
    prepared_again = context([store], "north garage", embedder=embedder, fallback="vector_projection_busy")
    assert prepared_again.receipt["semantic_fallback"] == "vector_projection_busy"
    assert [block.hit.title for block in prepared_again.blocks] == ["Parking"]


def test_filters_apply_before_vector_ranking(tmp_path: Path, embedder: Embedder) -> None:
    paths = make_store(tmp_path)
    for n in range(30):
        write_record(paths, f"Kubernetes fact {n}", f"Pods in namespace {n} restart when the liveness probe fails.")
    write_record(paths, "Restart procedure", "To restart a stuck service, drain the node first.", kind="procedure")
    write_record(paths, "Hidden note", "Human-only note on restarting stuck services.", access="human")
    sync_store(paths, embedder)
    options = SearchOptions(limit=1, kinds=("procedure",), mode="semantic")
    (hit,) = search([paths], "pods restarting after probe failures", options, embedder=embedder)
    assert hit.title == "Restart procedure"
    agents = search([paths], "restarting stuck services", SearchOptions(access=("agent",)), embedder=embedder)
    assert "Hidden note" not in [hit.title for hit in agents]
    assert search([paths], "restart", SearchOptions(scopes=("project:other",)), embedder=embedder) == []


def test_current_scope_wins_between_equal_project_and_global_memories(tmp_path: Path, embedder: Embedder) -> None:
    project = make_store(tmp_path, View.PROJECT)
    glob = make_store(tmp_path, View.GLOBAL)
    for paths in (glob, project):
        write_record(paths, "Branch naming", "Feature branches are named after the ticket number.")
        sync_store(paths, embedder)
    hits = search([project, glob], "how should branches be named", embedder=embedder)
    assert [hit.scope for hit in hits] == [record_scope(project), "global"]
    assert "boost:current_scope" in hits[0].match_reasons and "boost:current_scope" not in hits[1].match_reasons


def test_long_queries_are_embedded_from_their_leading_words(store: StorePaths, embedder: Embedder) -> None:
    query = ("nightly postgres snapshots cold storage " * 120)[:2048]
    result = context([store], query, embedder=embedder)
    assert result.receipt["retrieval_mode"] == "hybrid"
    assert result.blocks[0].hit.title == "Database backups"


def test_identical_searches_give_identical_results(store: StorePaths, embedder: Embedder) -> None:
    first = [hit.to_json() for hit in search([store], "engineers on call", embedder=embedder)]
    assert first == [hit.to_json() for hit in search([store], "engineers on call", embedder=embedder)]


def test_a_query_naming_a_time_prefers_records_observed_then(tmp_path: Path, embedder: Embedder) -> None:
    paths = make_store(tmp_path)
    created = Timestamp.parse("2026-08-01T00:00:00Z")
    for title, observed in (("Standup June", "2026-06-10T09:00:00Z"), ("Standup July", "2026-07-15T09:00:00Z")):
        source = Source("conversation", title, "user", observed_at=Timestamp.parse(observed))
        record = Record(id=new_record_id(), title=title, kind="fact", scope=record_scope(paths), status="active",
                        access="agent", created_at=created, updated_at=created, sources=(source,),
                        body="We agreed to move the release train to Thursdays.")  # fmt: skip
        (paths.records / f"{record.id}.md").write_text(render_markdown(record), encoding="utf-8")
    sync_store(paths, embedder)
    options = SearchOptions(now=datetime(2026, 8, 5, 12, tzinfo=UTC))
    timed = search([paths], "what did we agree about the release train last month", options, embedder=embedder)
    assert timed[0].title == "Standup July"
    assert timed[0].match_reasons[-1] == "time:window=2026-07-01/2026-08-01,closeness=1.00"
    june = next(hit for hit in timed if hit.title == "Standup June")
    assert june.match_reasons[-1] == "time:window=2026-07-01/2026-08-01,closeness=0.51"  # 20.6 days before it
    plain = search([paths], "what did we agree about the release train", options, embedder=embedder)
    assert all(not reason.startswith("time:") for hit in plain for reason in hit.match_reasons)


def test_lexical_candidates_past_the_nearest_rows_are_fused_with_their_own_similarity(
    store: StorePaths, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record the lexical side finds but the vector list left out (it holds the nearest records
    only) is weighed by its real similarity to the query, never by none."""
    query = "snapshots release espresso engineers production"  # a word of every record
    options = SearchOptions(limit=len(CORPUS))
    by_meaning = search([store], query, SearchOptions(limit=len(CORPUS), mode="semantic"), embedder=embedder)
    semantic = {hit.record_id: hit.vector_distance for hit in by_meaning}
    real = MatrixSearch.nearest
    monkeypatch.setattr(MatrixSearch, "nearest", lambda self, vector, opts, _records: real(self, vector, opts, 2))
    hits = search([store], query, options, embedder=embedder)
    assert len(hits) == len(CORPUS) == len(semantic)
    for hit in hits:
        assert hit.vector_distance == pytest.approx(semantic[hit.record_id], abs=1e-6)
        assert any(reason.startswith("vector:distance=") for reason in hit.match_reasons)
        vector_part = float(next(r for r in hit.match_reasons if r.startswith("fusion:")).rsplit("vector=", 1)[1])
        assert vector_part > 0


PASSING_MENTION = (
    "I'm trying to plan my week better. Work has been busy and I keep missing the gym in the mornings, so I want "
    "a routine that fits around my meetings. By the way, I finally finished episode 50 of the History of Rome "
    "podcast on my commute yesterday, which took me three months. Can you suggest a schedule that still leaves "
    "time for cooking dinner and some reading in the evenings?"
)


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_chunk_s_similarity_is_raised_halfway_to_its_closest_sentence(
    tmp_path: Path, embedder: Embedder, mode: str
) -> None:
    """A fact said in passing in a long chunk counts for more than the chunk's one averaged vector
    says: its similarity moves halfway to the closest sentence's, and the reasons show both."""
    paths = make_store(tmp_path)
    planned = write_record(paths, "Weekly routine", PASSING_MENTION)
    write_record(paths, "Podcast tips", "Podcasts are a good way to learn during a commute, one episode a day.")
    sync_store(paths, embedder)
    query = "Which podcast episode did I just finish?"
    hits = search([paths], query, SearchOptions(mode=mode), embedder=embedder)
    hit = next(hit for hit in hits if hit.record_id == planned.id)

    asked = embedder.embed([query])[0]
    (chunk,) = chunk_body(planned.title, planned.body, count_tokens=embedder.token_count)
    own = float(embedder.embed([chunk.embed_text])[0] @ asked)
    offset = len(chunk.embed_text) - len(chunk.text)
    spans = [(offset + start, offset + end) for start, end in sentence_spans(chunk.text)]
    closest = float((embedder.embed_spans([chunk.embed_text], [spans])[1][0] @ asked).max())
    assert closest > own
    raised = own + 0.5 * (closest - own)
    assert hit.vector_distance == pytest.approx(math.sqrt(2 - 2 * raised), abs=1e-5)
    assert f"vector:distance={hit.vector_distance:.6f}" in hit.match_reasons
    shown = next(reason for reason in hit.match_reasons if reason.startswith("vector:sentence_distance="))
    assert float(shown.split("=")[1]) == pytest.approx(math.sqrt(2 - 2 * closest), abs=1e-5)
    other = next(hit for hit in hits if hit.record_id != planned.id)  # one sentence: nothing to raise
    assert not any(reason.startswith("vector:sentence_distance=") for reason in other.match_reasons)
