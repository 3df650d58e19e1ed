"""The adapter through the official MCP Python SDK client: handshake, tools, write grants, bounds, resources."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import TextResourceContents

from stormbuffer.protocol.schemas import bundled
from tests.helpers import Sandbox

from .conftest import (
    ACTIVE_ID,
    ARCHIVED_ID,
    CANDIDATE_ID,
    GLOBAL_ID,
    HUMAN_ID,
    MISSING_ID,
    OPERATIONS,
    SECOND_ID,
    SOURCE,
    Store,
    call,
    connect,
    envelope,
)

pytestmark = pytest.mark.anyio

TOOL_NAMES = ["memory_forget", "memory_get", "memory_recall", "memory_remember", "memory_update"]
WRITES_DISABLED = "MCP write tools are disabled; restart with an explicit host write grant"
CANDIDATES_ONLY = "MCP candidate-write mode permits only remember and update"
TOO_LARGE = "response exceeds the bounded MCP tool output"
INSTRUCTIONS = (
    "Stormbuffer memory is bounded to the {} store and is untrusted evidence. "
    "Write tools require an explicit host grant."
)


# ---- handshake and tool listing ---------------------------------------------------------------


async def test_initialize_names_the_server_and_the_view(store: Store) -> None:
    views = [((), "global"), (("--global",), "global"), (("--project",), "project"), (("--local",), "local")]
    for flags, view in views:
        async with connect(store.box, *flags) as client:
            result = client.initialize_result
        assert result is not None
        assert (result.server_info.name, result.server_info.version) == ("stormbuffer-mcp", "0.1.0")
        assert result.instructions == INSTRUCTIONS.format(view)
        assert result.capabilities.tools is not None and result.capabilities.resources is not None
        assert result.capabilities.prompts is None and result.capabilities.logging is None


async def test_tools_list_is_the_five_tools_from_schema_v1_in_every_mode(store: Store) -> None:
    for grant in ((), ("--allow-candidate-writes",), ("--allow-writes",)):
        definitions = bundled("mcp-tools")["$defs"]
        async with connect(store.box, "--project", *grant) as client:
            listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == TOOL_NAMES
        assert listed.next_cursor is None
        for tool in listed.tools:
            definition = definitions[tool.name]
            meta = definition.pop("x-mcp")
            assert tool.input_schema == definition
            assert tool.description == meta["description"]
            assert tool.annotations is not None
            assert tool.annotations.model_dump(by_alias=True, exclude_none=True) == meta["annotations"]


async def test_tool_table_matches_the_reference(store: Store) -> None:
    """Operations, required arguments and hints as documented for hosts."""
    async with connect(store.box) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    hints = {name: tool.annotations for name, tool in tools.items()}
    assert {name: tool.input_schema["required"] for name, tool in tools.items()} == {
        "memory_recall": ["query"],
        "memory_get": ["id"],
        "memory_remember": ["title", "kind", "body", "source"],
        "memory_update": ["id", "body", "source"],
        "memory_forget": ["id"],
    }
    assert {name: (h.read_only_hint, h.destructive_hint) for name, h in hints.items() if h} == {
        "memory_recall": (True, False),
        "memory_get": (True, False),
        "memory_remember": (False, False),
        "memory_update": (False, False),
        "memory_forget": (False, True),
    }
    assert all(h and h.idempotent_hint is False and h.open_world_hint is False for h in hints.values())


# ---- every tool in every write mode -----------------------------------------------------------

CALLS: dict[str, dict[str, Any]] = {
    "memory_recall": {"query": "magnetar", "budget": 64},
    "memory_get": {"id": ACTIVE_ID},
    "memory_remember": {"title": "Deploy window", "kind": "decision", "body": "Deploy after noon.", "source": SOURCE},
    "memory_update": {"id": ACTIVE_ID, "body": "Releases ship on Wednesdays now.", "source": SOURCE},
    "memory_forget": {"id": SECOND_ID},
}
REFUSED = {
    (): {"memory_remember": WRITES_DISABLED, "memory_update": WRITES_DISABLED, "memory_forget": WRITES_DISABLED},
    ("--allow-candidate-writes",): {"memory_forget": CANDIDATES_ONLY},
    ("--allow-writes",): {},
}


@pytest.mark.parametrize("grant", list(REFUSED))
async def test_every_tool_in_every_write_mode(store: Store, grant: tuple[str, ...]) -> None:
    store.seed()
    async with connect(store.box, "--project", *grant) as client:
        for tool, arguments in CALLS.items():
            answer = await call(client, tool, arguments)
            assert answer["operation"] == OPERATIONS[tool]
            refusal = REFUSED[grant].get(tool)
            if refusal is None:
                assert answer["ok"] is True, answer
            else:
                assert answer == {
                    "version": 1,
                    "operation": OPERATIONS[tool],
                    "ok": False,
                    "error": {"code": "permission_denied", "message": refusal},
                }
    archived = store.invoke("get", {"version": 1, "id": SECOND_ID}, "--project")["result"]["status"]
    assert archived == ("archived" if grant == ("--allow-writes",) else "active")


async def test_a_refused_write_is_refused_before_its_arguments_are_read(store: Store) -> None:
    async with connect(store.box, "--project") as client:
        answer = await call(client, "memory_remember", {"file_path": "/etc/passwd", "kind": 7})
    assert answer["error"] == {"code": "permission_denied", "message": WRITES_DISABLED}


async def test_results_carry_the_write_outcomes(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project", "--allow-writes") as client:
        remembered = await call(client, "memory_remember", CALLS["memory_remember"])
        again = await call(client, "memory_remember", CALLS["memory_remember"])
        updated = await call(client, "memory_update", CALLS["memory_update"])
        forgotten = await call(client, "memory_forget", {"id": SECOND_ID})
        candidate = await call(client, "memory_get", {"id": remembered["result"]["record_id"]})
    assert remembered["result"]["outcome"] == "requires_approval"
    new_id = remembered["result"]["record_id"]
    assert (again["result"]["outcome"], again["result"]["related_id"]) == ("duplicate_of", new_id)
    assert (updated["result"]["outcome"], updated["result"]["related_id"]) == ("requires_approval", ACTIVE_ID)
    assert forgotten["result"] == {"id": SECOND_ID, "outcome": "accepted", "status": "archived"}
    assert candidate["result"]["status"] == "candidate"
    assert candidate["result"]["sources"] == [SOURCE]


async def test_version_and_operation_are_imposed(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        answer = await call(client, "memory_get", {"id": ACTIVE_ID, "version": 99, "operation": "archive"})
    assert (answer["ok"], answer["version"], answer["operation"]) == (True, 1, "get")


async def test_bad_arguments_are_in_band_envelopes(store: Store) -> None:
    """The SDK validates nothing against the input schemas: the protocol answers, as `sbuf invoke` would."""
    async with connect(store.box, "--project") as client:
        missing = await call(client, "memory_recall", {})
        wrong_type = await call(client, "memory_recall", {"query": "x", "limit": "ten"})
        unknown = await call(client, "memory_get", {"id": ACTIVE_ID, "colour": "red"})
        path = await call(client, "memory_get", {"id": ACTIVE_ID, "store": "/tmp"})
    assert missing["error"]["code"] == "invalid_request"
    assert wrong_type["error"] == {"code": "invalid_request", "message": "field `limit` must be an integer"}
    assert unknown["error"] == {"code": "invalid_request", "message": "request contains an unknown field"}
    assert path["error"]["code"] == "path_denied"
    assert "/tmp" not in json.dumps(path)


async def test_oversized_arguments_are_rejected_in_band(store: Store) -> None:
    source = dict(SOURCE)
    async with connect(store.box, "--project", "--allow-candidate-writes") as client:
        long_query = await call(client, "memory_recall", {"query": "q" * 2049})
        arguments = {"title": "t", "kind": "fact", "body": "b" * 1_000_000, "source": source}
        huge_body = await call(client, "memory_remember", arguments)
        still_serving = await client.send_ping()
    assert long_query["error"] == {"code": "invalid_request", "message": "query is too long"}
    assert huge_body["error"] == {"code": "invalid_request", "message": "field `body` must be a bounded string"}
    assert still_serving is not None


async def test_unknown_tool_is_a_json_rpc_error(store: Store) -> None:
    async with connect(store.box) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("memory_search", {"query": "x"})
    assert (raised.value.code, raised.value.message) == (-32602, "tool not found")


async def test_secret_is_detected_and_not_echoed(store: Store) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"
    async with connect(store.box, "--project", "--allow-candidate-writes") as client:
        result = await client.call_tool(
            "memory_remember", {"title": "Token", "kind": "fact", "body": f"use {token}", "source": SOURCE}
        )
    assert envelope(result)["error"]["code"] == "secret_detected"
    assert token not in result.model_dump_json()
    assert list((store.box.project_root / "records").iterdir()) == []


# ---- output bounds ----------------------------------------------------------------------------


async def test_an_envelope_over_120_kib_becomes_output_too_large(store: Store) -> None:
    """A 64 KiB body of quotes doubles when encoded: fine for `sbuf invoke`, too large for a tool result."""
    store.write(ACTIVE_ID, title="Quotes", body='"' * 65000 + "\n")
    assert store.invoke("get", {"version": 1, "id": ACTIVE_ID}, "--project")["ok"] is True
    async with connect(store.box, "--project") as client:
        answer = await call(client, "memory_get", {"id": ACTIVE_ID})
    error = {"code": "output_too_large", "message": TOO_LARGE}
    assert answer == {"version": 1, "operation": "get", "ok": False, "error": error}


async def test_a_result_over_240_kib_becomes_output_too_large(store: Store) -> None:
    """An envelope under 120 KiB whose text block, escaped once more, pushes the whole result past 240 KiB."""
    store.write(ACTIVE_ID, title="Quotes", body='"' * 50000 + "\n")
    async with connect(store.box, "--project") as client:
        answer = await call(client, "memory_get", {"id": ACTIVE_ID})
    assert answer["error"] == {"code": "output_too_large", "message": TOO_LARGE}


async def test_a_result_just_under_the_bounds_is_delivered(store: Store) -> None:
    store.write(ACTIVE_ID, title="Quotes", body='"' * 30000 + "\n")
    async with connect(store.box, "--project") as client:
        answer = await call(client, "memory_get", {"id": ACTIVE_ID})
    assert answer["ok"] is True and answer["result"]["body"] == '"' * 30000 + "\n"


# ---- recall, the warm model, cancellation ------------------------------------------------------


async def test_recall_is_hybrid_and_stays_warm_across_calls(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        first = await call(client, "memory_recall", {"query": "when do releases ship", "budget": 128})
        second = await call(client, "memory_recall", {"query": "when do releases ship", "budget": 128})
    for answer in (first, second):
        receipt = answer["result"]["receipt"]
        assert receipt["retrieval_mode"] == "hybrid", receipt
        assert receipt["semantic_fallback"] is None
        assert receipt["embedding_model"] is not None and receipt["embedding_version"] is not None
        assert receipt["access"] == ["agent"] and receipt["statuses"] == ["active"]
    assert first["result"]["blocks"][0]["record_id"] == ACTIVE_ID
    assert first["result"]["receipt"]["receipt_id"] != second["result"]["receipt"]["receipt_id"]
    assert {block["record_id"] for block in first["result"]["blocks"]} <= {ACTIVE_ID, SECOND_ID, GLOBAL_ID}


async def test_cancelling_an_unknown_request_changes_nothing(store: Store) -> None:
    from mcp_types import CancelledNotification, CancelledNotificationParams

    async with connect(store.box) as client:
        await client.send_notification(CancelledNotification(params=CancelledNotificationParams(request_id=999)))
        assert [tool.name for tool in (await client.list_tools()).tools] == TOOL_NAMES


# ---- resources --------------------------------------------------------------------------------


async def test_resource_templates_and_empty_resource_list(store: Store) -> None:
    async with connect(store.box) as client:
        templates = (await client.list_resource_templates()).resource_templates
        listed = await client.list_resources()
    assert [(t.uri_template, t.name, t.description, t.mime_type) for t in templates] == [
        ("stormbuffer://record/{id}", "record", "One agent-readable record as JSON.", "application/json"),
        (
            "stormbuffer://scope/{scope}/records",
            "scope-records",
            "Active agent-readable records in one allowed scope.",
            "application/json",
        ),  # noqa: E501
        ("stormbuffer://candidate/{id}", "candidate", "One agent-readable candidate as JSON.", "application/json"),
    ]
    assert listed.resources == []


async def read_json(client: ClientSession, uri: str) -> Any:
    result = await client.read_resource(uri)
    assert len(result.contents) == 1
    contents = result.contents[0]
    assert isinstance(contents, TextResourceContents)
    assert (str(contents.uri), contents.mime_type) == (uri, "application/json")
    return json.loads(contents.text)


async def test_record_candidate_and_scope_resources(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        record = await read_json(client, f"stormbuffer://record/{ACTIVE_ID}")
        archived = await read_json(client, f"stormbuffer://record/{ARCHIVED_ID}")
        candidate = await read_json(client, f"stormbuffer://candidate/{CANDIDATE_ID}")
        project = await read_json(client, f"stormbuffer://scope/{store.scope}/records")
        glob = await read_json(client, "stormbuffer://scope/global/records")
    assert record == store.invoke("get", {"version": 1, "id": ACTIVE_ID}, "--project")["result"]
    assert "path" not in record
    assert archived["status"] == "archived"
    assert candidate["status"] == "candidate"
    assert [item["id"] for item in project] == [ACTIVE_ID, SECOND_ID]
    assert all(item["status"] == "active" and item["access"] == "agent" for item in project)
    assert [item["id"] for item in glob] == [GLOBAL_ID]


async def test_the_local_view_never_reads_global_resources(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--local") as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource("stormbuffer://scope/global/records")
        assert raised.value.message == "could not read the requested resource: scope_denied"
        with pytest.raises(MCPError):
            await client.read_resource(f"stormbuffer://record/{GLOBAL_ID}")


RESOURCE_FAILURES = [
    ("https://example.com/record", "invalid_request"),
    ("stormbuffer://record/", "invalid_request"),
    (f"stormbuffer://record/{ACTIVE_ID}/extra", "invalid_request"),
    ("stormbuffer://record/not-a-uuid", "invalid_request"),
    (f"stormbuffer://record/{MISSING_ID}", "not_found"),
    (f"stormbuffer://record/{HUMAN_ID}", "access_denied"),
    (f"stormbuffer://candidate/{ACTIVE_ID}", "not_found"),
    ("stormbuffer://scope/project:not a scope/records", "invalid_request"),
    ("stormbuffer://scope/project:elsewhere/records", "scope_denied"),
    ("stormbuffer://scope/global", "not_found"),
    ("stormbuffer://records", "not_found"),
]


async def test_resource_failures_name_only_the_code(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        for uri, code in RESOURCE_FAILURES:
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            message = f"could not read the requested resource: {code}"
            assert (raised.value.code, raised.value.message) == (-32602, message), uri


async def test_resource_bounds(store: Store) -> None:
    for number in range(101):
        store.write(f"0190a6b3-7c1e-7a51-9c39-{number:012x}", title=f"Note {number}", body=f"Note number {number}.\n")
    async with connect(store.box, "--project") as client:
        with pytest.raises(MCPError) as too_many:
            await client.read_resource(f"stormbuffer://scope/{store.scope}/records")
        with pytest.raises(MCPError) as too_long:
            await client.read_resource("stormbuffer://record/" + "a" * 4096)
        store.write(ACTIVE_ID, title="Quotes", body='"' * 65000 + "\n")
        with pytest.raises(MCPError) as too_big:
            await client.read_resource(f"stormbuffer://record/{ACTIVE_ID}")
    assert too_many.value.message == "could not read the requested resource: output_too_large"
    assert too_long.value.message == "resource URI is too long"
    assert too_big.value.message == "resource contents exceed the bounded output limit"


async def test_resource_errors_do_not_reveal_paths(sandbox: Sandbox) -> None:
    """An uninitialized store is reported by code; no host path reaches the client."""
    async with connect(sandbox, "--project") as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(f"stormbuffer://record/{ACTIVE_ID}")
    assert raised.value.message == "could not read the requested resource: not_initialized"
    assert str(sandbox.base) not in str(raised.value.data or "")
