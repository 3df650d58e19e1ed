"""A team server for one test module: a fresh sandbox's project store with records written by
hand, `sbuf serve --team` on it, and team tokens by holder name."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests.http.conftest import sandbox_with_stores, start

from .test_server import Team


@contextmanager
def serving_team(base: Path, models: Path | None, roles: Mapping[str, str],
                 records: Mapping[str, tuple[str, str]]) -> Iterator[Team]:  # fmt: skip
    """The server (stopped cleanly afterwards) with a token per `roles` entry (name → role) and the
    `records` (id → title, body) in its store, agent-readable."""
    server = start(sandbox_with_stores(base, models), "--team")
    team = Team(server)
    for name, role in roles.items():
        team.make(name, role)
    for record_id, (title, body) in records.items():
        server.write(record_id, title=title, body=body)
    yield team
    assert server.stop() == 0
