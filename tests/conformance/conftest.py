"""The environment the conformance tests start the kit from: the real doors of this virtual
environment first on PATH, and a cache holding the prepared model (linked, never rebuilt)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.embedding import DEFAULT_VARIANT
from tests.helpers import sbuf_env

BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def caller_env(tmp_path_factory: pytest.TempPathFactory, model_cache: Callable[[str], Path]) -> dict[str, str]:
    base = tmp_path_factory.mktemp("caller")
    env = sbuf_env(base)
    shared = Path(env["XDG_CACHE_HOME"]) / "stormbuffer"
    shared.mkdir(parents=True)
    (shared / "models").symlink_to(model_cache(DEFAULT_VARIANT) / "models", target_is_directory=True)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return env
