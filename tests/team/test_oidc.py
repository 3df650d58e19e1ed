"""JWTs of an external OpenID Connect issuer on a real `sbuf serve --team`: a loopback stub issuer
publishes its discovery document and a real RSA key; a valid token names its principal (role and
scopes from its claims), and a wrong audience, an expired token, a bad signature, an unknown key
and a token without a role are each 401 with `WWW-Authenticate`, audited, and never logged."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.http.conftest import Server, sandbox_with_stores, start

from .test_server import REMEMBER, Team

AUDIENCE = "https://memory.test"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class Issuer:
    """A stub OpenID Connect issuer on a loopback port: its discovery document and key set."""

    def __init__(self) -> None:
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {"issuer": issuer.url, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    issuer.jwks_fetches += 1
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(KEY.public_key()))
                    body = {"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def token(self, key: Any = KEY, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        base = {"iss": self.url, "aud": AUDIENCE, "sub": "u-1", "preferred_username": "dana",
                "stormbuffer_role": "agent", "iat": now, "exp": now + 600}  # fmt: skip
        payload = {name: value for name, value in {**base, **claims}.items() if value is not None}
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": kid})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    stub = Issuer()
    yield stub
    stub.close()


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[Team]:
    box = sandbox_with_stores(tmp_path_factory.mktemp("team-oidc") / "sandbox", None)
    server = start(box, "--team", "--oidc-issuer", issuer.url, "--oidc-audience", AUDIENCE)
    crew = Team(server)
    crew.make("alice", "reviewer")
    yield crew
    assert server.stop() == 0


def audit(server: Server) -> list[dict[str, Any]]:
    done = server.box.sbuf("--project", "team", "audit", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_valid_token_names_its_principal(team: Team, issuer: Issuer) -> None:
    team.tokens["dana"] = issuer.token()
    assert team.call("dana", "GET", "/v1/records").status_code == 200
    remembered = team.call("dana", "POST", "/v1/invoke/remember", REMEMBER)
    assert remembered.status_code == 200, remembered.text
    record_id = remembered.json()["result"]["record_id"]
    assert team.call("dana", "POST", f"/v1/records/{record_id}/approve").status_code == 403  # an agent
    got = team.call("alice", "GET", f"/v1/records/{record_id}").json()  # team tokens still work beside
    assert [source["actor"] for source in got["sources"]] == ["dana"]
    team.tokens["eve"] = issuer.token(preferred_username="eve", stormbuffer_role="reader",
                                      stormbuffer_scopes="project:01900000-0000-7000-8000-000000000bad")  # fmt: skip
    assert team.call("eve", "GET", f"/v1/records/{record_id}").status_code == 404  # outside its scopes
    assert [entry["who"] for entry in audit(team.server)[-4:]] == ["dana", "dana", "alice", "eve"]


REFUSED: dict[str, dict[str, Any]] = {
    "wrong-audience": {"aud": "https://other.test"},
    "expired": {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
    "bad-signature": {"key": OTHER_KEY},
    "unknown-kid": {"kid": "k9"},
    "no-role": {"stormbuffer_role": None},
    "unknown-role": {"stormbuffer_role": "owner"},
    "other-issuer": {"iss": "https://issuer.invalid"},
    "bad-name": {"preferred_username": "Dana Smith"},
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_bad_token_is_401_and_audited(team: Team, issuer: Issuer, case: str) -> None:
    team.tokens[case] = issuer.token(**REFUSED[case])
    before = len(audit(team.server))
    answer = team.call(case, "GET", "/v1/records")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith('Bearer resource_metadata="')
    assert 'error="invalid_token"' in answer.headers["WWW-Authenticate"]
    mcp = team.call(case, "POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert mcp.status_code == 401
    entries = audit(team.server)[before:]
    assert [(entry["who"], entry["status"]) for entry in entries] == [(None, 401), (None, 401)]
    assert [entry["door"] for entry in entries] == ["http", "mcp"]


def test_unknown_keys_fetch_the_key_set_at_most_once_a_minute(team: Team, issuer: Issuer) -> None:
    for n in range(5):
        team.tokens[f"kid{n}"] = issuer.token(kid=f"unknown-{n}")
        assert team.call(f"kid{n}", "GET", "/v1/records").status_code == 401
    fetched = issuer.jwks_fetches
    for n in range(5):
        assert team.call(f"kid{n}", "GET", "/v1/records").status_code == 401
    assert issuer.jwks_fetches == fetched  # no fetch per request with an unknown key


def test_the_metadata_names_the_issuer(team: Team, issuer: Issuer) -> None:
    document = team.call(None, "GET", "/.well-known/oauth-protected-resource").json()
    assert document["authorization_servers"] == [issuer.url]


def test_no_token_reaches_the_log(team: Team) -> None:
    log = "".join(team.server.log)
    assert not any(token in log for token in team.tokens.values())
    assert "eyJ" not in log and "Traceback" not in log
    assert "eyJ" not in (team.server.box.project_root / "team" / "audit.jsonl").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--team", "--oidc-issuer", "http://127.0.0.1:1"), "--oidc-issuer and --oidc-audience go together"),
        (
            ("--team", "--oidc-issuer", "http://127.0.0.1:1", "--oidc-audience", "a"),
            "the OIDC issuer's configuration could not be read",
        ),
        (("--team", "--oidc-issuer", "http://issuer.example", "--oidc-audience", "a"), "must be an https URL"),
        (("--oidc-issuer", "https://issuer.example", "--oidc-audience", "a"), "for a team server: add --team"),
    ],
)
def test_a_bad_issuer_is_refused_at_start(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    box = sandbox_with_stores(tmp_path / "sandbox", None)
    done = box.sbuf("--project", "serve", "--port", "0", *args)
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr
