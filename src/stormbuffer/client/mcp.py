"""MCP clients driven by the official SDK client: `McpClient`, one `stormbuffer-mcp --stdio`
session, and `RemoteMcpClient`, a team server's `/mcp` over Streamable HTTP with a team token.

The SDK is asynchronous; each client runs it in a private event loop thread (an anyio blocking
portal), so its methods are plain blocking calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Self

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
Streams = tuple[Any, Any]


class _Session:
    """One initialized SDK session over the streams `transport` opens; use it as a context manager."""

    def __init__(self, transport: AbstractAsyncContextManager[Streams], timeout: float, stack: ExitStack) -> None:
        self._stack = stack
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            read, write = self._stack.enter_context(self._portal.wrap_async_context_manager(transport))
            self._session = self._stack.enter_context(
                self._portal.wrap_async_context_manager(ClientSession(read, write, read_timeout_seconds=timeout))
            )
            self.initialized: InitializeResult = self._portal.call(self._session.initialize)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the session (a stdio server sees end of input and exits)."""
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
        """`memory_remember` → `RememberResult` (a write grant, or an agent token, and up)."""
        return self.call("memory_remember", arguments)

    def update(self, **arguments: Any) -> BaseModel:
        """`memory_update` → `UpdateResult` (a write grant, or an agent token, and up)."""
        return self.call("memory_update", arguments)

    def forget(self, **arguments: Any) -> BaseModel:
        """`memory_forget` → `ArchiveResult` (the `all` grant, or a reviewer token, and up)."""
        return self.call("memory_forget", arguments)


class McpClient(_Session):
    """A session with `command --stdio --<view> [write grant]`.

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
        stack = ExitStack()
        errlog = stack.enter_context(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
        super().__init__(stdio_client(params, errlog=errlog), timeout, stack)


class RemoteMcpClient(_Session):
    """A session with a team server's MCP endpoint (`url`, e.g. `http://127.0.0.1:7342/mcp`) over
    Streamable HTTP, sending `Authorization: Bearer <token>`: `token` when given, else
    `STORMBUFFER_TOKEN` of `env` (default: this process's environment). The token's role is the
    write mode. Plain `http` is refused unless the address is loopback (`RemoteError`, which never
    holds the token); proxies from the environment are never used."""

    def __init__(
        self, url: str, *, token: str | None = None, env: Mapping[str, str] | None = None, timeout: float = 120.0
    ) -> None:
        from stormbuffer.adapters.mcp.remote import TOKEN_VARIABLE, checked

        source = {TOKEN_VARIABLE: token} if token is not None else (os.environ if env is None else env)
        self.url, secret = checked(url, source)
        super().__init__(_streamable_http(self.url, secret, timeout), timeout, ExitStack())


@asynccontextmanager
async def _streamable_http(url: str, token: str, timeout: float) -> AsyncIterator[Streams]:
    """The SDK's Streamable HTTP streams to `url`, over an HTTP client that sends the token."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout, trust_env=False) as http,
        streamable_http_client(url, http_client=http) as (read, write),
    ):
        yield read, write
