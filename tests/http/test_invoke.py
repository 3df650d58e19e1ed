"""`POST /v1/invoke/{operation}` gives what `sbuf invoke` prints, over every example of `schema/v1`,
and what the MCP tools return for the operations they expose.

One server serves a copy of tests/fixtures/contract-store without the model (the examples'
lexical answers), another the same store with the model (the hybrid examples, and the MCP
comparison). The records are put back to the fixture's after any example that changed them. Reads
run before writes, so that no read depends on how soon the server's watcher saw a restore.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from stormbuffer.protocol.invoke import encode
from tests.contract.test_invoke_examples import (
    CONTRACT_STORE,
    EXAMPLES,
    assert_same,
    is_hybrid,
    load,
    mask_generated,
    mask_semantic,
)
from tests.helpers import Sandbox, link_tree, sbuf_env, tree_digest
from tests.mcp.conftest import connect
from tests.mcp.conftest import envelope as tool_envelope

from .conftest import start

FIXTURE_RECORDS = CONTRACT_STORE / ".sbuf" / "records"
WATCH_SETTLE_S = 0.25  # longer than a records watcher takes to report a change (80 ms)
TOOLS = {"context": "memory_recall", "get": "memory_get", "remember": "memory_remember", "update": "memory_update",
         "archive": "memory_forget"}  # fmt: skip
RECEIPT = re.compile(r'"(receipt_id|retrieved_at)":"[^"]*"')
READS = ("search", "context", "get")
IN_ORDER = sorted(EXAMPLES, key=lambda path: (path.parent.name not in READS, path))


class ContractServer:
    """A server on a copy of the contract store, whose records can be put back to the fixture's."""

    def __init__(self, base: Path, models: Path | None) -> None:
        shutil.copytree(CONTRACT_STORE, base / "store")
        if models is not None:
            link_tree(models, base / "cache" / "stormbuffer" / "models")
        self.box = Sandbox(base, sbuf_env(base), base / "store")
        self.server = start(self.box)
        self.client = self.server.client()
        self.pristine = tree_digest(FIXTURE_RECORDS)

    @property
    def records(self) -> Path:
        return self.box.project_root / "records"

    def reset(self) -> None:
        """The fixture's records again, seen by the server's watcher, if anything changed them."""
        if tree_digest(self.records) == self.pristine:
            return
        shutil.rmtree(self.records)
        shutil.copytree(FIXTURE_RECORDS, self.records)
        time.sleep(WATCH_SETTLE_S)

    def invoke(self, operation: str, request: Any) -> tuple[httpx2.Response, dict[str, Any]]:
        self.reset()
        answer = self.client.post(f"/v1/invoke/{operation}", content=json.dumps(request).encode(),
                                  headers={"Content-Type": "application/json"})  # fmt: skip
        found: dict[str, Any] = answer.json()
        assert answer.content == encode(found).encode("utf-8")  # the very line `sbuf invoke` prints
        assert (answer.status_code == 200) is found["ok"]
        return answer, found

    def close(self) -> None:
        self.client.close()
        assert self.server.stop() == 0


@pytest.fixture(scope="module")
def lexical(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContractServer]:
    server = ContractServer(tmp_path_factory.mktemp("contract-lexical"), None)
    yield server
    server.close()


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[ContractServer]:
    server = ContractServer(tmp_path_factory.mktemp("contract-hybrid"), acquired_models)
    yield server
    server.close()


def example_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("operation", READS)
def test_reads_are_byte_equal_to_sbuf_invoke(lexical: ContractServer, operation: str) -> None:
    """The same store, the same request: the HTTP body is the line `sbuf invoke` prints (receipt id and
    time aside)."""
    example = load(next(p for p in EXAMPLES if p.parent.name == operation and load(p)["response"]["ok"]))
    answer, _ = lexical.invoke(operation, example["request"])
    done = lexical.box.sbuf("--project", "invoke", operation, input=json.dumps(example["request"]))
    assert done.stderr == ""
    assert RECEIPT.sub("<receipt>", answer.text) == RECEIPT.sub("<receipt>", done.stdout.removesuffix("\n"))


@pytest.mark.parametrize("path", [p for p in IN_ORDER if not is_hybrid(load(p))], ids=example_id)
def test_example_without_the_model(lexical: ContractServer, path: Path) -> None:
    example, operation = load(path), path.parent.name
    _, found = lexical.invoke(operation, example["request"])
    expected = mask_generated(operation, example["request"], example["response"])
    assert_same(expected, mask_generated(operation, example["request"], found))


@pytest.mark.parametrize("path", [p for p in IN_ORDER if is_hybrid(load(p))], ids=example_id)
def test_hybrid_example_with_the_model(hybrid: ContractServer, path: Path) -> None:
    example, operation = load(path), path.parent.name
    _, found = hybrid.invoke(operation, example["request"])
    expected = mask_generated(operation, example["request"], example["response"])
    assert_same(mask_semantic(expected), mask_semantic(mask_generated(operation, example["request"], found)))


def test_the_mcp_tools_answer_the_same(hybrid: ContractServer) -> None:
    """For every example of an operation MCP exposes: the tool's envelope equals the HTTP one."""
    cases = [path for path in IN_ORDER if path.parent.name in TOOLS]

    async def compare() -> None:
        async with connect(hybrid.box, "--project", "--allow-writes") as mcp:
            for path in cases:
                example, operation = load(path), path.parent.name
                request = example["request"]
                arguments = {key: value for key, value in request.items() if key not in ("version", "operation")}
                if request.get("version") != 1 or request.get("operation", operation) != operation:
                    continue  # a tool call always speaks version 1 of its own operation
                _, over_http = hybrid.invoke(operation, request)
                hybrid.reset()
                over_mcp = tool_envelope(await mcp.call_tool(TOOLS[operation], arguments))
                left = mask_generated(operation, request, over_http)
                right = mask_generated(operation, request, over_mcp)
                assert left == right, example_id(path)

    anyio.run(compare)
