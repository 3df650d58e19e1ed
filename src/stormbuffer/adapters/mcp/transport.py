"""The MCP transport: newline-delimited JSON-RPC over a pair of byte streams, one answer per request.

`answering_streams` turns any byte streams (this process's stdin and stdout, or a socket) into the
message streams the SDK's server runs on, and owns three guarantees the SDK's own stdio reader
does not give:

- One message is bounded (`MAX_MESSAGE_BYTES`). A longer line is skipped as it arrives, never held
  whole, and answered with an `Invalid Request` error when its id can be read from its start.
- A line that is not a valid message is answered, not dropped: `Parse error` for text that is not
  JSON, nests arrays and objects deeper than `jsontext.MAX_DEPTH`, or holds an unpaired surrogate
  escape (`"\\ud800"`, which is not Unicode text), `Invalid
  Request` for JSON that is not a JSON-RPC message. The error carries the request's id whenever it
  can be read, else `null`, as JSON-RPC asks. Invalid notifications get no answer.
- The end of input waits until each request the host sent was answered or cancelled by the host
  (the SDK's dispatcher would otherwise cancel requests still being handled).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, BinaryIO

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)

from stormbuffer.protocol.jsontext import TOO_DEEP, TooDeep, loads

MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # the protocol's own requests stay under 256 KiB
READ_BYTES = 65536
HEAD_BYTES = 4096  # what is kept of an oversized message, to read its id from
TOO_LARGE = f"Invalid Request: a message may hold at most {MAX_MESSAGE_BYTES} bytes"
NOT_JSON = "Parse error: the message is not valid JSON"
NESTED = f"Parse error: the message's {TOO_DEEP}"
SURROGATE = "Parse error: the message holds an unpaired UTF-16 surrogate escape, which is not Unicode text"
NOT_JSONRPC = "Invalid Request: the message is not a valid JSON-RPC 2.0 message"
UNSENDABLE = "Internal error: the answer could not be encoded"

# The id member of an object, found before any nested object or array opens (where it always is in
# practice); strings are matched whole, so a string value that reads `"id":` is never mistaken for it.
_STRING = r'"(?:[^"\\]|\\.)*"'
_ID_MEMBER = re.compile(rf'\s*\{{(?:[^{{}}\[\]"]|{_STRING})*?"id"\s*:\s*(-?\d+|{_STRING})', re.DOTALL)


class Outstanding:
    """The ids of host requests that have neither been answered nor cancelled."""

    def __init__(self) -> None:
        self._ids: set[RequestId] = set()
        self._changed = anyio.Event()

    def inbound(self, item: SessionMessage) -> None:
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


@dataclass(frozen=True)
class Oversized:
    """A line longer than the bound: only its first `HEAD_BYTES` were kept."""

    head: bytes


async def lines(stream: ByteReceiveStream, limit: int = MAX_MESSAGE_BYTES) -> AsyncIterator[bytes | Oversized]:
    """The non-empty lines of `stream`, each at most `limit` bytes; longer ones arrive as `Oversized`."""
    line = bytearray()
    head: bytes | None = None  # set while skipping the rest of an oversized line
    while True:
        try:
            chunk = await stream.receive(READ_BYTES)
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            break
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start : len(chunk) if end < 0 else end]
            if head is None and len(line) + len(piece) > limit:
                head = bytes(line[:HEAD_BYTES] + piece[:HEAD_BYTES])[:HEAD_BYTES]
                line = bytearray()  # a new buffer: the memory of the old one goes back at once
            elif head is None:
                line += piece
            if end < 0:
                break
            if head is not None:
                yield Oversized(head)
            elif line.strip():
                yield bytes(line)
            line, head, start = bytearray(), None, end + 1
    if head is not None:
        yield Oversized(head)
    elif line.strip():
        yield bytes(line)


def decode(line: bytes | Oversized) -> SessionMessage | JSONRPCError | None:
    """The message a line holds, else the error that answers it (None: an invalid notification)."""
    if isinstance(line, Oversized):
        return _error(_id_in_text(line.head), INVALID_REQUEST, TOO_LARGE)
    text = line.decode("utf-8", errors="replace")
    try:
        value = loads(text)
    except TooDeep:
        return _error(_id_in_text(text), PARSE_ERROR, NESTED)
    except ValueError:
        return _error(_id_in_text(text), PARSE_ERROR, NOT_JSON)
    request_id = _id_in_value(value)
    if not _is_unicode(value):
        return _error(request_id, PARSE_ERROR, SURROGATE)
    try:
        message: JSONRPCMessage = jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError:
        if isinstance(value, dict) and request_id is None and ("method" in value or "result" in value):
            return None  # a notification or a response: nothing may answer it
        return _error(request_id, INVALID_REQUEST, NOT_JSONRPC)
    return SessionMessage(message)


def encode(item: SessionMessage) -> bytes:
    """One outgoing message as a line; an answer that cannot be encoded becomes an internal error."""
    message = item.message
    try:
        return (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")
    except ValueError:
        request_id = message.id if isinstance(message, JSONRPCResponse | JSONRPCError) else None
        fallback = _error(request_id, INTERNAL_ERROR, UNSENDABLE)
        return (fallback.model_dump_json(by_alias=True) + "\n").encode("utf-8")


def _error(request_id: RequestId | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def _is_unicode(value: Any) -> bool:
    """Whether every string in `value` is Unicode text (no unpaired surrogate)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _id_in_value(value: Any) -> RequestId | None:
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str) or not _is_unicode(request_id):
        return None
    return request_id


def _id_in_text(text: str | bytes) -> RequestId | None:
    """The id near the start of a message that could not be parsed (only its first `HEAD_BYTES` are read)."""
    if isinstance(text, bytes):
        text = text[:HEAD_BYTES].decode("utf-8", errors="replace")
    found = _ID_MEMBER.match(text[:HEAD_BYTES])
    if found is None:
        return None
    try:
        return _id_in_value({"id": loads(found.group(1))})
    except ValueError:
        return None


@asynccontextmanager
async def answering_streams(
    receive: ByteReceiveStream, send: ByteSendStream, limit: int = MAX_MESSAGE_BYTES
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The read and write streams for `Server.run`, over newline-delimited JSON-RPC on `receive`/`send`."""
    outstanding = Outstanding()
    inbound_send, inbound_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    outbound_send, outbound_receive = anyio.create_memory_object_stream[SessionMessage](0)
    answers = outbound_send.clone()  # the transport's own answers share the one writer

    async def relay_in() -> None:
        async with inbound_send, answers:
            try:
                async for line in lines(receive, limit):
                    item = decode(line)
                    if isinstance(item, SessionMessage):
                        outstanding.inbound(item)
                        await inbound_send.send(item)
                    elif item is not None:
                        await answers.send(SessionMessage(item))
            except anyio.BrokenResourceError:  # the server stopped reading
                return
            await outstanding.wait_settled()

    async def relay_out() -> None:
        async with outbound_receive:
            async for item in outbound_receive:
                await send.send(encode(item))
                outstanding.outbound(item)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(relay_in)
        tasks.start_soon(relay_out)
        try:
            yield inbound_receive, outbound_send
        finally:
            await outbound_send.aclose()


class _Receive(ByteReceiveStream):
    """Reads with `read(max_bytes)` (a file descriptor's or a buffered file's) in a worker thread; a
    cancelled read is abandoned, not awaited."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read

    async def receive(self, max_bytes: int = READ_BYTES) -> bytes:
        data = await anyio.to_thread.run_sync(self._read, max_bytes, abandon_on_cancel=True)
        if not data:
            raise anyio.EndOfStream
        return data

    async def aclose(self) -> None:
        return None


class _Send(ByteSendStream):
    """Writes whole messages to a binary file in a worker thread."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    async def send(self, item: bytes) -> None:
        await anyio.to_thread.run_sync(self._write, item)

    def _write(self, item: bytes) -> None:
        self._file.write(item)
        self._file.flush()

    async def aclose(self) -> None:
        return None


@contextmanager
def _claimed_stdio() -> Iterator[tuple[int, int]]:
    """Private duplicates of stdin and stdout for the protocol, with fd 0 on the null device and fd 1
    on stderr meanwhile, so that nothing else reads requests or writes stray text into the stream."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    try:
        yield wire_in, wire_out
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_out)  # wire_in stays open: an abandoned read may still be blocked on it


@asynccontextmanager
async def answering_files(
    reader: io.BufferedIOBase, writer: BinaryIO
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """`answering_streams` over two binary files, a connection's reader and writer (the daemon's)."""
    async with answering_streams(_Receive(reader.read1), _Send(writer)) as streams:
        yield streams


@asynccontextmanager
async def answering_stdio() -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """`answering_streams` over this process's stdin and stdout."""
    with _claimed_stdio() as (wire_in, wire_out):
        writer = os.fdopen(wire_out, "wb", closefd=False)
        async with answering_streams(_Receive(functools.partial(os.read, wire_in)), _Send(writer)) as streams:
            yield streams
