"""`RemoteMcpClient`: the MCP client the conformance kit speaks to a running team server's `/mcp`
with (the `mcp-http` door)."""

from __future__ import annotations

from contextlib import ExitStack

import httpx2
from anyio.from_thread import start_blocking_portal
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from stormbuffer.client.mcp import McpClient


class RemoteMcpClient(McpClient):
    """`McpClient`'s calls over Streamable HTTP: an initialized SDK client session with the server at
    `url` (its `/mcp`), sending `token` as `Authorization: Bearer`."""

    def __init__(self, url: str, token: str, timeout: float) -> None:  # no process to start
        self._stack = ExitStack()
        try:
            self._portal = self._stack.enter_context(start_blocking_portal())
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout, trust_env=False)
            self._stack.enter_context(self._portal.wrap_async_context_manager(http))
            read, write = self._stack.enter_context(
                self._portal.wrap_async_context_manager(streamable_http_client(url, http_client=http))
            )
            self._session = self._stack.enter_context(
                self._portal.wrap_async_context_manager(ClientSession(read, write, read_timeout_seconds=timeout))
            )
            self.initialized = self._portal.call(self._session.initialize)
        except BaseException:
            self._stack.close()
            raise
