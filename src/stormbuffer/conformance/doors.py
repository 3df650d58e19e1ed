"""The doors under test (`sbuf invoke`, `stormbuffer-mcp`, `POST /v1/invoke/{operation}`, MCP over
Streamable HTTP at a team server's `/mcp`) and the record of every call made through them.

Each call keeps what the aggregate checks need: the request, the raw answer text, the parsed
envelope and, for MCP, whether the tool result kept its shape rules. Checks that look at every
answer (schemas, sanitization, bounds) read these records.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from stormbuffer.client.invoke import InvokeClient

from .store import Place

if TYPE_CHECKING:
    from stormbuffer.client.mcp import McpClient


INVOKE = "invoke"
MCP = "mcp"
HTTP = "http"
HTTP_SERVE = "http-serve"  # the kit started the HTTP server itself, in its throwaway store
MCP_HTTP = "mcp-http"  # MCP over Streamable HTTP of a running server, with a team token
SERVE_TIMEOUT_S = 60.0  # a guard against a server that never listens or never stops
TOOLS = {"context": "memory_recall", "get": "memory_get", "remember": "memory_remember", "update": "memory_update",
         "archive": "memory_forget"}  # fmt: skip
OPERATION_OF = {tool: operation for operation, tool in TOOLS.items()}


@dataclass
class Call:
    """One request through one door and what came back."""

    door: str
    operation: str
    request: Any
    text: str  # the answer as sent: the stdout line, the tool result's text content, or the HTTP body
    envelope: dict[str, Any] | None
    problems: list[str] = field(default_factory=list)  # transport rules the answer broke


def parse_command(command: str | Sequence[str]) -> list[str]:
    """A command given as one shell-quoted string (`"python wrapper.py"`) or as its arguments."""
    words = shlex.split(command) if isinstance(command, str) else list(command)
    if not words:
        raise ValueError("the command is empty")
    return words


class Recorder:
    """Every call of the run, in order."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def add(self, call: Call) -> Call:
        with self._lock:
            self.calls.append(call)
        return call

    def of(self, door: str) -> list[Call]:
        return [call for call in self.calls if call.door == door]


class InvokeDoor:
    """`<command> --project invoke <operation>`, run in a place of the throwaway store."""

    def __init__(self, command: Sequence[str], recorder: Recorder) -> None:
        self.command = list(command)
        self.recorder = recorder

    def call(self, place: Place, operation: str, request: Any = None, *, raw: bytes | None = None) -> Call:
        data = raw if raw is not None else json.dumps(request, ensure_ascii=False).encode("utf-8")
        client = InvokeClient(self.command, view="project", cwd=place.cwd, env=place.env)
        done = client.exchange(operation, data)
        text = done.stdout.decode("utf-8", errors="replace")
        problems = []
        if done.stderr:
            problems.append("wrote to standard error")
        if not done.stdout.endswith(b"\n") or done.stdout.count(b"\n") != 1:
            problems.append("standard output is not exactly one line")
        try:
            envelope = done.envelope()
        except ValueError:
            envelope = None
            problems.append("standard output is not one JSON object")
        if envelope is not None and done.returncode != (0 if envelope.get("ok") is True else 1):
            problems.append(f"exit status {done.returncode} does not match ok={envelope.get('ok')}")
        return self.recorder.add(Call(INVOKE, operation, request if raw is None else raw, text, envelope, problems))


class McpSession:
    """One MCP session whose tool calls are recorded as calls through `door`: `stdio` starts
    `<command> --stdio --project [grant]`, `remote` connects to a running server's `/mcp`."""

    def __init__(self, client: McpClient, recorder: Recorder, door: str = MCP) -> None:
        self.client = client
        self.recorder = recorder
        self.door = door

    @classmethod
    def stdio(cls, command: Sequence[str], recorder: Recorder, place: Place, writes: str) -> McpSession:
        from stormbuffer.client.mcp import McpClient

        return cls(McpClient(command, view="project", writes=writes, cwd=place.cwd, env=place.env), recorder)

    @classmethod
    def remote(cls, url: str, token: str, recorder: Recorder) -> McpSession:
        from .remote import RemoteMcpClient

        return cls(RemoteMcpClient(url, token, SERVE_TIMEOUT_S), recorder, MCP_HTTP)

    def close(self) -> None:
        self.client.close()

    def call(self, tool: str, arguments: dict[str, Any]) -> Call:
        from mcp_types import TextContent

        result = self.client.call_tool(tool, arguments)
        problems = []
        text = result.content[0].text if result.content and isinstance(result.content[0], TextContent) else ""
        structured = result.structured_content
        if len(result.content) != 1 or not isinstance(result.content[0], TextContent):
            problems.append("the tool result does not hold exactly one text content item")
        if not isinstance(structured, dict):
            problems.append("the tool result has no structuredContent object")
        elif text != json.dumps(structured, sort_keys=True, separators=(",", ":"), ensure_ascii=False):
            problems.append("content[0].text is not the compact JSON of structuredContent")
        elif result.is_error is not (structured.get("ok") is not True):
            problems.append(f"isError={result.is_error} does not match ok={structured.get('ok')}")
        envelope = structured if isinstance(structured, dict) else None
        return self.recorder.add(Call(self.door, OPERATION_OF.get(tool, tool), arguments, text, envelope, problems))


class HttpDoor:
    """`POST <url>/v1/invoke/<operation>` of one running server, with the credential of the user whose
    environment is `env` (default: this process's)."""

    def __init__(self, url: str, recorder: Recorder, env: Mapping[str, str] | None = None) -> None:
        from stormbuffer.client.http import HttpClient

        self.url = url
        self.recorder = recorder
        self.client = HttpClient(url, env=env)

    def close(self) -> None:
        self.client.close()

    def call(self, operation: str, request: Any = None, *, raw: bytes | None = None) -> Call:
        from stormbuffer.adapters.http.invoke import STATUS

        data = raw if raw is not None else json.dumps(request, ensure_ascii=False).encode("utf-8")
        done = self.client.exchange(operation, data)
        problems = []
        if done.content_type != "application/json":
            problems.append(f"Content-Type is {done.content_type!r}")
        try:
            envelope = done.envelope()
        except ValueError:
            envelope = None
            problems.append("the body is not one JSON object")
        if envelope is not None:
            error = envelope.get("error")
            code = error.get("code") if envelope.get("ok") is False and isinstance(error, dict) else None
            wanted = 200 if envelope.get("ok") is True else STATUS.get(str(code), 500)
            if done.status != wanted:
                problems.append(f"status {done.status} for {code or 'ok'}, expected {wanted}")
        text = done.content.decode("utf-8", errors="replace")
        return self.recorder.add(Call(HTTP, operation, request if raw is None else raw, text, envelope, problems))

    def refusal(self, headers: dict[str, str], data: bytes | None = None) -> tuple[int, Any]:
        """The status and JSON body answering a search with `headers` (and `data` as its body), not
        recorded: a refusal is not an envelope."""
        done = self.client.exchange("search", data or b'{"version":1,"query":"release"}', headers)
        try:
            return done.status, json.loads(done.content)
        except ValueError:
            return done.status, None


class Served:
    """`<command> --project serve --port <free port>` in a place, once it accepts connections."""

    def __init__(self, command: Sequence[str], place: Place) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [*command, "--project", "serve", "--port", str(port)], cwd=place.cwd, env=place.env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        status = self.process.poll()
        self.close()
        if status is not None:
            raise RuntimeError(f"the server exited with status {status} before accepting connections")
        raise RuntimeError(f"the server did not accept connections within {SERVE_TIMEOUT_S:.0f} s")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=SERVE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
