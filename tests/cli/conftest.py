"""Fixtures for `sbuf` process tests: a fresh sandbox per test with the embedding model already acquired."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Sandbox, link_tree


@pytest.fixture
def sandbox(tmp_path: Path, acquired_models: Path) -> Sandbox:
    box = Sandbox.create(tmp_path)
    link_tree(acquired_models, tmp_path / "cache" / "stormbuffer" / "models")
    return box
