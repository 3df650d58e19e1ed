"""Typed clients for the version-1 protocol, returning the Pydantic models generated from `schema/v1`.

`InvokeClient` runs `sbuf invoke` once per request; `McpClient` keeps one `stormbuffer-mcp` session
over stdio; `HttpClient` posts to `/v1/invoke/{operation}` of a running `sbuf serve` (a team
server's too, with a team token); `RemoteMcpClient` keeps a session with a team server's `/mcp`.
A success gives the operation's result model (`stormbuffer_models`), a failure raises
`ProtocolFailure` with the envelope's stable `code` and fixed `message`:

    from stormbuffer.client import InvokeClient

    hits = InvokeClient(view="project").search(query="release lockfile", limit=5)
    for hit in hits.root:
        print(hit.record_id, hit.title)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .invoke import Exchange, InvokeClient
from .models import ProtocolFailure, parse_envelope, result_model

if TYPE_CHECKING:
    from .http import HttpClient
    from .mcp import McpClient, RemoteMcpClient

__all__ = ["Exchange", "HttpClient", "InvokeClient", "McpClient", "ProtocolFailure", "RemoteMcpClient",
           "parse_envelope", "result_model"]  # fmt: skip
_LAZY = {"McpClient": "mcp", "RemoteMcpClient": "mcp", "HttpClient": "http"}


def __getattr__(name: str) -> Any:
    """`McpClient` and `RemoteMcpClient` import the MCP SDK and `HttpClient` an HTTP client, so each is loaded only when
    asked for."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(name)
