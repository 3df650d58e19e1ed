"""The MCP over Streamable HTTP door: the kit against a real `sbuf serve --team`, with a team token
from `STORMBUFFER_TOKEN`; a server without that door fails it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormbuffer.conformance import select
from tests.http.conftest import Server, sandbox_with_stores, start

from .test_http import failed
from .test_kit import conformance


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("conformance-team") / "sandbox", None)
    made = box.sbuf("--project", "team", "token", "create", "--name", "kit", "--role", "agent")
    assert made.returncode == 0, made.stderr
    server = start(box, "--team")
    yield server, made.stdout.splitlines()[-1]
    assert server.stop() == 0


def test_the_kit_passes_against_a_team_servers_mcp(team: tuple[Server, str], caller_env: dict[str, str]) -> None:
    server, token = team
    records = sorted((server.box.project_root / "records").iterdir())
    done = conformance("--mcp-http", f"{server.base_url}/mcp", "--json",
                       env={**caller_env, "STORMBUFFER_TOKEN": token})  # fmt: skip
    report = json.loads(done.stdout)
    assert failed(report) == [] and done.returncode == 0
    ids = [check["id"] for check in report["checks"]]
    assert ids == [check.id for check in select({"mcp-http"})]
    assert {"mcp-http.unauthorized", "mcp-http.tools", "mcp-http.sanitized", "mcp-http.structured-content"} <= set(ids)
    assert token not in done.stdout + done.stderr
    assert sorted((server.box.project_root / "records").iterdir()) == records  # its probes wrote nothing
    audited = server.box.sbuf("--project", "team", "audit", "--who", "kit", "--json").stdout.splitlines()
    assert {json.loads(line)["door"] for line in audited} == {"mcp"}


def test_a_server_without_the_door_fails_it(tmp_path: Path, caller_env: dict[str, str]) -> None:
    server = start(sandbox_with_stores(tmp_path / "sandbox", None))  # a loopback server: no `/mcp`
    try:
        done = conformance("--mcp-http", f"{server.base_url}/mcp", "--json",
                           env={**caller_env, "STORMBUFFER_TOKEN": server.token})  # fmt: skip
    finally:
        assert server.stop() == 0
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["passed"] is False
    assert {"mcp-http.unauthorized", "mcp-http.initialize", "mcp-http.tools"} <= {
        c.split(":")[0] for c in failed(report)
    }
    assert "Traceback" not in done.stderr and server.token not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("url", "token", "message"),
    [
        ("http://127.0.0.1:1/mcp", "", "set STORMBUFFER_TOKEN"),
        ("http://192.0.2.1:7342/mcp", "sbt_x", "use https, or http only to a loopback address"),
        ("ftp://127.0.0.1/mcp", "sbt_x", "--mcp-http takes the team server's MCP address"),
    ],
)
def test_mcp_http_needs_a_token_and_a_safe_address(
    caller_env: dict[str, str], url: str, token: str, message: str
) -> None:
    done = conformance("--mcp-http", url, env={**caller_env, "STORMBUFFER_TOKEN": token})
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
