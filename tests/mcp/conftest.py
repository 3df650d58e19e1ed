"""Fixtures for MCP tests: a sandbox with an initialized project store, records written as Markdown,
the real `stormbuffer-mcp` process driven by the official SDK client or by raw JSON-RPC lines."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult

from stormbuffer.conformance.engines import move_to_postgresql, write_records
from stormbuffer.core.stores import (
    DATABASE_URL_ENV,
    DIRECTORY,
    POSTGRESQL,
    PlatformDirs,
    View,
    initialize_store,
    resolve_store,
)
from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.helpers import Sandbox, record_markdown

STORMBUFFER_MCP = Path(sys.executable).parent / "stormbuffer-mcp"
TIMEOUT = 60.0  # seconds; a guard against a hung process, never a speed assertion

# Fixed record ids (UUIDv7 layout) used across the MCP tests.
ACTIVE_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11"
SECOND_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e12"
CANDIDATE_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e13"
ARCHIVED_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e14"
HUMAN_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e15"
GLOBAL_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e16"
MISSING_ID = "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e99"

SOURCE = {"kind": "conversation", "reference": "session:mcp-tests", "actor": "user"}
OPERATIONS = {
    "memory_recall": "context",
    "memory_get": "get",
    "memory_remember": "remember",
    "memory_update": "update",
    "memory_forget": "archive",
}


@dataclass
class Store:
    """A sandbox whose project store (and global store) are initialized, on either engine; on PostgreSQL
    both keep their records in the database of the sandbox's `STORMBUFFER_DATABASE_URL`, and
    `copy_database` gives a copy of the sandbox a copy of it."""

    box: Sandbox
    copy_database: Callable[[str], str] | None = None

    @property
    def database(self) -> str | None:
        """The URL of the stores' database (None: directory stores)."""
        return self.box.env[DATABASE_URL_ENV] if self.copy_database is not None else None

    @property
    def scope(self) -> str:
        config = tomllib.loads((self.box.project_root / "store.toml").read_text(encoding="utf-8"))
        return f"project:{config['project_id']}"

    def write(self, record_id: str, *, store: str = "project", **fields: Any) -> None:
        """Write one canonical record file by hand (agent-readable unless `access` says otherwise)."""
        fields.setdefault("access", "agent")
        root = self.box.project_root if store == "project" else self.box.global_root
        scope = self.scope if store == "project" else "global"
        write_records(root, self.box.env, {f"{record_id}.md": record_markdown(record_id, scope, **fields).encode()})

    def seed(self) -> None:
        """The records most tests read: active, candidate, archived and human-only project records, one global."""
        self.write(ACTIVE_ID, title="Release constraint", body="Releases ship on Tuesdays after the magnetar check.\n")
        self.write(SECOND_ID, title="Build command", kind="procedure", body="Run the magnetar build with just.\n")
        self.write(CANDIDATE_ID, title="Proposed rule", status="candidate", body="Magnetar reviews need two people.\n")
        self.write(ARCHIVED_ID, title="Old rule", status="archived", body="Magnetar used to ship on Fridays.\n")
        self.write(HUMAN_ID, title="Private note", access="human", body="Only people read this magnetar note.\n")
        self.write(GLOBAL_ID, store="global", title="Global habit", body="Prefer small magnetar commits.\n")

    def invoke(self, operation: str, request: Mapping[str, Any], *flags: str) -> dict[str, Any]:
        """What `sbuf <flags> invoke <operation>` prints for `request`."""
        done = self.box.sbuf(*flags, "invoke", operation, input=json.dumps(request))
        assert done.stderr == "", done.stderr
        envelope: dict[str, Any] = json.loads(done.stdout)
        assert done.returncode == (0 if envelope["ok"] else 1)
        return envelope


@pytest.fixture
def store(request: pytest.FixtureRequest, sandbox: Sandbox) -> Store:  # noqa: F811 - the imported fixture
    """Initialized global and project stores (as `sbuf init` creates them, without its first sync), in
    the directory engine, or in a fresh PostgreSQL database when parametrized with "postgresql"
    (`ENGINES`, indirectly)."""
    engine = getattr(request, "param", DIRECTORY)
    dirs = PlatformDirs.from_environ(sandbox.env)
    roots = []
    for view in (View.GLOBAL, View.PROJECT):
        paths = resolve_store(view, sandbox.cwd, dirs)
        initialize_store(paths)
        roots.append(paths.root)
    if engine == DIRECTORY:
        return Store(sandbox)
    sandbox.env[DATABASE_URL_ENV] = request.getfixturevalue("postgres_url")
    for root in roots:
        move_to_postgresql(root, sandbox.env)
    return Store(sandbox, request.getfixturevalue("postgres_copy"))


ENGINES = [DIRECTORY, POSTGRESQL]  # `@pytest.mark.parametrize("store", ENGINES, indirect=True)`


@asynccontextmanager
async def connect(box: Sandbox, *flags: str, cwd: Path | None = None) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with `stormbuffer-mcp --stdio <flags>` started in the sandbox."""
    params = StdioServerParameters(
        command=str(STORMBUFFER_MCP), args=["--stdio", *flags], env=box.env, cwd=cwd or box.cwd
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=TIMEOUT) as client:
            await client.initialize()
            yield client


def envelope(result: CallToolResult) -> dict[str, Any]:
    """The envelope of a tool result, after checking the result's shape rules."""
    structured = result.structured_content
    assert isinstance(structured, dict)
    assert len(result.content) == 1 and result.content[0].type == "text"
    assert result.content[0].text == json.dumps(structured, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert result.is_error is (structured["ok"] is not True)
    return structured


async def call(client: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return envelope(await client.call_tool(tool, arguments))


class RawServer:
    """`stormbuffer-mcp` spoken to line by line, for what an SDK client would never send."""

    def __init__(
        self, box: Sandbox, *args: str, program: Path = STORMBUFFER_MCP, env: Mapping[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            [str(program), *args],
            cwd=box.cwd,
            env=dict(box.env if env is None else env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, *messages: dict[str, Any] | str) -> None:
        assert self.process.stdin is not None
        for message in messages:
            self.process.stdin.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        line = self._lines.get(timeout=TIMEOUT)
        assert line is not None, "the adapter closed its output"
        message: dict[str, Any] = json.loads(line)
        return message

    def close(self) -> tuple[int, list[dict[str, Any]], str]:
        """Close stdin; the exit status, every message still written, and stderr."""
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=TIMEOUT)
        rest = []
        while (line := self._lines.get(timeout=TIMEOUT)) is not None:
            rest.append(json.loads(line))
        return code, rest, self.process.stderr.read()

    def initialize(self) -> dict[str, Any]:
        self.send(request(1, "initialize", INITIALIZE_PARAMS), INITIALIZED)
        return self.receive()


INITIALIZE_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "stormbuffer-tests", "version": "1"},
}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def request(request_id: int, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
