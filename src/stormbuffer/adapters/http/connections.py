"""Connections a slow or silent client cannot hoard: a time limit on request headers and a cap.

uvicorn's h11 protocol, with two additions:

- **Header timeout.** A connection has `HEADER_TIMEOUT_S` from its opening (or from the end of its
  previous answer) to send a request's complete headers, else it is closed. The time a body may
  take is bounded where bodies are read (`bodies.read`).
- **Connection cap.** At most `connection_cap()` connections are open at once, well below the
  process's file descriptor limit, and at most `accept_batch()` are taken from the listen queue at
  a time (each holds a descriptor before the cap sees it). A new connection over the cap closes
  the oldest one still waiting for its headers (a half-sent request cannot starve a real one), or,
  when every connection is serving a request, is itself closed.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256


def _descriptors() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def connection_cap() -> int:
    """`MAX_CONNECTIONS`, or three eighths of the soft descriptor limit when that is lower: the
    store's files, the watcher and the model need some of the rest, and so do connections accepted
    or closed but not yet handed back (a closed socket's descriptor is freed one loop turn later,
    while a few accept batches may be in flight)."""
    return max(8, min(MAX_CONNECTIONS, _descriptors() * 3 // 8))


def accept_batch() -> int:
    """How many connections the server accepts at once, and its listen queue: a sixteenth of the
    descriptor limit, at most `MAX_CONNECTIONS // 2`."""
    return max(4, min(MAX_CONNECTIONS // 2, _descriptors() // 16))


class BoundedH11Protocol(H11Protocol):
    """H11Protocol with the header timeout and the connection cap above."""

    cap = connection_cap()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting_since: float | None = None  # when it began waiting for headers; None while serving
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_headers()
        if len(self.connections) > self.cap:
            waiting = [other for other in self.connections if isinstance(other, BoundedH11Protocol)
                       and other.waiting_since is not None and other is not self
                       and not other.transport.is_closing()]  # fmt: skip
            victim = min(waiting, key=lambda other: other.waiting_since or 0.0) if waiting else self
            victim.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self.waiting_since is not None and self.conn.their_state is not h11.IDLE:  # headers complete
            self._stop_waiting()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._wait_for_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _wait_for_headers(self) -> None:
        self._stop_waiting()
        self.waiting_since = time.monotonic()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_too_slow)

    def _stop_waiting(self) -> None:
        self.waiting_since = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.waiting_since is not None and not self.transport.is_closing():
            self.transport.close()
