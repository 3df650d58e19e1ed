"""Host names beyond the bound address on a real `sbuf serve --team`: `--allow-host` and the host of
`--public-url` are admitted in `Host` (any port), every other name is still refused, and the public
URL is the resource the metadata and the 401 challenge name."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from tests.http.conftest import TIMEOUT, sandbox_with_stores, start

from .test_server import Team

PUBLIC = "https://memory.example.com"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-hosts") / "sandbox", None)
    server = start(box, "--team", "--allow-host", "Memory.Internal", "--public-url", PUBLIC + "/")
    crew = Team(server)
    crew.make("rita", "reader")
    yield crew
    assert server.stop() == 0


def ask(team: Team, host: str, token: bool = True) -> httpx2.Response:
    headers = {"Host": host, **({"Authorization": f"Bearer {team.tokens['rita']}"} if token else {})}
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False) as client:
        return client.get("/v1/records", headers=headers)


@pytest.mark.parametrize(
    "host", ["memory.internal", "MEMORY.internal:7342", "memory.example.com", "memory.example.com:443", "localhost"]
)
def test_configured_names_are_admitted(team: Team, host: str) -> None:
    assert ask(team, host).status_code == 200
    assert ask(team, team.server.address).status_code == 200  # the bound address still is


@pytest.mark.parametrize(
    "host", ["attacker.example", "memory.internal.attacker.example", "example.com", "internal", "memory.example.co"]
)
def test_other_names_are_refused(team: Team, host: str) -> None:
    refused = ask(team, host)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "host_not_allowed")


def test_the_public_url_is_the_resource(team: Team) -> None:
    metadata = ask(team, "memory.internal", token=False)
    assert metadata.status_code == 401
    assert metadata.headers["WWW-Authenticate"].startswith(
        f'Bearer resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource"'
    )
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False) as client:
        document = client.get("/.well-known/oauth-protected-resource").json()
    assert document["resource"] == PUBLIC


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--team", "--allow-host", "https://memory.internal"), "must be a DNS name"),
        (("--team", "--allow-host", "memory.internal:443"), "must be a DNS name"),
        (("--team", "--allow-host", "-memory"), "must be a DNS name"),
        (("--team", "--public-url", "ftp://memory.example.com"), "must be http(s)://HOST[:PORT]"),
        (("--team", "--public-url", "https://memory.example.com/mcp"), "must be http(s)://HOST[:PORT]"),
        (("--team", "--public-url", "https://user@memory.example.com"), "must be http(s)://HOST[:PORT]"),
        (("--allow-host", "memory.internal"), "for a team server: add --team"),
        (("--public-url", PUBLIC), "for a team server: add --team"),
    ],
)
def test_bad_names_are_refused_at_start(tmp_path_factory: pytest.TempPathFactory, args: tuple[str, ...],
                                        message: str) -> None:  # fmt: skip
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-hosts-bad") / "sandbox", None)
    done = box.sbuf("--project", "serve", "--port", "0", *args)
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr


@pytest.mark.parametrize("origin", ["https://memory.example.com", "https://memory.internal:8443"])
def test_the_review_page_forms_work_from_a_configured_name(team: Team, origin: str) -> None:
    """Behind a proxy the browser's Origin is the proxy's address: a configured name is the server's own."""
    signed_in = sign_in(team, origin)
    assert signed_in.status_code == 303 and "set-cookie" in signed_in.headers


@pytest.mark.parametrize("origin", ["https://attacker.example", "https://memory.example.com.attacker.example", "null"])
def test_forms_from_any_other_origin_are_refused(team: Team, origin: str) -> None:
    refused = sign_in(team, origin)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "origin_not_allowed")


def sign_in(team: Team, origin: str) -> httpx2.Response:
    headers = {"Host": "memory.example.com", "Origin": origin, "Content-Type": "application/x-www-form-urlencoded"}
    with httpx2.Client(base_url=team.server.base_url, timeout=TIMEOUT, trust_env=False) as client:
        return client.post("/sign-in", headers=headers, content=f"token={team.tokens['rita']}")
