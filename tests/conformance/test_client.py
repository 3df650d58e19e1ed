"""The typed clients: every example's answer as the generated models and back, and both clients
against the real doors in a throwaway store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.client import InvokeClient, McpClient, ProtocolFailure, parse_envelope, result_model
from stormbuffer.conformance.store import Place, ThrowawayStore

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "schema" / "v1" / "examples").glob("*/*.json"))
ACTIVE_ID = "0194d2a1-1111-7a01-8a01-000000000001"
DECISION_ID = "0194d2a1-2222-7a02-8a02-000000000002"
MISSING_ID = "0194d2a1-0000-7a00-8a00-000000000000"
SOURCE = {"kind": "conversation", "reference": "client-tests", "actor": "agent"}
_NANOSECONDS = re.compile(r"(T\d\d:\d\d:\d\d\.\d{6})\d+")


def to_microseconds(value: Any) -> Any:
    """Python datetimes hold microseconds: finer fractions of a timestamp are cut to six digits."""
    return json.loads(_NANOSECONDS.sub(r"\1", json.dumps(value)))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: f"{path.parent.name}/{path.stem}")
def test_every_example_answer_parses_into_its_model_and_back(path: Path) -> None:
    operation, response = path.parent.name, json.loads(path.read_text(encoding="utf-8"))["response"]
    if not response["ok"]:
        with pytest.raises(ProtocolFailure) as failure:
            parse_envelope(operation, response)
        assert (failure.value.code, failure.value.message) == (response["error"]["code"], response["error"]["message"])
        return
    result = parse_envelope(operation, response)
    assert isinstance(result, result_model(operation))
    assert result.model_dump(mode="json", exclude_unset=True, by_alias=True) == to_microseconds(response["result"])


def test_a_malformed_envelope_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_envelope("get", {"version": 2, "operation": "get", "ok": True, "result": {}})
    with pytest.raises(ValueError):
        result_model("frobnicate")


@pytest.fixture(scope="module")
def store(caller_env: dict[str, str]) -> Iterator[ThrowawayStore]:
    with ThrowawayStore(caller_env) as throwaway:
        yield throwaway


def test_invoke_client_returns_models(store: ThrowawayStore) -> None:
    place: Place = store.place()
    client = InvokeClient(view="project", cwd=place.cwd, env=place.env)
    record = client.get(id=ACTIVE_ID).root  # type: ignore[attr-defined]
    assert record.id == ACTIVE_ID and record.title == "Release builds use the committed lockfile"
    hits = client.search(query="release lockfile", limit=1).root  # type: ignore[attr-defined]
    assert [hit.record_id for hit in hits] == [ACTIVE_ID]
    proposal = client.remember(title="Client test", kind="fact", body="Typed clients parse answers.", source=SOURCE)
    assert proposal.root.outcome == "requires_approval"  # type: ignore[attr-defined]
    with pytest.raises(ProtocolFailure) as failure:
        client.get(id=MISSING_ID)
    assert failure.value.code == "not_found" and failure.value.message == "record was not found"


def test_mcp_client_returns_models(store: ThrowawayStore) -> None:
    place = store.place(models=True)
    with McpClient(view="project", writes="all", cwd=place.cwd, env=place.env) as client:
        assert [tool.name for tool in client.tools()] == sorted(
            ["memory_forget", "memory_get", "memory_recall", "memory_remember", "memory_update"]
        )
        recalled = client.recall(query="tar archives backups", budget=64)
        assert recalled.receipt.retrieval_mode == "hybrid"  # type: ignore[attr-defined]
        assert DECISION_ID in [block.record_id for block in recalled.blocks]  # type: ignore[attr-defined]
        assert client.get(id=DECISION_ID).root.kind == "decision"  # type: ignore[attr-defined]
        proposal = client.remember(title="Client test", kind="fact", body="Typed clients parse answers.", source=SOURCE)
        assert proposal.root.outcome == "requires_approval"  # type: ignore[attr-defined]
        assert client.forget(id=ACTIVE_ID).root.status == "archived"  # type: ignore[attr-defined]
        with pytest.raises(ProtocolFailure) as failure:
            client.forget(id=ACTIVE_ID)
        assert failure.value.code == "invalid_state" and failure.value.operation == "archive"
