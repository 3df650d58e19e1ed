"""Fixtures shared by every test package: the real embedding model, built once per test run, the real
PostgreSQL server, started once per test run, and the stop of any daemon a test started."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stormbuffer.embedding import DEFAULT_VARIANT, Embedder, acquire_model, load_embedder
from tests.helpers import ENVIRONMENTS, run_sbuf, sbuf_env, stop_daemons
from tests.postgres import PostgresServer, PostgresUnavailable


@pytest.fixture(autouse=True, scope="module")
def no_daemon_left_by_the_module() -> Iterator[None]:
    """Every test module ends with no daemon running: any that a test environment started is stopped."""
    yield
    stop_daemons()


@pytest.fixture(autouse=True)
def no_daemon_left_by_the_test() -> Iterator[None]:
    """Every test ends with no daemon of its own running; daemons of the module's shared environments
    (made before the test) serve the module's later tests too."""
    before = set(ENVIRONMENTS)
    yield
    stop_daemons(keep=before)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`model_cache(variant)` acquires `variant` once per run into a shared cache and returns the cache dir."""
    cache_dir = tmp_path_factory.mktemp("model-cache")
    acquired: set[str] = set()

    def acquired_cache(variant: str) -> Path:
        if variant not in acquired:
            acquire_model(cache_dir, variant=variant)
            acquired.add(variant)
        return cache_dir

    return acquired_cache


@pytest.fixture(scope="session")
def embedder(model_cache: Callable[[str], Path]) -> Embedder:
    """The default model variant, loaded once per run."""
    return load_embedder(model_cache(DEFAULT_VARIANT))


@pytest.fixture(scope="session")
def acquired_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model cache written by one real `sbuf init`, shared by hard links so each test skips the build."""
    base = tmp_path_factory.mktemp("models")
    result = run_sbuf("init", cwd=base, env=sbuf_env(base))
    assert result.returncode == 0, result.stderr
    return base / "cache" / "stormbuffer" / "models"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL server with pgvector for the whole run (`tests/postgres.py`); a test that
    needs it fails with the reason when it cannot start."""
    try:
        server = PostgresServer.start()
    except PostgresUnavailable as exc:
        pytest.fail(f"the PostgreSQL test server did not start: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a fresh, empty database (with pgvector) of its own for this test."""
    return postgres_server.create_database()


@pytest.fixture
def postgres_copy(postgres_server: PostgresServer) -> Callable[[str], str]:
    """`postgres_copy(url)`: the URL of a new database holding what the database of `url` holds, for a
    copy of a sandbox whose stores live there (nothing may be connected to that database meanwhile)."""
    return postgres_server.copy_database
