"""The one parser of JSON from outside: nesting bounded at `MAX_DEPTH`, every failure a `ValueError`."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stormbuffer.protocol.jsontext import MAX_DEPTH, TooDeep, loads, too_deep


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


@pytest.mark.parametrize(("open_", "close"), [("[", "]"), ('{"a":', "}")])
def test_the_bound_is_exact(open_: str, close: str) -> None:
    assert loads(nested(MAX_DEPTH, open_, close)) is not None
    with pytest.raises(TooDeep, match=f"more than {MAX_DEPTH} levels"):
        loads(nested(MAX_DEPTH + 1, open_, close))


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000,
        "{" * 200_000,
        '{"a":' * 100_000,
        "[" * (MAX_DEPTH + 1) + '"unterminated',
        '["' + "[" * 50 + '",' + "[" * MAX_DEPTH + "]" * (MAX_DEPTH + 1),  # outside the string: 65 deep
    ],
)
def test_deep_or_broken_text_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)
    with pytest.raises(ValueError):
        loads(text.encode())


def test_brackets_inside_strings_and_escapes_do_not_count() -> None:
    text = json.dumps({"a": "[" * 500, "b": '\\"[{' * 200, "c": [[["x"]]]})
    assert not too_deep(text)
    assert loads(text)["c"] == [[["x"]]]


def test_many_shallow_values_pass() -> None:
    text = json.dumps([[i, {"k": [i]}] for i in range(5_000)])
    assert len(loads(text)) == 5_000


@contextmanager
def stack_left(frames: int) -> Iterator[None]:
    """Only about `frames` more Python frames may be entered."""
    limit = sys.getrecursionlimit()
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back  # type: ignore[assignment]
    sys.setrecursionlimit(depth + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def test_a_recursion_error_under_the_bound_is_answered_as_too_deep() -> None:
    text = nested(MAX_DEPTH - 1)
    with stack_left(40), pytest.raises(TooDeep):
        loads(text)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\ab'),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{"\\'), inner, max_size=3),
        max_leaves=12,
    )
)
def test_the_scan_agrees_with_the_parsed_depth(value: object) -> None:
    def depth(item: object) -> int:
        if isinstance(item, list):
            return 1 + max((depth(x) for x in item), default=0)
        if isinstance(item, dict):
            return 1 + max((depth(x) for x in item.values()), default=0)
        return 0

    for limit in (0, 1, 2, 3, 5):
        assert too_deep(json.dumps(value), limit) == (depth(value) > limit)


def test_depth_carries_across_the_scan_s_chunks() -> None:
    wide = "[1]," * 40_000  # 80,000 brackets: the nesting below spans more than one chunk of the scan
    assert not too_deep("[" * 60 + wide + "1" + "]" * 60)
    assert too_deep("[" * 60 + wide + "[" * 5 + "1" + "]" * 65)
    assert not too_deep("[" * 60 + wide + "[" * 4 + "1" + "]" * 64)
