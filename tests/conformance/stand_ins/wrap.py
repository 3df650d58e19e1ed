"""Deliberately broken stand-ins: the real `sbuf invoke`, `stormbuffer-mcp` and `sbuf serve`, with one
thing changed.

Each script next to this module changes one thing and is run as a door of the conformance kit
(`python tests/conformance/stand_ins/<mutation>.py`), which must then fail the right check.
"""

from __future__ import annotations

import json
import signal
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


def serve(mutate: Callable[[str, int, Envelope], tuple[int, Envelope]], *, host: bool = True) -> None:
    """Start the real `sbuf serve` on a free port and relay `POST /v1/invoke/...` on the port we were
    given, answering `mutate(operation, status, body)`; `host=False` also passes a foreign `Host` on as
    the real server's own, so that its refusal never happens."""
    import http.client
    import re
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    real_args = [*args[: args.index("--port")], "--port", "0"]
    server = subprocess.Popen([str(BIN / "sbuf"), *real_args], stderr=subprocess.PIPE, text=True)
    assert server.stderr is not None
    upstream = None
    for line in server.stderr:
        found = re.search(r"listening address=(\S+)", line)
        if found:
            upstream = found.group(1)
            break
    assert upstream is not None
    threading.Thread(target=lambda: server.stderr.read() if server.stderr else None, daemon=True).start()
    own = f"127.0.0.1:{port}"

    class Relay(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            headers = {name: value for name, value in self.headers.items() if name.lower() != "host"}
            given = self.headers.get("Host", "")
            headers["Host"] = upstream if given == own or not host else given
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            connection = http.client.HTTPConnection(upstream, timeout=60)
            connection.request("POST", self.path, body=data, headers=headers)
            answer = connection.getresponse()
            body, status = answer.read(), answer.status
            connection.close()
            try:
                status, changed = mutate(self.path.rsplit("/", 1)[-1], status, json.loads(body))
                body = compact(changed).encode("utf-8")
            except ValueError:
                pass
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    relay = ThreadingHTTPServer(("127.0.0.1", port), Relay)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=relay.shutdown).start())
    try:
        relay.serve_forever()
    finally:
        server.terminate()
        server.wait()
