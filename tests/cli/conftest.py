"""Fixtures for `sbuf` process tests: a fresh sandbox per test with the embedding model already acquired."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Sandbox, link_tree, run_sbuf, sbuf_env


@pytest.fixture(scope="session")
def acquired_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model cache written by one real `sbuf init`, shared by hard links so each test skips the build."""
    base = tmp_path_factory.mktemp("models")
    result = run_sbuf("init", cwd=base, env=sbuf_env(base))
    assert result.returncode == 0, result.stderr
    return base / "cache" / "stormbuffer" / "models"


@pytest.fixture
def sandbox(tmp_path: Path, acquired_models: Path) -> Sandbox:
    box = Sandbox.create(tmp_path)
    link_tree(acquired_models, tmp_path / "cache" / "stormbuffer" / "models")
    return box
