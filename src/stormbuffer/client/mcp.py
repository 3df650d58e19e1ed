"""`McpClient`: one `stormbuffer-mcp --stdio` session, driven by the official MCP SDK client.

The SDK is asynchronous; the client runs it in a private event loop thread (an anyio blocking
portal), so its methods are plain blocking calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from anyio.from_thread import start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import CallToolResult, InitializeResult, ResourceTemplate, TextContent, Tool
from pydantic import BaseModel

from .invoke import VIEWS
from .models import parse_envelope

TOOLS = {
    "memory_recall": "context",
    "memory_get": "get",
    "memory_remember": "remember",
    "memory_update": "update",
    "memory_forget": "archive",
}
WRITE_FLAGS = {"none": (), "candidates": ("--allow-candidate-writes",), "all": ("--allow-writes",)}


class McpClient:
    """A session with `command --stdio --<view> [write grant]`; use it as a context manager.

    `writes` is the host's write grant: `none` (read-only, the default), `candidates` (remember and
    update) or `all` (also forget). What the server writes to standard error is discarded.
    """

    def __init__(
        self,
        command: Sequence[str] = ("stormbuffer-mcp",),
        *,
        view: str = "global",
        writes: str = "none",
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        if view not in VIEWS or writes not in WRITE_FLAGS:
            raise ValueError("unknown view or write grant")
        program, *leading = command
        args = [*leading, "--stdio", f"--{view}", *WRITE_FLAGS[writes]]
        params = StdioServerParameters(command=program, args=args, cwd=cwd, env=None if env is None else dict(env))
        self._stack = ExitStack()
        try:
            errlog = self._stack.enter_context(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
            self._portal = self._stack.enter_context(start_blocking_portal())
            read, write = self._stack.enter_context(
                self._portal.wrap_async_context_manager(stdio_client(params, errlog=errlog))
            )
            self._session = self._stack.enter_context(
                self._portal.wrap_async_context_manager(ClientSession(read, write, read_timeout_seconds=timeout))
            )
            self.initialized: InitializeResult = self._portal.call(self._session.initialize)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> McpClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session: the server sees end of input and exits."""
        self._stack.close()

    def tools(self) -> list[Tool]:
        return list(self._portal.call(self._session.list_tools).tools)

    def resource_templates(self) -> list[ResourceTemplate]:
        return list(self._portal.call(self._session.list_resource_templates).resource_templates)

    def resources(self) -> list[Any]:
        return list(self._portal.call(self._session.list_resources).resources)

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        """The raw tool result (`content`, `structuredContent`, `isError`)."""
        result = self._portal.call(self._session.call_tool, name, dict(arguments))
        if not isinstance(result, CallToolResult):
            raise TypeError("the server did not answer with a tool result")
        return result

    def envelope(self, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope of a tool call, read from its text content (what every host sees)."""
        content = self.call_tool(name, arguments).content
        if not content or not isinstance(content[0], TextContent):
            raise ValueError("the tool result has no text content")
        value = json.loads(content[0].text)
        if not isinstance(value, dict):
            raise ValueError("the tool result's text is not a JSON object")
        return value

    def call(self, name: str, arguments: Mapping[str, Any]) -> BaseModel:
        """The result model of the tool's operation; `ProtocolFailure` for a failure envelope."""
        return parse_envelope(TOOLS[name], self.envelope(name, arguments))

    def recall(self, **arguments: Any) -> BaseModel:
        """`memory_recall` → `ContextResult`."""
        return self.call("memory_recall", arguments)

    def get(self, **arguments: Any) -> BaseModel:
        """`memory_get` → `GetResult`."""
        return self.call("memory_get", arguments)

    def remember(self, **arguments: Any) -> BaseModel:
        """`memory_remember` → `RememberResult` (needs the `candidates` or `all` grant)."""
        return self.call("memory_remember", arguments)

    def update(self, **arguments: Any) -> BaseModel:
        """`memory_update` → `UpdateResult` (needs the `candidates` or `all` grant)."""
        return self.call("memory_update", arguments)

    def forget(self, **arguments: Any) -> BaseModel:
        """`memory_forget` → `ArchiveResult` (needs the `all` grant)."""
        return self.call("memory_forget", arguments)
