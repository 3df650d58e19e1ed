"""Off a terminal, a long sync says where it is on stderr at a steady pace, and a quick one says nothing."""

from __future__ import annotations

import time

import pytest

from stormbuffer.cli import index as cli_index
from stormbuffer.index.sync import SyncReport


def test_a_long_sync_prints_its_latest_count_every_interval(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli_index, "LINE_EVERY_S", 0.05)
    with cli_index._progress_lines() as update:
        time.sleep(0.12)  # nothing reported yet: no line
        update("embedding", 8, 40, SyncReport())
        time.sleep(0.12)
        update("embedding", 16, 40, SyncReport())
        time.sleep(0.12)
    lines = capsys.readouterr().err.splitlines()
    assert lines and all(line.startswith(("Embedding: 8/40 (", "Embedding: 16/40 (")) for line in lines)
    assert lines[-1].startswith("Embedding: 16/40 (") and any(line.startswith("Embedding: 8/40") for line in lines)


def test_a_quick_sync_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with cli_index._progress_lines() as update:
        update("indexing", 1, 1, SyncReport())
    assert capsys.readouterr().err == ""
