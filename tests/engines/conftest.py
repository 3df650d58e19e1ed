"""Fixtures of the engine tests: a sandbox whose stores may keep their records in the test server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Sandbox, link_tree

VARIABLE = "STORMBUFFER_DATABASE_URL"


@pytest.fixture
def postgresql_sandbox(tmp_path: Path, acquired_models: Path, postgres_url: str) -> Sandbox:
    """A sandbox whose environment names a fresh database; no daemon (each command runs in its process)."""
    box = Sandbox.create(tmp_path)
    link_tree(acquired_models, tmp_path / "cache" / "stormbuffer" / "models")
    box.env.update({VARIABLE: postgres_url, "STORMBUFFER_NO_DAEMON": "1"})
    return box
