"""The typed Python clients against a real `sbuf serve --team`: `HttpClient` and `RemoteMcpClient`
take the server's URL and a team token and return the generated models; the token decides what
runs and whose name a write carries; a bad address or token fails clearly, without the token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from stormbuffer_models.context_result_schema import ContextResult
from stormbuffer_models.get_result_schema import GetResult
from stormbuffer_models.remember_result_schema import RememberResult

from stormbuffer.adapters.mcp.remote import RemoteError
from stormbuffer.client import HttpClient, ProtocolFailure, RemoteMcpClient

from .serving import serving_team
from .test_server import Team

STORED = "01900000-0000-7000-8000-00000000c11e"
SOURCE = {"kind": "conversation", "reference": "typed-client", "actor": "human"}


def remember(title: str) -> dict[str, object]:
    return {"title": title, "kind": "fact", "body": f"{title}, as the typed client wrote it.", "source": SOURCE}


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Team]:
    roles = {"typed-bot": "agent", "typed-reader": "reader"}
    stored = {STORED: ("Quasar build cache", "The quasar build cache lives on the shared volume.\n")}
    with serving_team(tmp_path_factory.mktemp("team-clients") / "sandbox", acquired_models, roles, stored) as team:
        yield team


def test_the_http_client_returns_models_for_a_team_token(team: Team) -> None:
    with HttpClient(team.server.base_url, token=team.tokens["typed-bot"], env={}) as client:
        recalled = client.context(query="quasar build cache", budget=256)
        written = client.remember(**remember("Quasar cache is pruned weekly"))
        assert isinstance(written, RememberResult)
        got = client.get(id=str(written.root.record_id))
    assert isinstance(recalled, ContextResult)
    assert STORED in [str(block.record_id) for block in recalled.blocks]
    assert isinstance(got, GetResult)
    assert got.root.status.value == "candidate"
    assert [source.actor for source in got.root.sources] == ["typed-bot"]
    with HttpClient(team.server.base_url, token=team.tokens["typed-reader"], env={}) as reader:
        with pytest.raises(ProtocolFailure) as refused:
            reader.remember(**remember("A reader's note"))
    assert refused.value.code == "permission_denied"


def test_the_remote_mcp_client_returns_models_for_a_team_token(team: Team) -> None:
    url = f"{team.server.base_url}/mcp"
    with RemoteMcpClient(url, token=team.tokens["typed-bot"]) as client:
        assert {tool.name for tool in client.tools()} >= {"memory_recall", "memory_remember"}
        recalled = client.recall(query="quasar build cache", budget=256)
        written = client.remember(**remember("Quasar cache keys carry the lockfile hash"))
        assert isinstance(written, RememberResult)
        got = client.get(id=str(written.root.record_id))
        with pytest.raises(ProtocolFailure) as refused:
            client.forget(id=STORED)
    assert isinstance(recalled, ContextResult)
    assert STORED in [str(block.record_id) for block in recalled.blocks]
    assert isinstance(got, GetResult)
    assert [source.actor for source in got.root.sources] == ["typed-bot"]  # the claimed "human" dropped
    assert refused.value.code == "permission_denied"
    with RemoteMcpClient(url, env={"STORMBUFFER_TOKEN": team.tokens["typed-reader"]}) as reader:
        assert isinstance(reader.recall(query="quasar"), ContextResult)
        with pytest.raises(ProtocolFailure) as denied:
            reader.remember(**remember("A reader's note"))
    assert denied.value.code == "permission_denied"


@pytest.mark.parametrize(
    ("url", "env", "message"),
    [("http://127.0.0.1:1/mcp", {}, "set STORMBUFFER_TOKEN"),
     ("http://192.0.2.1:7342/mcp", {"STORMBUFFER_TOKEN": "sbt_x"}, "use https"),
     ("ftp://127.0.0.1/mcp", {"STORMBUFFER_TOKEN": "sbt_x"}, "MCP address")],
)  # fmt: skip
def test_the_remote_mcp_client_refuses_before_sending(url: str, env: dict[str, str], message: str) -> None:
    with pytest.raises(RemoteError, match=message) as refused:
        RemoteMcpClient(url, env=env)
    assert "sbt_x" not in str(refused.value)


def test_a_refused_token_fails_the_session_without_showing_it(team: Team) -> None:
    forged = "sbt_000000000000_" + "Q" * 43
    with pytest.raises(BaseException) as refused:
        RemoteMcpClient(f"{team.server.base_url}/mcp", token=forged, timeout=30)
    assert forged not in repr(refused.value) and forged not in str(refused.value)


def test_the_http_client_without_a_valid_token_raises_unauthorized(team: Team) -> None:
    with HttpClient(team.server.base_url, token="sbt_000000000000_" + "Q" * 43, env={}) as client:
        with pytest.raises(ProtocolFailure) as refused:
            client.context(query="quasar")
    assert refused.value.code == "unauthorized" and "sbt_" not in str(refused.value)
