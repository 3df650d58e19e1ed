"""A loopback server refuses what a web page could make a browser send it: a foreign `Host` (DNS
rebinding), a cross-site state-changing request, a body that is not JSON. It never sends CORS headers."""

from __future__ import annotations

import socket

import httpx2
import pytest

from tests.helpers import tree_digest

from .conftest import TIMEOUT, Server

JSON = {"Content-Type": "application/json"}
RECORD = {"title": "Guarded", "kind": "fact", "access": "human", "body": "Written by a trusted client.",
          "sources": [{"kind": "conversation", "reference": "chat", "actor": "human"}]}  # fmt: skip


def code(answer: httpx2.Response) -> tuple[int, str]:
    return answer.status_code, answer.json()["error"]["code"]


@pytest.mark.parametrize("host", [
    "evil.example", "evil.example:{port}", "127.0.0.1.evil.example:{port}", "localhost:1", "127.0.0.2:{port}",
    "localhost.:{port}", "[::1]:{port}", "127.0.0.1:{port}@evil.example", "0x7f000001:{port}",
])  # fmt: skip
def test_a_foreign_host_is_refused(served: Server, client: httpx2.Client, host: str) -> None:
    before = tree_digest(served.box.project_root / "records")
    headers = {"Host": host.format(port=served.port)}
    assert code(client.get("/v1/records", headers=headers)) == (403, "host_not_allowed")
    assert code(client.post("/v1/records", json=RECORD, headers=headers)) == (403, "host_not_allowed")
    assert tree_digest(served.box.project_root / "records") == before


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}", "127.0.0.1", "localhost"])
def test_the_bound_address_and_localhost_are_accepted(served: Server, client: httpx2.Client, host: str) -> None:
    assert client.get("/v1/records", headers={"Host": host.format(port=served.port)}).status_code == 200


def raw_request(served: Server, head: str) -> bytes:
    with socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT) as conn:
        conn.sendall(head.encode("latin-1"))
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_a_missing_or_repeated_host_is_refused(served: Server) -> None:
    missing = raw_request(served, "GET /v1/records HTTP/1.0\r\n\r\n")
    repeated = raw_request(served, f"GET /v1/records HTTP/1.1\r\nHost: {served.address}\r\nHost: evil.example\r\n"
                                   "Connection: close\r\n\r\n")  # fmt: skip
    for answer in (missing, repeated):
        assert answer.split(b"\r\n", 1)[0].split(b" ")[1] in (b"400", b"403"), answer[:200]
        assert b'"host_not_allowed"' in answer or answer.startswith(b"HTTP/1.1 400"), answer[:200]


@pytest.mark.parametrize("origin", [
    "http://evil.example", "null", "http://localhost:1", "https://127.0.0.1:{port}", "http://127.0.0.1:{port}.evil",
    "http://localhost", "http://127.0.0.1", "http://[::1]:{port}", "http://localhost:{port}/", "http://localhost:0{port}",
])  # fmt: skip
def test_a_foreign_origin_cannot_change_anything(served: Server, client: httpx2.Client, origin: str) -> None:
    before = tree_digest(served.box.project_root / "records")
    headers = {"Origin": origin.format(port=served.port)}
    assert code(client.post("/v1/records", json=RECORD, headers=headers)) == (403, "origin_not_allowed")
    remember = {"version": 1, "title": "t", "kind": "fact", "body": "b", "source": RECORD["sources"][0]}
    assert code(client.post("/v1/invoke/remember", json=remember, headers=headers)) == (403, "origin_not_allowed")
    assert tree_digest(served.box.project_root / "records") == before
    assert client.get("/v1/records", headers=headers).status_code == 200  # a read is not refused, and not shared


@pytest.mark.parametrize("site", ["cross-site", "same-site", "Same-Site", "unknown"])
def test_a_cross_site_fetch_is_refused(served: Server, client: httpx2.Client, site: str) -> None:
    """`same-site` is another port or subdomain of this host: another origin, another site's page."""
    headers = {"Sec-Fetch-Site": site, "Origin": f"http://127.0.0.1:{served.port}"}
    assert code(client.post("/v1/records", json=RECORD, headers=headers)) == (403, "origin_not_allowed")


def test_the_servers_own_origin_may_write(served: Server, client: httpx2.Client) -> None:
    own = ((f"http://127.0.0.1:{served.port}", "same-origin"), (f"http://localhost:{served.port}", "none"))
    for origin, site in own:
        body = {**RECORD, "title": f"From {origin}"}
        headers = {"Origin": origin, "Sec-Fetch-Site": site}
        assert client.post("/v1/records", json=body, headers=headers).status_code == 201


@pytest.mark.parametrize("content_type", [
    None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx",
])  # fmt: skip
def test_a_state_changing_request_must_be_json(served: Server, client: httpx2.Client, content_type: str | None) -> None:
    before = tree_digest(served.box.project_root / "records")
    headers = {} if content_type is None else {"Content-Type": content_type}
    import json

    body = json.dumps(RECORD).encode()
    for path in ("/v1/records", "/v1/invoke/remember", "/v1/records/0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11/archive"):
        assert code(client.post(path, content=body, headers=headers)) == (415, "unsupported_media_type")
    assert tree_digest(served.box.project_root / "records") == before
    charset = client.post("/v1/records", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert charset.status_code in (201, 409)


def test_a_preflight_gets_no_cors_headers(served: Server, client: httpx2.Client) -> None:
    answer = client.options("/v1/records", headers={"Origin": "http://evil.example",
                                                    "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert code(answer) == (405, "method_not_allowed")  # and the client hook checked: no Access-Control-* header
