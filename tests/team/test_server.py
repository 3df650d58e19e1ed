"""A real `sbuf serve --team` on a loopback port: team tokens are its only credentials, each route
is authorized by role and scope before any work, four eyes keep proposers from approving their own
candidates, the caller's name is the actor of what it writes, and no token reaches a log or an
answer."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.helpers import SBUF, Sandbox, record_markdown, tree_digest
from tests.http.conftest import LISTENING, TIMEOUT, Server, sandbox_with_stores, start

STORED = "01900000-0000-7000-8000-0000000005e1"
MISSING = "01900000-0000-7000-8000-00000000dead"
SOURCE = {"kind": "conversation", "reference": "chat", "actor": "agent"}
REMEMBER = {"version": 1, "title": "Deploys run on Fridays", "kind": "fact", "body": "The deploy runs on Fridays.",
            "source": SOURCE}  # fmt: skip
RECORD = {"title": "Release checklist", "kind": "procedure", "access": "agent", "body": "Tag, build, publish.",
          "sources": [{"kind": "conversation", "reference": "chat", "actor": "human"}]}  # fmt: skip


def secret_of(token: str) -> str:
    """The secret part of a team token (`sbt_<id>_<secret>`); any other token whole."""
    return token[len("sbt_") + 13 :] if token.startswith("sbt_") else token


class Team:
    """The server and the tokens made for it, by holder name."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.tokens: dict[str, str] = {}

    def make(self, name: str, role: str, *args: str) -> str:
        made = self.server.box.sbuf("--project", "team", "token", "create", "--name", name, "--role", role, *args)
        assert made.returncode == 0, made.stderr
        self.tokens[name] = made.stdout.splitlines()[-1]
        return self.tokens[name]

    def client(self, name: str | None) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {self.tokens[name]}"} if name else {}
        return httpx2.Client(base_url=self.server.base_url, timeout=TIMEOUT, trust_env=False, headers=headers)

    def call(self, name: str | None, method: str, path: str, body: Any = None) -> httpx2.Response:
        with self.client(name) as client:
            if method == "GET":
                return client.get(path)
            return client.request(method, path, json=body if body is not None else {})


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team") / "sandbox", None)
    server = start(box, "--team")
    crew = Team(server)
    for name, role in (("alice", "reviewer"), ("carol", "reviewer"), ("bot", "agent"), ("rita", "reader"),
                       ("old", "admin"), ("gone", "admin")):  # fmt: skip
        crew.make(name, role)
    crew.make("other", "admin", "--scope", "project:01900000-0000-7000-8000-000000000bad")
    server.write(STORED, title="Stored fact", body="A record of this store.\n")
    tokens = server.box.project_root / "team" / "tokens.toml"
    text = tokens.read_text(encoding="utf-8")
    expired = re.sub(r'(name = "old"(?:\n.*?)*?expires_at = )\S+', r"\g<1>2020-01-01T00:00:00Z", text)
    assert expired != text
    tokens.write_text(expired, encoding="utf-8")  # as if its ninety days had passed
    assert server.box.sbuf("--project", "team", "token", "revoke", "gone").returncode == 0
    yield crew
    assert server.stop() == 0


ROUTES = [
    ("GET", "/v1/records", None), ("GET", f"/v1/records/{STORED}", None), ("GET", "/v1/search?query=fact", None),
    ("POST", "/v1/records", RECORD), ("PUT", f"/v1/records/{STORED}", RECORD),
    ("POST", f"/v1/records/{STORED}/archive", None), ("POST", f"/v1/records/{STORED}/approve", None),
    ("POST", "/v1/invoke/get", {"version": 1, "id": STORED}), ("POST", "/v1/invoke/remember", REMEMBER),
    ("GET", "/", None), ("GET", "/review", None),
]  # fmt: skip


@pytest.mark.parametrize("holder", [None, "wrong", "old", "gone", "local"])
def test_without_a_valid_team_token_everything_is_401(team: Team, holder: str | None) -> None:
    server = team.server
    if holder == "wrong":
        team.tokens[holder] = team.tokens["alice"][:-1] + ("A" if team.tokens["alice"][-1] != "A" else "B")
    if holder == "local":  # the user's own credential opens the local doors, not a team server
        team.tokens[holder] = server.box.sbuf("auth", "token").stdout.strip()
    before = tree_digest(server.box.project_root / "records")
    metadata = f"{server.base_url}/.well-known/oauth-protected-resource"
    for method, path, body in ROUTES:
        answer = team.call(holder, method, path, body)
        if holder is None and not path.startswith("/v1/"):  # a browser without a session: to the sign-in form
            assert (answer.status_code, answer.headers["Location"]) == (303, "/sign-in"), (path, answer.text)
            continue
        assert answer.status_code == 401, (holder, method, path, answer.text)
        assert answer.json()["error"]["code"] == "unauthorized"
        challenge = answer.headers["WWW-Authenticate"]
        assert challenge.startswith(f'Bearer resource_metadata="{metadata}"'), challenge
        assert ('error="invalid_token"' in challenge) == (holder is not None)
        assert "Stored fact" not in answer.text
        if holder is not None:
            assert team.tokens[holder] not in answer.text
    assert tree_digest(server.box.project_root / "records") == before


def test_the_protected_resource_metadata_is_served(team: Team) -> None:
    answer = team.call(None, "GET", "/.well-known/oauth-protected-resource")
    assert answer.status_code == 200
    assert answer.json()["resource"] == team.server.base_url
    assert answer.json()["bearer_methods_supported"] == ["header"]


def test_a_reader_reads_and_never_writes(team: Team) -> None:
    assert team.call("rita", "GET", f"/v1/records/{STORED}").status_code == 200
    assert team.call("rita", "POST", "/v1/invoke/get", {"version": 1, "id": STORED}).json()["ok"] is True
    for method, path, body in [*ROUTES[3:7], ROUTES[8]]:  # create, replace, archive, approve, remember
        answer = team.call("rita", method, path, body)
        assert answer.status_code == 403, (method, path, answer.text)
        assert answer.json()["error"]["code"] == "permission_denied"


def remember(team: Team, name: str, title: str) -> str:
    answer = team.call(name, "POST", "/v1/invoke/remember", {**REMEMBER, "title": title})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["status"] == "candidate"
    return str(result["record_id"])


def sources(team: Team, record_id: str) -> list[dict[str, str]]:
    found = team.call("carol", "GET", f"/v1/records/{record_id}")
    assert found.status_code == 200, found.text
    return list(found.json()["sources"])


def test_the_token_names_the_actor_of_what_it_writes(team: Team) -> None:
    candidate = remember(team, "bot", "Bot fact")
    assert sources(team, candidate) == [
        {"kind": "conversation", "reference": "chat", "actor": "bot"}
    ]  # claimed "agent"
    created = team.call("alice", "POST", "/v1/records", RECORD)
    assert created.status_code == 201, created.text
    assert [source["actor"] for source in sources(team, created.json()["record_id"])] == ["alice"]  # claimed "human"
    record = {**RECORD, "title": "Rollback steps", "body": "Revert, rebuild, redeploy."}
    proposal = {"version": 1, "record": {**record, "sources": [{**SOURCE, "actor": "someone-else"}]}}
    proposed = team.call("bot", "POST", "/v1/invoke/propose", proposal)
    assert proposed.status_code == 200 and proposed.json()["result"]["status"] == "candidate", proposed.text
    assert [source["actor"] for source in sources(team, proposed.json()["result"]["record_id"])] == ["bot"]


def test_agents_never_approve_and_nobody_approves_their_own_candidate(team: Team) -> None:
    by_bot = remember(team, "bot", "Agent proposal")
    refused = team.call("bot", "POST", f"/v1/records/{by_bot}/approve")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    by_alice = remember(team, "alice", "Reviewer proposal")
    own = team.call("alice", "POST", f"/v1/records/{by_alice}/approve")
    assert own.status_code == 403 and "another reviewer" in own.json()["error"]["message"], own.text
    assert team.call("alice", "GET", f"/v1/records/{by_alice}").json()["status"] == "candidate"
    approved = team.call("carol", "POST", f"/v1/records/{by_alice}/approve")
    assert approved.status_code == 200 and approved.json()["status"] == "active", approved.text
    assert team.call("alice", "POST", f"/v1/records/{by_bot}/approve").status_code == 200  # the agent's, by another


def test_another_scopes_records_are_not_found_and_nothing_more(team: Team) -> None:
    missing = team.call("alice", "GET", f"/v1/records/{MISSING}")
    assert missing.status_code == 404
    for method, path, body in [ROUTES[1], ROUTES[4], ROUTES[5], ROUTES[6]]:
        hidden = team.call("other", method, path, body)
        assert (hidden.status_code, hidden.content) == (404, missing.content), (method, path, hidden.text)
    gone = team.call("alice", "POST", "/v1/invoke/get", {"version": 1, "id": MISSING})
    hidden = team.call("other", "POST", "/v1/invoke/get", {"version": 1, "id": STORED})
    assert (hidden.status_code, hidden.content) == (404, gone.content), hidden.text
    assert team.call("alice", "GET", f"/v1/records/{STORED}").json()["status"] == "active"  # untouched


def test_no_token_is_ever_logged(team: Team) -> None:
    team.call("alice", "GET", f"/v1/records/{STORED}?token={team.tokens['alice']}")
    log = "".join(team.server.log)
    assert "local API request" in log
    for token in team.tokens.values():
        assert token not in log and secret_of(token) not in log


@pytest.mark.parametrize(("args", "message"), [
    (("--team", "--bind", "192.0.2.7"), "a team server refuses plain HTTP on a non-loopback address"),
    (("--team", "--bind", "0.0.0.0"), "a team server refuses plain HTTP on a non-loopback address"),
    (("--bind", "192.0.2.7"), "serve only accepts loopback addresses"),
    (("--team", "--tls-cert", "cert.pem"), "--tls-cert and --tls-key go together"),
    (("--behind-proxy", "127.0.0.1"), "add --team"),
    (("--team", "--behind-proxy", "127.0.0.1", "--tls-cert", "c", "--tls-key", "k"), "not both"),
])  # fmt: skip
def test_plain_http_off_loopback_is_refused_before_binding(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    refused = subprocess.run([str(SBUF), "--project", "serve", "--port", "0", *args], cwd=box.cwd, env=box.env,
                             capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert refused.returncode != 0 and message in refused.stderr, refused.stderr
    assert "could not bind" not in refused.stderr and "listening" not in refused.stderr  # refused, not failed to bind


@contextmanager
def team_server(box: Sandbox, *args: str) -> Iterator[str]:
    """`sbuf --project serve --team --port 0 <args>` running in `box`: its address, until it stops."""
    process = subprocess.Popen([str(SBUF), "--project", "serve", "--team", "--port", "0", *args], cwd=box.cwd,
                               env=box.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        assert process.stderr is not None
        yield next(found.group(1) for line in process.stderr if (found := LISTENING.search(line)))
    finally:
        process.terminate()
        assert process.wait(timeout=TIMEOUT) == 0


def reader_token(box: Sandbox) -> str:
    made = box.sbuf("--project", "team", "token", "create", "--name", "alice", "--role", "reader")
    assert made.returncode == 0, made.stderr
    return made.stdout.splitlines()[-1]


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by openssl in `folder`."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=TIMEOUT)  # fmt: skip
    return cert, key


def test_a_team_server_speaks_tls(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    cert, key = self_signed(tmp_path)
    token = reader_token(box)
    with team_server(box, "--tls-cert", str(cert), "--tls-key", str(key)) as address:
        trusted = ssl.create_default_context(cafile=cert)
        with httpx2.Client(base_url=f"https://{address}", verify=trusted, trust_env=False, timeout=TIMEOUT) as client:
            assert client.get("/v1/records").status_code == 401
            listed = client.get("/v1/records", headers={"Authorization": f"Bearer {token}"})
            assert listed.status_code == 200 and json.loads(listed.text) == []
            metadata = client.get("/.well-known/oauth-protected-resource").json()
            assert metadata["resource"] == f"https://{address}"


def test_behind_a_proxy_only_its_forwarded_https_requests_are_served(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    token = {"Authorization": f"Bearer {reader_token(box)}"}
    with team_server(box, "--behind-proxy", "127.0.0.1") as address:
        with httpx2.Client(base_url=f"http://{address}", trust_env=False, timeout=TIMEOUT) as client:
            for forwarded in ({}, {"X-Forwarded-Proto": "http"}, {"X-Forwarded-Proto": "https, http"}):
                refused = client.get("/v1/records", headers={**token, **forwarded})
                assert (refused.status_code, refused.json()["error"]["code"]) == (403, "https_required"), forwarded
            https = {"X-Forwarded-Proto": "https"}
            assert client.get("/v1/records", headers={**token, **https}).status_code == 200
            challenge = client.get("/v1/records", headers=https).headers["WWW-Authenticate"]
            assert f'resource_metadata="https://{address}/' in challenge
    with team_server(box, "--behind-proxy", "127.0.0.2") as address:  # the proxy is elsewhere: nobody else is served
        with httpx2.Client(base_url=f"http://{address}", trust_env=False, timeout=TIMEOUT) as client:
            refused = client.get("/v1/records", headers={**token, "X-Forwarded-Proto": "https"})
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "proxy_required")


HUMAN = "01900000-0000-7000-8000-00000000a11c"
HOST_ONLY = "01900000-0000-7000-8000-0000000009b1"


def test_records_meant_for_people_are_served_to_reviewers_only(team: Team) -> None:
    team.server.write(HUMAN, title="Salary bands", access="human", body="Only people read the salary bands.\n")
    missing = team.call("alice", "GET", f"/v1/records/{MISSING}")
    for name in ("rita", "bot"):
        hidden = team.call(name, "GET", f"/v1/records/{HUMAN}")
        assert (hidden.status_code, hidden.content) == (404, missing.content), (name, hidden.text)
        assert HUMAN not in team.call(name, "GET", "/v1/records?all=true").text
        found = team.call(name, "GET", "/v1/search?query=salary+bands&all=true")
        assert found.status_code == 200 and HUMAN not in found.text, (name, found.text)
    assert team.call("alice", "GET", f"/v1/records/{HUMAN}").status_code == 200
    assert HUMAN in team.call("alice", "GET", "/v1/records").text
    assert HUMAN in team.call("alice", "GET", "/v1/search?query=salary+bands").text


def test_the_global_store_of_the_user_running_the_server_is_not_served(team: Team) -> None:
    box = team.server.box
    (box.global_root / "records" / f"{HOST_ONLY}.md").write_text(
        record_markdown(HOST_ONLY, "global", title="Host holiday plans", access="agent", body="Host holiday plans.\n"),
        encoding="utf-8",
    )
    local = box.sbuf("--project", "search", "host holiday plans")  # the project view reads it
    assert local.returncode == 0 and "Host holiday plans" in local.stdout, local.stdout + local.stderr
    for name in ("alice", "rita"):
        got = team.call(name, "POST", "/v1/invoke/get", {"version": 1, "id": HOST_ONLY})
        assert got.json()["error"]["code"] == "not_found", got.text
        context = team.call(name, "POST", "/v1/invoke/context", {"version": 1, "query": "host holiday plans"})
        assert context.status_code == 200 and HOST_ONLY not in context.text, context.text
        denied = team.call(name, "POST", "/v1/invoke/search", {"version": 1, "query": "host", "scope": "global"})
        assert denied.json()["error"]["code"] == "scope_denied", denied.text
        assert HOST_ONLY not in team.call(name, "GET", "/v1/search?query=host+holiday+plans").text


def test_the_typed_http_client_takes_a_team_token(team: Team) -> None:
    from stormbuffer.client.http import HttpClient

    with HttpClient(team.server.base_url, token=team.tokens["bot"], env={}) as client:
        written = client.envelope("remember", {**REMEMBER, "title": "Typed client fact"})
        assert written["ok"] is True, written
        recalled = client.envelope("context", {"query": "when does the deploy run"})
        assert recalled["ok"] is True and recalled["result"]["receipt"]["receipt_id"]
    assert [source["actor"] for source in sources(team, written["result"]["record_id"])] == ["bot"]
    nobody = {"HOME": str(team.server.box.base / "nobody")}  # a home without a credential
    with HttpClient(team.server.base_url, env=nobody) as anonymous:
        assert anonymous.exchange("context", b'{"version":1,"query":"deploy"}').status == 401
