"""A loopback stub of the OpenAI Responses API (streamed), for driving real host CLIs in tests.

Codex (`wire_api = "responses"`) and Pi (a custom provider with `"api": "openai-responses"`)
both speak it. The stub answers `POST <base_url>/responses` with one scripted turn per request,
in order, and records every request:

    with ModelStub([Reply.call("memory_remember", {...}), Reply.text("done")]) as stub:
        run_host(base_url=stub.base_url)
    stub.requests[0].text  # everything the host sent, as one string

A turn is either a final assistant message (`Reply.text`) or one function call
(`Reply.call`); when the script runs out, every further request gets `Reply.text("Done.")`.
Other paths answer 404 (and are recorded too).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted model turn."""

    kind: str  # "text" or "call"
    text: str = ""
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    namespace: str | None = None

    @classmethod
    def text_reply(cls, text: str) -> Reply:
        return cls("text", text=text)

    @classmethod
    def call(cls, name: str, arguments: dict[str, Any], namespace: str | None = None) -> Reply:
        """A function call; `namespace` names a tool group (Codex lists MCP tools as `mcp__<server>`)."""
        return cls("call", name=name, arguments=arguments, namespace=namespace)


@dataclass(frozen=True)
class Request:
    """One request the host sent."""

    path: str
    headers: dict[str, str]
    body: Any

    @property
    def text(self) -> str:
        """The whole body as JSON text (for `in` checks)."""
        return json.dumps(self.body, ensure_ascii=False)


def _events(reply: Reply, number: int) -> Iterator[dict[str, Any]]:
    """The Responses API stream events of one reply."""
    response_id = f"resp_{number}"
    if reply.kind == "call":
        arguments = json.dumps(reply.arguments)
        item: dict[str, Any] = {"type": "function_call", "id": f"fc_{number}", "call_id": f"call_{number}",
                                "name": reply.name, "arguments": arguments, "status": "completed"}  # fmt: skip
        if reply.namespace is not None:
            item["namespace"] = reply.namespace
        started = {**item, "arguments": "", "status": "in_progress"}
        deltas = [{"type": "response.function_call_arguments.delta", "item_id": item["id"], "output_index": 0,
                   "delta": arguments},
                  {"type": "response.function_call_arguments.done", "item_id": item["id"], "output_index": 0,
                   "arguments": arguments}]  # fmt: skip
    else:
        part = {"type": "output_text", "text": reply.text, "annotations": []}
        item = {"type": "message", "id": f"msg_{number}", "role": "assistant", "status": "completed", "content": [part]}
        started = {**item, "content": [], "status": "in_progress"}
        where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        deltas = [{"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
                  {"type": "response.output_text.delta", **where, "delta": reply.text},
                  {"type": "response.output_text.done", **where, "text": reply.text},
                  {"type": "response.content_part.done", **where, "part": part}]  # fmt: skip
    base = {"id": response_id, "object": "response", "model": "stub", "output": []}
    yield {"type": "response.created", "response": {**base, "status": "in_progress"}}
    yield {"type": "response.output_item.added", "output_index": 0, "item": started}
    yield from deltas
    yield {"type": "response.output_item.done", "output_index": 0, "item": item}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}  # fmt: skip
    yield {"type": "response.completed", "response": {**base, "status": "completed", "output": [item], "usage": usage}}


class ModelStub:
    """The stub server on 127.0.0.1 (an ephemeral port) for the life of a `with` block."""

    def __init__(self, turns: Iterable[Reply]) -> None:
        self._turns = iter(turns)
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                stub._record(self, None)
                self._not_found()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                stub._record(self, body)
                if not self.path.rstrip("/").endswith("/responses"):
                    self._not_found()
                    return
                reply, number = stub._next()
                events = _events(reply, number)
                payload = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _not_found(self) -> None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def responses(self) -> list[Request]:
        """The model requests (to `/responses`), in order."""
        return [request for request in self.requests if request.path.rstrip("/").endswith("/responses")]

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        with self._lock:
            self.requests.append(Request(handler.path, dict(handler.headers.items()), body))

    def _next(self) -> tuple[Reply, int]:
        with self._lock:
            return next(self._turns, Reply.text_reply("Done.")), next(self._numbers)

    def __enter__(self) -> ModelStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
