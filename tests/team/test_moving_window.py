"""The moving window that holds each team token to its rate, as a unit: the allowance, its return
once the window has moved past the oldest request, `Retry-After`, and forgetting idle tokens; and
the same window in the file worker processes share."""

from __future__ import annotations

import time
from pathlib import Path

from stormbuffer.adapters.http.ratelimit import MovingWindow, Rate, SharedWindow


def test_a_name_gets_its_allowance_then_waits_for_the_oldest_request_to_leave_the_window() -> None:
    window = MovingWindow(Rate(3, "second"))
    assert [window.hit("alice") for _ in range(3)] == [True] * 3
    assert window.hit("alice") is False
    assert window.hit("bob") is True  # a window per name
    assert window.retry_after("alice") == 1
    time.sleep(1.05)
    assert window.hit("alice") is True
    assert [window.hit("alice") for _ in range(3)] == [True, True, False]


def test_refused_requests_do_not_count_and_names_idle_for_a_window_are_forgotten() -> None:
    window = MovingWindow(Rate(2, "second"))
    assert [window.hit("alice") for _ in range(5)] == [True, True, False, False, False]
    window.hit("bob")
    time.sleep(1.05)
    assert window.hit("carol") is True  # the first count after a window sweeps the idle names
    assert set(window._times) == {"carol"}
    assert [window.hit("alice") for _ in range(3)] == [True, True, False]


def test_retry_after_is_at_least_one_second() -> None:
    window = MovingWindow(Rate(1, "hour"))
    assert window.retry_after("nobody") == 1
    assert window.hit("alice") is True
    assert 3599 <= window.retry_after("alice") <= 3600


def test_windows_sharing_a_file_count_together(tmp_path: Path) -> None:
    first, second = SharedWindow(Rate(4, "second"), tmp_path), SharedWindow(Rate(4, "second"), tmp_path)
    assert [window.hit("alice") for window in (first, second, first, second)] == [True] * 4
    assert first.hit("alice") is False and second.hit("alice") is False  # refused on both, not counted
    assert second.hit("bob") is True
    assert first.retry_after("alice") == 1 and second.retry_after("nobody") == 1
    time.sleep(1.05)
    assert [second.hit("alice") for _ in range(5)] == [True] * 4 + [False]
    assert (tmp_path / "team" / "ratelimit.sqlite3").exists()
