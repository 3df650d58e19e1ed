"""The conformance kit as a pytest plugin, loaded through the `pytest11` entry point `stormbuffer`.

Options pick the doors (default: the `sbuf` and `stormbuffer-mcp` on PATH):

    pytest --stormbuffer-invoke "python my_wrapper.py" --stormbuffer-mcp "my-mcp-wrapper"

Fixtures:

- `stormbuffer_store`: the session's throwaway store (`ThrowawayStore`), removed at the end;
- `stormbuffer_place`: a fresh copy of the contract store in it (a `Place`: `cwd` and `env`);
- `stormbuffer_invoke`: an `InvokeClient` for the invoke door in that place (project view);
- `stormbuffer_mcp`: an `McpClient` session with the MCP door in that place (project view, all writes);
- `stormbuffer_check`: one check of the kit per test, parametrized over every check the doors allow.

A test module of the integrator's needs one line to run the whole contract:

    def test_stormbuffer_contract(stormbuffer_check):
        stormbuffer_check()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stormbuffer.client import InvokeClient, McpClient

    from .checks import Run
    from .store import Place, ThrowawayStore

DEFAULT_INVOKE = "sbuf"
DEFAULT_MCP = "stormbuffer-mcp"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stormbuffer", "Stormbuffer protocol conformance")
    group.addoption(
        "--stormbuffer-invoke",
        metavar="CMD",
        default=None,
        help=f"the invoke door: `CMD --project invoke <operation>` (default {DEFAULT_INVOKE})",
    )
    group.addoption("--stormbuffer-mcp", metavar="CMD", default=None,
                    help=f"the MCP door: `CMD --stdio --project [grant]` (default {DEFAULT_MCP})")  # fmt: skip


def _doors(config: pytest.Config) -> tuple[list[str], list[str]]:
    from .doors import parse_command

    invoke = config.getoption("--stormbuffer-invoke") or DEFAULT_INVOKE
    mcp = config.getoption("--stormbuffer-mcp") or DEFAULT_MCP
    return parse_command(invoke), parse_command(mcp)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "stormbuffer_check" not in metafunc.fixturenames:
        return
    from .runner import select

    checks = select({"invoke", "mcp"})
    metafunc.parametrize("stormbuffer_check", checks, ids=[check.id for check in checks], indirect=True)


@pytest.fixture(scope="session")
def stormbuffer_store() -> Iterator[ThrowawayStore]:
    from .store import ThrowawayStore

    with ThrowawayStore() as store:
        yield store


@pytest.fixture
def stormbuffer_place(stormbuffer_store: ThrowawayStore) -> Place:
    return stormbuffer_store.place()


@pytest.fixture
def stormbuffer_invoke(request: pytest.FixtureRequest, stormbuffer_place: Place) -> InvokeClient:
    from stormbuffer.client import InvokeClient

    invoke, _ = _doors(request.config)
    return InvokeClient(invoke, view="project", cwd=stormbuffer_place.cwd, env=stormbuffer_place.env)


@pytest.fixture
def stormbuffer_mcp(request: pytest.FixtureRequest, stormbuffer_place: Place) -> Iterator[McpClient]:
    from stormbuffer.client.mcp import McpClient

    _, mcp = _doors(request.config)
    with McpClient(mcp, view="project", writes="all", cwd=stormbuffer_place.cwd, env=stormbuffer_place.env) as client:
        yield client


@pytest.fixture(scope="session")
def stormbuffer_run(request: pytest.FixtureRequest, stormbuffer_store: ThrowawayStore) -> Iterator[Run]:
    """One kit run shared by every `stormbuffer_check` test of the session (those selected)."""
    from .checks import Run

    params = (getattr(getattr(item, "callspec", None), "params", {}) for item in request.session.items)
    chosen = [found["stormbuffer_check"].id for found in params if "stormbuffer_check" in found]
    run = Run(stormbuffer_store, *_doors(request.config), selected=chosen)
    try:
        yield run
    finally:
        run.close()


@pytest.fixture
def stormbuffer_check(request: pytest.FixtureRequest, stormbuffer_run: Run) -> Callable[[], None]:
    """Calling it runs this test's check; a failure fails the test with the check's reason."""
    from .runner import run_check

    def check() -> None:
        outcome = run_check(request.param, stormbuffer_run)
        if not outcome.passed:
            pytest.fail(f"{outcome.id}: {outcome.reason}", pytrace=False)

    return check
