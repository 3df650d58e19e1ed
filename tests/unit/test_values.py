"""Timestamps, ids, scopes and the lifecycle table."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stormbuffer.core.ids import new_record_id, parse_record_id
from stormbuffer.core.records import can_transition, normalize
from stormbuffer.core.scopes import parse_scope
from stormbuffer.core.timestamps import Timestamp


@pytest.mark.parametrize(
    "text",
    [
        "2026-08-05T20:09:00-05:00",
        "2026-08-06T06:51:33.260742Z",
        "2026-08-13T17:34:56.123456789Z",
        "1999-12-31T23:59:59+05:30",
    ],
)
def test_timestamps_keep_offset_and_precision(text: str) -> None:
    assert Timestamp.parse(text).render() == text


def test_timestamps_compare_instants_and_normalise_utc() -> None:
    assert Timestamp.parse("2026-08-05T20:09:00-05:00") == Timestamp.parse("2026-08-06T01:09:00Z")
    assert Timestamp.parse("2026-08-06T01:09:00+00:00").render() == "2026-08-06T01:09:00Z"
    assert Timestamp.parse("2026-01-01T00:00:00.5Z") < Timestamp.parse("2026-01-01T00:00:00.500000001Z")


@pytest.mark.parametrize(
    "text",
    ["not-a-timestamp", "2026-08-05 20:09:00Z", "2026-08-05T20:09Z", "20260805T200900Z", "2026-02-30T00:00:00Z",
     "2026-08-05T20:09:00", "2026-08-05T20:09:00.1234567891Z", "2026-08-05T24:00:00Z"],
)  # fmt: skip
def test_lenient_timestamps_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="RFC 3339"):
        Timestamp.parse(text)


def test_now_has_nanosecond_precision_in_utc() -> None:
    now = Timestamp.now()
    assert now.offset_minutes == 0 and now.render().endswith("Z")
    assert Timestamp.parse(now.render()) == now


def test_record_ids() -> None:
    assert parse_record_id("01989AF2-4305-7B19-88B1-E8AE4EA9A02C") == "01989af2-4305-7b19-88b1-e8ae4ea9a02c"
    for bad in ["", " 01989af2-4305-7b19-88b1-e8ae4ea9a02c", "nope", "00000000-0000-0000-0000-000000000000"]:
        with pytest.raises(ValueError):
            parse_record_id(bad)


def test_new_ids_are_version_7_and_ordered() -> None:
    ids = [new_record_id() for _ in range(50)]
    assert all(uuid.UUID(value).version == 7 for value in ids)
    assert len(set(ids)) == 50
    assert [value[:13] for value in ids] == sorted(value[:13] for value in ids)


def test_scopes() -> None:
    assert parse_scope("global") == "global"
    assert parse_scope("project:alpha") == "project:alpha"
    for bad in ["", "project:", "project:bad scope", "project:a:b", "team:x", " global"]:
        with pytest.raises(ValueError):
            parse_scope(bad)


def test_lifecycle_transitions() -> None:
    assert can_transition("candidate", "active") and can_transition("candidate", "archived")
    assert not can_transition("candidate", "superseded")
    assert can_transition("active", "archived") and can_transition("archived", "active")
    assert can_transition("active", "superseded") and not can_transition("superseded", "active")


@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)
