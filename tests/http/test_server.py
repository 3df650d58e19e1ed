"""`sbuf serve` as a process: loopback-only binding, an initialized store, the request log,
graceful shutdown on SIGINT and SIGTERM, the OpenAPI document."""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import httpx2
import pytest
from openapi_spec_validator import validate

from stormbuffer.adapters.http.openapi import component_name
from stormbuffer.adapters.http.server import is_loopback
from stormbuffer.protocol import schemas
from tests.contract.test_invoke_examples import EXAMPLES, load
from tests.helpers import Sandbox

from .conftest import TIMEOUT, Server, sandbox_with_stores, start

LOOPBACK_ONLY = "error: serve only accepts loopback addresses; a team server (`--team`) may bind others over TLS"


@pytest.mark.parametrize(("address", "accepted"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("0.0.0.0", False), ("192.0.2.1", False), ("::", False),
])  # fmt: skip
def test_only_loopback_addresses_are_accepted(address: str, accepted: bool) -> None:
    assert is_loopback(address) is accepted


@pytest.mark.parametrize("address", ["0.0.0.0", "192.0.2.1"])
def test_a_remote_bind_is_refused_before_the_store_is_resolved(address: str, tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path)
    done = box.sbuf("--project", "serve", "--bind", address, "--port", "0")
    assert (done.returncode, done.stdout, done.stderr.strip()) == (1, "", LOOPBACK_ONLY)
    assert not box.project_root.exists() and not box.global_root.exists()


def test_an_unparsable_address_is_a_usage_error(tmp_path: Path) -> None:
    done = Sandbox.create(tmp_path).sbuf("serve", "--bind", "localhost")
    assert done.returncode == 2 and "--bind" in done.stderr


def test_an_uninitialized_store_is_refused(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path)
    done = box.sbuf("--project", "serve", "--port", "0")
    assert (done.returncode, done.stderr.strip()) == (1, "error: could not start server: store is not initialized")
    assert not box.project_root.exists()


def test_a_busy_port_is_reported(tmp_path: Path) -> None:
    box = sandbox_with_stores(tmp_path, None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = box.sbuf("--project", "serve", "--port", str(port))
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: could not bind local server to 127.0.0.1:{port}: ")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_empty_store_lists_nothing_then_a_signal_stops_the_server(sig: int, tmp_path: Path) -> None:
    server = start(sandbox_with_stores(tmp_path, None))
    with server.client() as client:
        answer = client.get("/v1/records")
    assert (answer.status_code, answer.http_version, answer.content) == (200, "HTTP/1.1", b"[]")
    began = time.monotonic()
    assert server.stop(sig) == 0
    assert time.monotonic() - began < 2.0
    log = "".join(server.log)
    assert "local API request method=GET path=/v1/records status=200" in log
    assert "local API request method=GET path=/openapi.json status=200" in log
    name = "interrupt" if sig == signal.SIGINT else "termination"
    assert f"received {name} signal; shutting down local API" in log
    assert "Traceback" not in log


def test_a_request_in_flight_is_answered_before_the_server_exits(tmp_path: Path) -> None:
    """The request's headers arrive, then the signal, then its body: it is still answered in full."""
    server = start(sandbox_with_stores(tmp_path, None))
    body = b'{"version":1,"query":"anything"}'
    head = (f"POST /v1/invoke/search HTTP/1.1\r\nHost: {server.address}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {server.token}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()  # fmt: skip
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as conn:
        conn.sendall(head + body[:5])
        time.sleep(0.3)  # the server has read the headers
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        conn.sendall(body[5:])
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b'{"ok":true,"operation":"search","result":[],"version":1}')
    assert server.process.wait(timeout=TIMEOUT) == 0


def test_the_openapi_document_is_valid_and_generated_from_schema_v1(served: Server, client: httpx2.Client) -> None:
    document = client.get("/openapi.json").json()
    validate(document)  # OpenAPI 3.1, every reference resolvable inside the document
    assert document["info"]["title"] == "Stormbuffer local API" and document["info"]["version"] == "1.0.0"
    assert {"/v1/records", "/v1/search", "/v1/invoke/{operation}"} <= set(document["paths"])
    assert "/openapi.json" not in document["paths"]
    operation_ids = {op["operationId"] for path in document["paths"].values() for op in path.values()}
    assert operation_ids == {
        "list_records", "create_record", "get_record", "replace_record", "approve_record", "reject_record",
        "archive_record", "restore_record", "search_records", "invoke_operation",
    }  # fmt: skip
    components = document["components"]["schemas"]
    expected = {component_name(name) for name in schemas.names() if name != "mcp-tools"}
    assert set(components) == expected | {"RecordInput", "ErrorResponse"}
    assert components["Record"]["required"] == schemas.load("record")["required"]
    assert served.schemas is not None
    for path in EXAMPLES:  # the protocol's examples agree with the document's copies of its schemas
        example, operation = load(path), path.parent.name
        request = {"$ref": f"#/components/schemas/{operation.capitalize()}Request"}
        if example.get("request_valid", True):
            assert served.schemas.problems(request, example["request"]) == [], path
        assert served.schemas.problems({"$ref": "#/components/schemas/Envelope"}, example["response"]) == []


def test_the_ipv6_loopback_address_serves_under_its_own_name(tmp_path: Path) -> None:
    server = start(sandbox_with_stores(tmp_path, None), "--bind", "::1")
    assert server.address.startswith("[::1]:")
    with server.client() as client:
        assert client.get("/v1/records").status_code == 200
        assert client.get("/v1/records", headers={"Host": f"localhost:{server.port}"}).status_code == 200
        refused = client.get("/v1/records", headers={"Host": f"127.0.0.1:{server.port}"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "host_not_allowed"
    assert server.stop() == 0


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_the_listening_socket_names_tcp_so_connections_send_without_delay(address: str) -> None:
    """asyncio disables Nagle's algorithm only on connections of a socket whose protocol is IPPROTO_TCP."""
    from stormbuffer.adapters.http.server import bind

    with bind(address, 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
        with socket.create_connection(sock.getsockname()[:2], timeout=TIMEOUT):
            accepted, _peer = sock.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP
