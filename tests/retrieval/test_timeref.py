"""Time references in queries: what is recognised, what is not, and closeness to a window or an order."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from stormbuffer.retrieval.hits import SearchHit
from stormbuffer.retrieval.timeref import closeness, moment, parse

NOW = datetime(2023, 4, 5, 15, 30, tzinfo=UTC)  # a Wednesday


@pytest.mark.parametrize(
    ("query", "described"),
    [
        ("What did I buy four weeks ago?", "window=2023-03-05/2023-03-12"),
        ("a couple of days ago", "window=2023-04-03/2023-04-04"),
        ("in the past 2 weeks", "window=2023-03-22/2023-04-05"),
        ("what happened yesterday", "window=2023-04-04/2023-04-05"),
        ("notes from today", "window=2023-04-05/2023-04-06"),
        ("last week's incident", "window=2023-03-27/2023-04-03"),
        ("this month", "window=2023-04-01/2023-05-01"),
        ("Where did I go last month?", "window=2023-03-01/2023-04-01"),
        ("the budget last year", "window=2022-01-01/2023-01-01"),
        ("what did I cook last Monday", "window=2023-04-03/2023-04-04"),
        ("what did I do last weekend", "window=2023-04-01/2023-04-03"),
        ("the trip in March", "window=2023-03-01/2023-04-01"),
        ("plans for early June", "window=2022-06-01/2022-07-01"),
        ("the call on May 14", "window=2022-05-14/2022-05-15"),
        ("14th of February 2023", "window=2023-02-14/2023-02-15"),
        ("decisions in 2021", "window=2021-01-01/2022-01-01"),
        ("since 2023-03-04", "window=2023-03-04/.."),
        ("changes after January 2023", "window=2023-02-01/.."),
        ("before 2020", "window=../2020-01-01"),
        ("the latest schema version", "order=newest"),
        ("what do I currently use", "order=newest"),
        ("the first time we met", "order=oldest"),
        ("how did I originally configure it", "order=oldest"),
    ],
)
def test_time_references_are_recognised(query: str, described: str) -> None:
    reference = parse(query, NOW)
    assert reference is not None and reference.describe() == described


@pytest.mark.parametrize(
    "query",
    [
        "deploying the service",
        "May I ask about the release checklist?",
        "march the files into the archive",
        "the first step of the runbook",
        "2048 tokens per chunk",
        "when did I move to Berlin",
        "last commit message",
        "",
    ],
)
def test_queries_without_a_time_reference_get_none(query: str) -> None:
    assert parse(query, NOW) is None


def record(record_id: str, created: str, observed: list[str]) -> SearchHit:
    sources = [{"kind": "conversation", "reference": record_id, "actor": "user", "observed_at": when}
               for when in observed]  # fmt: skip
    return SearchHit(record_id=record_id, ordinal=0, title=record_id, kind="fact", scope="project:x",
                     status="active", access="agent", text="", sources_json=json.dumps(sources), path="",
                     created_at=created)  # fmt: skip


def test_a_records_moment_is_its_latest_observation_else_its_creation() -> None:
    assert moment(record("a", "2024-01-01T00:00:00Z", ["2023-02-01T00:00:00Z", "2023-03-01T08:00:00Z"])) == datetime(
        2023, 3, 1, 8, tzinfo=UTC
    )
    assert moment(record("b", "2024-01-01T00:00:00Z", [])) == datetime(2024, 1, 1, tzinfo=UTC)


def test_closeness_is_one_inside_a_window_and_decays_outside() -> None:
    reference = parse("last month", NOW)
    assert reference is not None
    hits = {
        "inside": record("inside", "2023-03-15T00:00:00Z", []),
        "a_month_off": record("a_month_off", "2023-05-01T00:00:00Z", []),
        "far": record("far", "2020-01-01T00:00:00Z", []),
    }
    near = closeness(reference, hits)
    assert near["inside"] == 1.0
    assert near["a_month_off"] == pytest.approx(2.718281828 ** -(30 / 31), rel=1e-6)  # a gap of one window width
    assert near["far"] == 0.0  # below 0.01 counts as nothing


def test_an_order_ranks_candidates_between_oldest_and_newest() -> None:
    years = {"old": "2021-01-01T00:00:00Z", "mid": "2022-01-01T00:00:00Z", "new": "2023-01-01T00:00:00Z"}
    hits = {name: record(name, when, []) for name, when in years.items()}
    newest, oldest = parse("the latest one", NOW), parse("the earliest one", NOW)
    assert newest is not None and oldest is not None
    assert closeness(newest, hits) == {"old": 0.0, "mid": pytest.approx(365 / 730), "new": 1.0}
    assert closeness(oldest, hits)["old"] == 1.0
    same = {name: record(name, "2021-01-01T00:00:00Z", []) for name in ("a", "b")}
    assert closeness(newest, same) == {"a": 0.0, "b": 0.0}
