"""Getting ready for the first tool call while the host is quiet.

Hosts start the adapter when a session begins and call a tool much later. Once the host has
initialized the session and sent no request for `QUIET_S` seconds, the adapter imports what the
first recall needs (the retrieval layer, NumPy, the ONNX runtime and the tokenizer
library) and starts watching the records of the stores a read composes. It never opens the model:
the first `memory_recall` does. Each step runs in the tool worker like a call, so a call arriving
meanwhile waits for at most the step in progress, and does not repeat what was done.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio

from stormbuffer.core.stores import retrieval_stores
from stormbuffer.protocol.session import Session

QUIET_S = 0.1
READ_MODULES = ("stormbuffer.retrieval",)  # every read
MODEL_MODULES = ("stormbuffer.embedding.embedder", "tokenizers")  # opening the model (NumPy too), and onnxruntime
INITIALIZED = "notifications/initialized"

logger = logging.getLogger(__name__)


class Activity:
    """What the host has sent so far: whether it initialized the session, and requests in flight."""

    def __init__(self) -> None:
        self.opened = False  # the host sent at least one request
        self._initialized = anyio.Event()
        self._started = 0
        self._quiet_after: int | None = None  # requests started when the host was last found quiet
        self._in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()

    def notified(self, method: str) -> None:
        if method == INITIALIZED:
            self._initialized.set()

    def request_started(self) -> None:
        self.opened = True
        self._started += 1
        self._in_flight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

    def request_ended(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self._idle.set()

    async def quiet(self) -> None:
        """Return once the session is initialized and no request started for `QUIET_S` seconds; at
        once when none started since the host was last found quiet."""
        await self._initialized.wait()
        while self._quiet_after != self._started:
            await self._idle.wait()
            started = self._started
            await anyio.sleep(QUIET_S)
            if self._started == started:
                self._quiet_after = started


def steps(session: Session) -> list[Callable[[], Any]]:
    """The warm-up steps: what every read needs first, then what opening the model needs."""
    return [
        *(partial(importlib.import_module, name) for name in READ_MODULES),
        partial(watch, session),
        *(partial(importlib.import_module, name) for name in MODEL_MODULES),
        import_runtime,
    ]


def import_runtime() -> None:
    """Import onnxruntime the way opening the model does (with its telemetry off)."""
    from stormbuffer.embedding.sessions import runtime

    runtime()


def watch(session: Session) -> None:
    """Start watching the records of every store a read composes (nothing for an uninitialized one)."""
    if session.freshness is not None:
        for paths in retrieval_stores(session.view, session.selected, session.dirs):
            session.freshness.store(paths)


def run_step(step: Callable[[], Any]) -> None:
    """Run one step; a failure only loses the head start (the call that needs the work reports it)."""
    try:
        step()
    except Exception as exc:
        logger.debug("warm-up step failed: %s", type(exc).__name__)
