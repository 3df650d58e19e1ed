"""Every request sent to the real `stormbuffer-mcp` gets exactly one answer: arbitrary strings
(unpaired surrogate escapes included), lines that are not JSON-RPC, arguments nested up to and far
past the nesting bound, and lines over the message bound.

One server process serves the whole module; each example sends one request and reads one answer.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from stormbuffer.protocol.jsontext import MAX_DEPTH
from tests.helpers import Sandbox, link_tree
from tests.mcp.conftest import ACTIVE_ID, SOURCE, RawServer, Store, request

# Every code point, unpaired surrogates included; `json.dumps` writes those as `\udXXX` escapes.
SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF, categories=None) | SURROGATES, max_size=40)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[RawServer]:
    base = tmp_path_factory.mktemp("transport")
    box = Sandbox.create(base)
    link_tree(acquired_models, base / "cache" / "stormbuffer" / "models")
    dirs = PlatformDirs.from_environ(box.env)
    for view in (View.GLOBAL, View.PROJECT):
        initialize_store(resolve_store(view, box.cwd, dirs))
    Store(box).write(ACTIVE_ID, title="Release constraint", body="Releases ship on Tuesdays.\n")
    raw = RawServer(box, "--stdio", "--project", "--allow-candidate-writes")
    assert "result" in raw.initialize()
    yield raw
    code, rest, _stderr = raw.close()
    assert (code, rest) == (0, []), "an answer nobody asked for, or a crash"


_ids = itertools.count(1000)


def answer_to(server: RawServer, line: str) -> dict[str, Any]:
    """Send one line holding a request with a fresh id; the one answer, checked to carry that id."""
    request_id = next(_ids)
    server.send(line.replace('"id": 0,', f'"id": {request_id},', 1))
    answer = server.receive()
    assert answer["id"] == request_id, answer
    assert ("result" in answer) != ("error" in answer)
    return answer


def call_line(name: str, arguments: Any) -> str:
    return json.dumps(request(0, "tools/call", {"name": name, "arguments": arguments}))


@pytest.mark.parametrize(
    "line",
    [
        call_line("memory_recall", {"query": "\ud800"}),
        call_line("memory_remember", {"title": "\udfff", "kind": "fact", "body": "b", "source": SOURCE}),
        json.dumps(request(0, "resources/read", {"uri": "stormbuffer://record/\ud800"})),
    ],
    ids=["recall", "remember", "resources-read"],
)
def test_an_unpaired_surrogate_escape_gets_a_parse_error_with_the_request_id(server: RawServer, line: str) -> None:
    assert "\\ud800" in line or "\\udfff" in line
    error = answer_to(server, line)["error"]
    assert error["code"] == -32700
    assert "surrogate" in error["message"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from(["memory_recall", "memory_get", "memory_remember", "memory_update", "memory_forget"]),
    text=ANY_TEXT,
    extra=st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=3),
)
def test_every_tool_call_with_arbitrary_strings_is_answered_once(
    server: RawServer, tool: str, text: str, extra: dict[str, Any]
) -> None:
    fields = {"memory_recall": "query", "memory_get": "id", "memory_remember": "title", "memory_update": "id"}
    arguments = {**extra, fields.get(tool, "id"): text}
    answer_to(server, call_line(tool, arguments))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tool=st.sampled_from(["memory_recall", "memory_get", "memory_remember"]),
    depth=st.integers(1, MAX_DEPTH + 2) | st.integers(MAX_DEPTH, 300_000),
    opener=st.sampled_from(["[", '{"a": ']),
)
@example(tool="memory_recall", depth=MAX_DEPTH - 3, opener="[")
@example(tool="memory_recall", depth=MAX_DEPTH - 2, opener="[")
def test_every_tool_call_with_deeply_nested_arguments_is_answered_once(
    server: RawServer, tool: str, depth: int, opener: str
) -> None:
    closer = "]" if opener == "[" else "}"
    value = opener * depth + "1" + closer * depth
    line = call_line(tool, {"query": "release", "id": ACTIVE_ID, "extra": None}).replace("null", value, 1)
    answer = answer_to(server, line)
    too_deep = depth + 3 > MAX_DEPTH  # the message, its params and the arguments are three levels more
    parse_error = "error" in answer and answer["error"]["code"] == -32700
    assert parse_error == too_deep, answer
    if too_deep:
        assert f"more than {MAX_DEPTH} levels" in answer["error"]["message"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(uri=ANY_TEXT, method=st.sampled_from(["resources/read", "tools/list", "ping", "no/such/method"]))
def test_every_other_request_with_arbitrary_strings_is_answered_once(server: RawServer, uri: str, method: str) -> None:
    answer_to(server, json.dumps(request(0, method, {"uri": f"stormbuffer://record/{uri}"})))


@pytest.mark.parametrize(
    ("line", "code"),
    [
        ('{"jsonrpc": "2.0", "id": 0, "method": ', -32700),
        ('{"jsonrpc": "1.0", "id": 0, "method": "ping"}', -32600),
        ('{"jsonrpc": "2.0", "id": 0, "method": 7}', -32600),
    ],
)
def test_a_line_that_is_not_a_valid_request_is_answered_with_its_id(server: RawServer, line: str, code: int) -> None:
    assert answer_to(server, line)["error"]["code"] == code


def test_lines_without_a_readable_id_get_a_null_id_error_and_notifications_none(server: RawServer) -> None:
    server.send("this is not json", "[1, 2, 3]", '{"jsonrpc": "2.0", "method": 5}')
    assert [server.receive()["id"] for _ in range(2)] == [None, None]
    answer_to(server, json.dumps(request(0, "ping")))  # the invalid notification was not answered


def _memory_kib(server: RawServer, field: str) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith(field)))


def test_an_oversized_line_is_answered_and_never_held_in_memory(server: RawServer) -> None:
    answer_to(server, json.dumps(request(0, "ping")))
    before = _memory_kib(server, "VmRSS:")
    padding = "a" * (64 * 1024 * 1024)
    error = answer_to(server, call_line("memory_recall", {"query": padding}))["error"]
    assert error["code"] == -32600 and "at most 4194304 bytes" in error["message"]
    server.send(json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {"padding": padding}, "id": 1}))
    assert server.receive() == {"jsonrpc": "2.0", "id": None, "error": error}  # the id came after the bound
    answer_to(server, json.dumps(request(0, "ping")))
    after = _memory_kib(server, "VmRSS:")
    assert after - before < 32 * 1024, f"RSS grew from {before} KiB to {after} KiB"


@pytest.mark.parametrize(("key", "value"), [("limit", -5), ("budget", -1)])
def test_a_negative_limit_or_budget_is_named_as_negative(server: RawServer, key: str, value: int) -> None:
    result = answer_to(server, call_line("memory_recall", {"query": "release", key: value}))["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == {
        "code": "invalid_request",
        "message": f"field `{key}` must not be negative",
    }
