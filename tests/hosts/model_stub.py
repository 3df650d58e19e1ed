"""A loopback stub of a model provider's streamed API, for driving real host CLIs in tests.

`api="responses"` (the default) is the OpenAI Responses API, which Codex (`wire_api =
"responses"`) and Pi (a custom provider with `"api": "openai-responses"`) speak: the stub answers
`POST <base_url>/responses`. `api="anthropic"` is the Anthropic Messages API that Claude Code
speaks (`ANTHROPIC_BASE_URL`): `POST <base_url>/v1/messages`, streamed or not. `api="gemini"` is
the Gemini API that Gemini CLI speaks (`GOOGLE_GEMINI_BASE_URL`): `POST <base_url>/v1beta/models/
<model>:streamGenerateContent` (server-sent events) or `:generateContent`. The stub answers
each model request with one scripted turn, in order, and records every request:

    with ModelStub([Reply.call("memory_remember", {...}), Reply.text("done")]) as stub:
        run_host(base_url=stub.base_url)
    stub.requests[0].text  # everything the host sent, as one string

A turn is either a final assistant message (`Reply.text_reply`) or one function call
(`Reply.call`); when the script runs out, every further request gets `Reply.text_reply("Done.")`.
Instead of a list, the script may be a function from the `Request` to its `Reply` (to answer
what the host actually sent). Other paths answer 404 (and are recorded too).

`codex_config(base_url)` is a `$CODEX_HOME/config.toml` selecting the stub (the key is read from
`$STUB_API_KEY`, any value), `pi_models(base_url)` a Pi `models.json` (`--provider stub --model
stub-model`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Iterator
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


def codex_config(base_url: str) -> str:
    """Codex settings: the stub as the model provider, no approvals."""
    return f"""model = "stub-model"
model_provider = "stub"
approval_policy = "never"

[model_providers.stub]
name = "Loopback stub"
base_url = "{base_url}"
wire_api = "responses"
env_key = "STUB_API_KEY"
"""


def pi_models(base_url: str) -> str:
    """Pi's custom models: provider `stub` with model `stub-model`."""
    provider = {"baseUrl": base_url, "api": "openai-responses", "apiKey": "stub", "models": [{"id": "stub-model"}]}
    return json.dumps({"providers": {"stub": provider}})


def _anthropic_message(reply: Reply, number: int) -> dict[str, Any]:
    """The Messages API answer of one reply."""
    if reply.kind == "call":
        block: dict[str, Any] = {"type": "tool_use", "id": f"toolu_{number}", "name": reply.name,
                                 "input": reply.arguments}  # fmt: skip
    else:
        block = {"type": "text", "text": reply.text}
    return {"id": f"msg_{number}", "type": "message", "role": "assistant", "model": "stub-model",
            "content": [block], "stop_reason": "tool_use" if reply.kind == "call" else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}  # fmt: skip


def _anthropic_events(reply: Reply, number: int) -> Iterator[dict[str, Any]]:
    """The Messages API stream events of one reply."""
    message = _anthropic_message(reply, number)
    (block,) = message["content"]
    yield {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
    if block["type"] == "tool_use":
        yield {"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    else:
        yield {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        delta = {"type": "text_delta", "text": block["text"]}
    yield {"type": "content_block_delta", "index": 0, "delta": delta}
    yield {"type": "content_block_stop", "index": 0}
    yield {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
           "usage": {"output_tokens": 5}}  # fmt: skip
    yield {"type": "message_stop"}


def _gemini_response(reply: Reply) -> dict[str, Any]:
    """The Gemini API answer of one reply."""
    call = {"functionCall": {"name": reply.name, "args": reply.arguments}}
    part = call if reply.kind == "call" else {"text": reply.text}
    candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "stub-model"}


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

    def __init__(self, turns: Iterable[Reply] | Callable[[Request], Reply], api: str = "responses") -> None:
        self.api = api
        self._script = turns if callable(turns) else None
        self._turns = iter(()) if callable(turns) else iter(turns)
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
                request = stub._record(self, body)
                if not stub._is_model(request):
                    self._not_found()
                    return
                reply, number = stub._next(request)
                streamed = stub.api == "responses" or (isinstance(body, dict) and body.get("stream") is True)
                if stub.api == "gemini":
                    streamed = ":streamGenerateContent" in self.path
                    answer = json.dumps(_gemini_response(reply))
                    payload = (f"data: {answer}\r\n\r\n" if streamed else answer).encode()
                elif not streamed:
                    payload = json.dumps(_anthropic_message(reply, number)).encode()
                else:
                    events = (_events if stub.api == "responses" else _anthropic_events)(reply, number)
                    payload = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream" if streamed else "application/json")
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
        root = f"http://127.0.0.1:{self._server.server_address[1]}"
        return f"{root}/v1" if self.api == "responses" else root

    def _is_model(self, request: Request) -> bool:
        path = request.path.split("?")[0].rstrip("/")
        if self.api == "gemini":
            return path.endswith((":streamGenerateContent", ":generateContent"))
        return path.endswith("/responses") if self.api == "responses" else path.endswith("/v1/messages")

    def responses(self) -> list[Request]:
        """The model requests, in order."""
        return [request for request in self.requests if self._is_model(request)]

    def _record(self, handler: BaseHTTPRequestHandler, body: Any) -> Request:
        request = Request(handler.path, dict(handler.headers.items()), body)
        with self._lock:
            self.requests.append(request)
        return request

    def _next(self, request: Request) -> tuple[Reply, int]:
        with self._lock:
            reply = self._script(request) if self._script else next(self._turns, Reply.text_reply("Done."))
            return reply, next(self._numbers)

    def __enter__(self) -> ModelStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
