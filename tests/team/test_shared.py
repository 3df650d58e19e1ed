"""Two `sbuf serve --team` processes on one PostgreSQL store, each in a sandbox of its own as two hosts
would run them (the store's committed `store.toml`, one database): the tokens, the audit trail and
the review-page sessions live in the database, so a token made, revoked or rotated through one is
honoured by the other at once, both servers' requests are in one trail, and retention prunes it.
Tokens are bound to the store they were made for, on PostgreSQL and on directory stores alike."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pytest

from tests.helpers import Sandbox, link_tree
from tests.http.conftest import TIMEOUT, Server, sandbox_with_stores, start
from tests.postgres import PASSWORD, PostgresServer

from .test_server import REMEMBER, secret_of

VARIABLE = "STORMBUFFER_DATABASE_URL"
TEAM_TABLES = ("team_tokens", "team_audit", "team_sessions")


def host(base: Path, models: Path, url: str, config_from: Path | None = None) -> Sandbox:
    """A sandbox whose project store lives in the database at `url`: made by `init`, or (`config_from`,
    a project store directory) the same store checked out on another host."""
    box = Sandbox.create(base)
    link_tree(models, base / "cache" / "stormbuffer" / "models")
    box.env.update({VARIABLE: url, "STORMBUFFER_NO_DAEMON": "1"})
    if config_from is None:
        made = box.sbuf("--project", "init", "--engine", "postgresql")
        assert made.returncode == 0, made.stderr
    else:
        box.project_root.mkdir()
        shutil.copy2(config_from / "store.toml", box.project_root / "store.toml")
    return box


def make_token(box: Sandbox, name: str, role: str) -> str:
    made = box.sbuf("--project", "team", "token", "create", "--name", name, "--role", role)
    assert made.returncode == 0, made.stderr
    return made.stdout.splitlines()[-1]


def call(server: Server, token: str | None, method: str, path: str, body: Any = None) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT, trust_env=False, headers=headers) as client:
        if method == "GET":
            return client.get(path)
        return client.request(method, path, json=body if body is not None else {})


def audit(box: Sandbox, *args: str) -> list[dict[str, Any]]:
    read = box.sbuf("--project", "team", "audit", "--json", *args)
    assert read.returncode == 0, read.stderr
    return [json.loads(line) for line in read.stdout.splitlines()]


@dataclass
class Replicas:
    url: str
    a: Server
    b: Server


@pytest.fixture
def replicas(tmp_path: Path, acquired_models: Path, postgres_url: str) -> Iterator[Replicas]:
    first = host(tmp_path / "a", acquired_models, postgres_url)
    second = host(tmp_path / "b", acquired_models, postgres_url, config_from=first.project_root)
    a = start(first, "--team")
    b = start(second, "--team")
    yield Replicas(postgres_url, a, b)
    for server in (a, b):
        assert server.stop() == 0
        for line in server.log:
            assert "Traceback" not in line and VARIABLE not in line and "sbt_" not in line


def test_tokens_made_revoked_and_rotated_on_one_host_hold_on_the_other(replicas: Replicas) -> None:
    a, b = replicas.a, replicas.b
    rita = make_token(a.box, "rita", "reader")
    bot = make_token(b.box, "bot", "agent")
    for server in (a, b):
        for token in (rita, bot):
            assert call(server, token, "GET", "/v1/records").status_code == 200
    assert not (a.box.project_root / "team").exists() and not (b.box.project_root / "team").exists()

    listed = [entry["name"] for entry in json.loads(a.box.sbuf("--project", "team", "token", "list", "--json").stdout)]
    assert listed == ["rita", "bot"]
    revoked = b.box.sbuf("--project", "team", "token", "revoke", "rita")
    assert revoked.returncode == 0, revoked.stderr
    refused = call(a, rita, "GET", "/v1/records")  # at once: no cache stands between the servers and the table
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"].startswith("Bearer resource_metadata=")
    assert rita not in refused.text and secret_of(rita) not in refused.text

    rotated = a.box.sbuf("--project", "team", "token", "rotate", "bot")
    assert rotated.returncode == 0, rotated.stderr
    fresh = rotated.stdout.splitlines()[-1]
    assert fresh != bot and fresh.startswith("sbt_") and fresh not in rotated.stderr
    assert call(b, bot, "GET", "/v1/records").status_code == 401
    assert call(b, fresh, "POST", "/v1/invoke/remember", REMEMBER).json()["result"]["status"] == "candidate"
    entries = json.loads(b.box.sbuf("--project", "team", "token", "list", "--json").stdout)
    assert [(e["name"], e["role"], e["state"]) for e in entries] == [
        ("rita", "reader", "revoked"), ("bot", "agent", "revoked"), ("bot", "agent", "active"),
    ]  # fmt: skip
    assert entries[1]["scopes"] == entries[2]["scopes"] and lifetime(entries[1]) == lifetime(entries[2])
    missing = a.box.sbuf("--project", "team", "token", "rotate", "rita")
    assert missing.returncode == 1 and "no unrevoked token is named rita" in missing.stderr

    with psycopg.connect(replicas.url) as conn:  # hashes only
        kept = json.dumps(conn.execute("SELECT * FROM stormbuffer.team_tokens").fetchall(), default=str)
    for token in (rita, bot, fresh):
        assert secret_of(token) not in kept


def lifetime(entry: dict[str, Any]) -> timedelta:
    return datetime.fromisoformat(entry["expires_at"]) - datetime.fromisoformat(entry["created_at"])


def test_both_servers_requests_are_in_one_trail_and_one_history(replicas: Replicas) -> None:
    a, b = replicas.a, replicas.b
    reader, agent, reviewer = (make_token(a.box, name, role) for name, role in
                               (("rita", "reader"), ("bot", "agent"), ("alice", "reviewer")))  # fmt: skip
    written = call(b, agent, "POST", "/v1/invoke/remember", REMEMBER).json()["result"]["record_id"]
    assert call(a, reviewer, "POST", f"/v1/records/{written}/approve").status_code == 200
    recalled = call(a, reader, "POST", "/v1/invoke/context", {"version": 1, "query": "when do deploys run"})
    assert written in json.dumps(recalled.json())
    assert call(b, None, "GET", "/v1/records").status_code == 401

    for box in (a.box, b.box):
        seen = [(e["who"], e["operation"], e["status"]) for e in audit(box, "--record", written)]
        assert seen == [("bot", "remember", 200), ("alice", "approve", 200), ("rita", "recall", 200)]
        assert {e["who"] for e in audit(box, "--who", "rita")} == {"rita"}
        assert audit(box)[-1]["status"] == 401 and audit(box, "--since", "2999-01-01") == []

    cookie, session = signed_in(a, reviewer)  # a session opened on A is known to B
    with httpx2.Client(base_url=b.base_url, timeout=TIMEOUT, trust_env=False) as client:
        client.cookies.set(f"stormbuffer_session_{b.port}", session)
        page = client.get(f"/records/{written}")
        assert page.status_code == 200, page.text
        events = re.search(r'<table class="events">.*?</table>', page.text, re.S)
        assert events is not None
        rows = [re.sub(r"<[^>]+>", " ", row).split() for row in re.findall(r"<tr>.*?</tr>", events.group(0), re.S)]
        assert [row[1:] for row in rows if len(row) == 4] == [
            ["bot", "proposed", "http"], ["alice", "approved", "http"], ["rita", "recalled", "http"],
        ]  # fmt: skip
        assert a.box.sbuf("--project", "team", "token", "revoke", "alice").returncode == 0
        assert client.get(f"/records/{written}").status_code == 303  # its token revoked: the session is over

    with psycopg.connect(replicas.url) as conn:
        trail = json.dumps(conn.execute("SELECT entry FROM stormbuffer.team_audit").fetchall())
        sessions = json.dumps(conn.execute("SELECT * FROM stormbuffer.team_sessions").fetchall(), default=str)
    for token in (reader, agent, reviewer):
        assert secret_of(token) not in trail
    assert session not in sessions and cookie not in sessions  # only its hash


def signed_in(server: Server, token: str) -> tuple[str, str]:
    """The cookie name and session id of a review-page sign-in with `token`."""
    headers = {"Origin": server.base_url, "Content-Type": "application/x-www-form-urlencoded"}
    with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT, trust_env=False) as client:
        answer = client.post("/sign-in", headers=headers, content=f"token={token}")
        assert answer.status_code == 303, answer.text
        name = f"stormbuffer_session_{server.port}"
        return name, str(client.cookies[name])


def test_retention_prunes_the_shared_trail(replicas: Replicas) -> None:
    a, b = replicas.a, replicas.b
    reader = make_token(a.box, "rita", "reader")
    assert call(b, reader, "GET", "/v1/records").status_code == 200
    old = {"at": "2020-01-01T00:00:00Z", "who": "former", "door": "http", "operation": "get", "records": []}
    with psycopg.connect(replicas.url) as conn:
        scope = conn.execute("SELECT store FROM stormbuffer.team_tokens").fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO stormbuffer.team_audit (store, at, who, records, entry) VALUES "
                     "(%s, '2020-01-01T00:00:00Z', 'former', '{}', %s)", (scope, json.dumps(old)))  # fmt: skip
    assert [e["who"] for e in audit(a.box)] == ["rita", "former"]  # in the order they were appended
    pruning = start(a.box, "--team", "--audit-retention", "30d")  # prunes on start, then every hour
    try:
        deadline = time.monotonic() + TIMEOUT
        while audit(b.box, "--who", "former") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [e["who"] for e in audit(b.box)] == ["rita"]
    finally:
        assert pruning.stop() == 0


def test_a_store_made_before_the_team_tables_gets_them_on_open(replicas: Replicas) -> None:
    with psycopg.connect(replicas.url) as conn:
        conn.execute("DROP TABLE " + ", ".join(f"stormbuffer.{table}" for table in TEAM_TABLES))
    token = make_token(replicas.a.box, "rita", "reader")
    assert call(replicas.b, token, "GET", "/v1/records").status_code == 200
    again = replicas.b.box.sbuf("--project", "team", "token", "list")
    assert again.returncode == 0 and again.stdout.startswith("rita  reader  active")


def test_a_token_is_refused_by_every_other_store_of_the_database(
    replicas: Replicas, tmp_path: Path, acquired_models: Path
) -> None:
    other = start(host(tmp_path / "y", acquired_models, replicas.url), "--team")
    try:
        token = make_token(replicas.a.box, "rita", "reader")
        own = make_token(other.box, "yuri", "reader")
        assert call(other, own, "GET", "/v1/records").status_code == 200
        refused = call(other, token, "GET", "/v1/records")
        assert refused.status_code == 401 and token not in refused.text
        with psycopg.connect(replicas.url) as conn:  # even its row moved to the other store: its audience says no
            conn.execute("UPDATE stormbuffer.team_tokens SET store = %s WHERE sha256 = %s",
                         (other.scope, _digest(token)))  # fmt: skip
        assert call(other, token, "GET", "/v1/records").status_code == 401
        assert call(replicas.a, token, "GET", "/v1/records").status_code == 401
    finally:
        assert other.stop() == 0


def _digest(token: str) -> str:
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


def test_a_token_is_refused_by_another_directory_store(tmp_path: Path) -> None:
    x = start(sandbox_with_stores(tmp_path / "x", None), "--team")
    y = start(sandbox_with_stores(tmp_path / "y", None), "--team")
    try:
        token = make_token(x.box, "rita", "reader")
        assert call(x, token, "GET", "/v1/records").status_code == 200
        assert call(y, token, "GET", "/v1/records").status_code == 401
        (y.box.project_root / "team").mkdir(mode=0o700, exist_ok=True)  # its audit trail made it
        shutil.copy2(x.box.project_root / "team" / "tokens.toml", y.box.project_root / "team" / "tokens.toml")
        assert f'audience = "{x.scope}"' in (y.box.project_root / "team" / "tokens.toml").read_text(encoding="utf-8")
        refused = call(y, token, "GET", "/v1/records")  # the entry copied over names the store it was made for
        assert refused.status_code == 401 and token not in refused.text
        rotated = x.box.sbuf("--project", "team", "token", "rotate", "rita")
        assert rotated.returncode == 0, rotated.stderr
        assert call(x, token, "GET", "/v1/records").status_code == 401
        assert call(x, rotated.stdout.splitlines()[-1], "GET", "/v1/records").status_code == 200
    finally:
        for server in (x, y):
            assert server.stop() == 0


def test_a_database_gone_is_a_sanitized_answer_and_never_a_leak(
    tmp_path: Path, acquired_models: Path, postgres_server: PostgresServer
) -> None:
    name = postgres_server.create_database().split("?", 1)[0].rsplit("/", 1)[1]
    url = postgres_server.tcp_url(name)  # with a password, which must appear nowhere
    server = start(host(tmp_path / "a", acquired_models, url), "--team")
    try:
        token = make_token(server.box, "rita", "reader")
        assert call(server, token, "GET", "/v1/records").status_code == 200
        postgres_server.execute(f"DROP DATABASE {name} WITH (FORCE)")
        for _ in range(2):  # its connections are gone, and so is the database
            answer = call(server, token, "GET", "/v1/records")
            assert answer.status_code == 500 and answer.json()["error"]["code"] == "internal_error"
            for secret in (PASSWORD, secret_of(token), name, str(postgres_server.port)):
                assert secret not in answer.text
        listed = server.box.sbuf("--project", "team", "token", "list")
        assert listed.returncode == 1 and "cannot be used" in listed.stderr and "Traceback" not in listed.stderr
    finally:
        assert server.stop() == 0
    log = "".join(server.log)
    assert "Traceback" not in log
    for secret in (PASSWORD, secret_of(token), f":{postgres_server.port}"):
        assert secret not in log and secret not in listed.stderr


def test_rotating_keeps_the_lifetime_and_renews_an_expired_token(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path / "x", None)
    made = box.sbuf("--project", "team", "token", "create", "--name", "ci", "--role", "agent", "--expires", "12h")
    assert made.returncode == 0, made.stderr
    tokens = box.project_root / "team" / "tokens.toml"
    text = tokens.read_text(encoding="utf-8")
    tokens.write_text(re.sub(r"(created_at = )\S+", r"\g<1>2020-01-01T00:00:00Z", text), encoding="utf-8")
    tokens.write_text(re.sub(r"(expires_at = )\S+", r"\g<1>2020-01-01T12:00:00Z", tokens.read_text()), encoding="utf-8")
    listed = box.sbuf("--project", "team", "token", "list", "--json")
    assert [entry["state"] for entry in json.loads(listed.stdout)] == ["expired"]
    rotated = box.sbuf("--project", "team", "token", "rotate", "ci")
    assert rotated.returncode == 0, rotated.stderr
    entries = json.loads(box.sbuf("--project", "team", "token", "list", "--json").stdout)
    assert [entry["state"] for entry in entries] == ["revoked", "active"]
    assert lifetime(entries[1]) == timedelta(hours=12) and entries[1]["audience"] == entries[0]["audience"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_calls_through_either_server_are_in_the_shared_trail(replicas: Replicas, anyio_backend: str) -> None:
    from tests.mcp.conftest import call as call_tool

    from .test_mcp import RECALL, remote
    from .test_server import Team

    tokens = {"rita": make_token(replicas.a.box, "rita", "reader"), "bot": make_token(replicas.b.box, "bot", "agent")}
    through_a, through_b = Team(replicas.a), Team(replicas.b)
    through_a.tokens = through_b.tokens = tokens
    async with remote(through_a, "bot") as client:
        remembered = await call_tool(client, "memory_remember", {**REMEMBER, "body": "Magnetar releases ship."})
    assert remembered["ok"] is True, remembered
    written = remembered["result"]["record_id"]
    async with remote(through_b, "rita") as client:
        assert (await call_tool(client, "memory_recall", RECALL))["ok"] is True
        got = await client.read_resource(f"stormbuffer://record/{written}")
        assert json.loads(got.contents[0].text)["id"] == written  # type: ignore[union-attr]
    for box in (replicas.a.box, replicas.b.box):
        seen = [(e["who"], e["door"], e["request"], e["status"]) for e in audit(box) if e["door"] == "mcp"]
        assert seen == [
            ("bot", "mcp", "tools/call memory_remember", 200), ("rita", "mcp", "tools/call memory_recall", 200),
            ("rita", "mcp", "resources/read", 200),
        ]  # fmt: skip
