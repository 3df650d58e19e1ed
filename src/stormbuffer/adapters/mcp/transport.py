"""Stdio streams that answer every request before honouring the end of stdin.

The SDK's dispatcher cancels requests still being handled when its input ends. A host, or a
script that pipes requests and closes stdin, should still get every answer: this relay holds the
end of input back until each request the host sent was answered or cancelled by the host.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, RequestId


class Outstanding:
    """The ids of host requests that have neither been answered nor cancelled."""

    def __init__(self) -> None:
        self._ids: set[RequestId] = set()
        self._changed = anyio.Event()

    def inbound(self, item: SessionMessage | Exception) -> None:
        if not isinstance(item, SessionMessage):
            return
        message = item.message
        if isinstance(message, JSONRPCRequest):
            self._ids.add(coerce_request_id(message.id))
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            cancelled = cancelled_request_id_from_params(message.params)
            if cancelled is not None:
                self._settle(cancelled)

    def outbound(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCResponse | JSONRPCError) and message.id is not None:
            self._settle(message.id)

    def _settle(self, request_id: RequestId) -> None:
        self._ids.discard(coerce_request_id(request_id))
        self._changed.set()

    async def wait_settled(self) -> None:
        while self._ids:
            self._changed = anyio.Event()
            await self._changed.wait()


@asynccontextmanager
async def answering_stdio(
    stdin: anyio.AsyncFile[str] | None = None, stdout: anyio.AsyncFile[str] | None = None
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The read and write streams of `stdio_server` (this process's stdio, or the given text
    streams), relayed so that EOF waits for every answer."""
    outstanding = Outstanding()
    inbound_send, inbound_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound_send, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    async with stdio_server(stdin, stdout) as (stdin_stream, stdout_stream):

        async def relay_in() -> None:
            async with inbound_send, stdin_stream:
                try:
                    async for item in stdin_stream:
                        outstanding.inbound(item)
                        await inbound_send.send(item)
                except anyio.BrokenResourceError:  # the server stopped reading
                    return
                await outstanding.wait_settled()

        async def relay_out() -> None:
            async with outbound_receive, stdout_stream:
                async for item in outbound_receive:
                    await stdout_stream.send(item)
                    outstanding.outbound(item)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(relay_in)
            tasks.start_soon(relay_out)
            yield inbound_receive, outbound_send
