"""`stormbuffer-mcp --remote URL`: a stdio host relayed to a team server's `/mcp`.

The host's messages, read and bounded like those of the local server (`transport`), go to the
team server through the SDK's Streamable HTTP client, and its answers come back on stdout. The
team token comes from `STORMBUFFER_TOKEN`, never from the command line (which other users of the
machine can read); it is sent as `Authorization: Bearer` and appears in no message. Plain `http`
is accepted only to a loopback address: a token crosses a network only over TLS.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import anyio

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

TOKEN_VARIABLE = "STORMBUFFER_TOKEN"
NO_TOKEN = f"set {TOKEN_VARIABLE} to a team token (`sbuf team token create`) to use --remote"
BAD_URL = "--remote takes the team server's MCP address, such as https://HOST:PORT/mcp"
PLAIN_HTTP = "--remote sends a token: use https, or http only to a loopback address"

logger = logging.getLogger("stormbuffer.mcp")


class RemoteError(Exception):
    """The remote address or token cannot be used; the message never holds the token."""


def checked(url: str, env: Mapping[str, str]) -> tuple[str, str]:
    """The address and the token to relay to, or RemoteError saying why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(BAD_URL)
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise RemoteError(PLAIN_HTTP)
    token = env.get(TOKEN_VARIABLE, "").strip()
    if not token:
        raise RemoteError(NO_TOKEN)
    return url, token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def relay(url: str, token: str) -> bool:
    """Relay this process's stdio to the server at `url` until the host closes stdin and every
    request it sent was answered. Returns whether the host sent anything."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from .transport import answering_stdio

    sent = False
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        answering_stdio() as (host_read, host_write),
        httpx2.AsyncClient(headers=headers, timeout=timeout, trust_env=False) as http,
        streamable_http_client(url, http_client=http) as (server_read, server_write),
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(_pump, server_read, host_write)
        async for item in host_read:
            if isinstance(item, Exception):
                continue
            sent = True
            await server_write.send(item)
        tasks.cancel_scope.cancel()  # every request the host sent has been answered
    return sent


async def _pump(
    source: AsyncIterable[SessionMessage | Exception], sink: MemoryObjectSendStream[SessionMessage]
) -> None:
    """The server's messages to the host; a transport failure is logged by its class name only."""
    async for item in source:
        if isinstance(item, Exception):
            logger.warning("the team server could not be reached or refused a message: %s", type(item).__name__)
            continue
        await sink.send(item)
