"""Deliberately broken stand-ins: the real `sbuf invoke` and `stormbuffer-mcp`, with one thing changed.

Each script next to this module changes one thing and is run as a door of the conformance kit
(`python tests/conformance/stand_ins/<mutation>.py`), which must then fail the right check.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
Envelope = dict[str, Any]


def compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def invoke(mutate: Callable[[str, Any, Envelope], Envelope]) -> None:
    """Run the real `sbuf` with our arguments and stdin; print `mutate(operation, request, envelope)`."""
    args, data = sys.argv[1:], sys.stdin.buffer.read()
    done = subprocess.run([str(BIN / "sbuf"), *args], input=data, capture_output=True, check=False)
    try:
        request = json.loads(data)
    except ValueError:
        request = None
    envelope = mutate(args[-1], request, json.loads(done.stdout))
    sys.stdout.write(compact(envelope) + "\n")
    sys.stderr.buffer.write(done.stderr)
    sys.exit(0 if envelope.get("ok") is True else 1)


def mcp(
    args: Callable[[list[str]], list[str]] = lambda args: args,
    request: Callable[[dict[str, Any]], dict[str, Any]] = lambda message: message,
    response: Callable[[str | None, dict[str, Any]], dict[str, Any]] = lambda method, message: message,
) -> None:
    """Relay JSON-RPC lines between the host and the real `stormbuffer-mcp`, changing them on the way:
    `request(message)` from the host, `response(method of the request answered, message)` to it."""
    server = subprocess.Popen([str(BIN / "stormbuffer-mcp"), *args(sys.argv[1:])], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    methods: dict[Any, str] = {}

    def upstream() -> None:
        assert server.stdin is not None
        for line in sys.stdin.buffer:
            message = json.loads(line)
            if "method" in message and "id" in message:
                methods[message["id"]] = message["method"]
            server.stdin.write(compact(request(message)).encode("utf-8") + b"\n")
            server.stdin.flush()
        server.stdin.close()

    threading.Thread(target=upstream, daemon=True).start()
    for line in server.stdout:
        message = json.loads(line)
        sys.stdout.buffer.write(compact(response(methods.get(message.get("id")), message)).encode("utf-8") + b"\n")
        sys.stdout.buffer.flush()
    sys.exit(server.wait())


def tool_call_result(method: str | None, message: dict[str, Any]) -> dict[str, Any] | None:
    """The `CallToolResult` of a `tools/call` response, or None."""
    return message.get("result") if method == "tools/call" and isinstance(message.get("result"), dict) else None
