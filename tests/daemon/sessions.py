"""Short MCP sessions through the real `stormbuffer-mcp` relay, for the daemon tests."""

from __future__ import annotations

from typing import Any

from tests.helpers import Sandbox
from tests.mcp.conftest import RawServer, request

RECALL = request(3, "tools/call", {"name": "memory_recall", "arguments": {"query": "magnetar"}})


def session(box: Sandbox, *flags: str, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    """One MCP session through `stormbuffer-mcp --stdio --project <flags>`: initialize, list the
    tools, recall; the exit status, every answer, stderr. It starts the daemon when none runs."""
    server = RawServer(box, "--stdio", "--project", *flags, env=env)
    initialized = server.initialize()
    server.send(request(2, "tools/list"), RECALL)
    code, rest, stderr = server.close()
    return code, [initialized, *rest], stderr
