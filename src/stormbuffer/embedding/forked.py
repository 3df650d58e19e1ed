"""An embedder opened and run in a forked child process.

A one-shot `sbuf invoke` opens the model while it reads, checks and syncs. Importing onnxruntime and
creating its session hold the interpreter lock for most of their time, so on a thread they would
hold up the main thread by as much; a child process opens the model on another core instead. The
child answers `embed`, `embed_spans` and `token_count` over two pipes until the parent closes them. It only reads
the model cache, so the parent may kill it at any moment.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from .errors import EmbeddingFailed

if TYPE_CHECKING:
    import numpy as np

Opener = Callable[[], tuple[Any, "str | None"]]  # an embedder, or None and the semantic fallback reason
IDENTITY = ("model_id", "model_version", "model_checksum", "dimension", "max_tokens")
CALLS = frozenset({"embed", "embed_spans", "token_count"})


def can_fork() -> bool:
    """Linux only: elsewhere system libraries that NumPy may already have loaded (Accelerate on
    macOS) do not support running on in a forked child."""
    return sys.platform.startswith("linux")


class ForkedEmbedder:
    """The parent's side: the opened model's identity, and its calls sent to the child.

    `start` forks at once (call it before the process starts any thread); `opened` waits for the
    child to open the model; `close` ends the child. Each call is a pickled (name, arguments) pair
    answered by a pickled (ok, value) pair; a failed call raises the child's ValueError or
    EmbeddingFailed, and a child that is gone raises EmbeddingFailed.
    """

    model_id: str
    model_version: str
    model_checksum: str
    dimension: int
    max_tokens: int

    def __init__(self, pid: int, requests: IO[bytes], replies: IO[bytes]) -> None:
        self._pid: int | None = pid
        self._requests = requests
        self._replies = replies
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The child's process id; None once it was ended."""
        return self._pid

    @classmethod
    def start(cls, opener: Opener) -> ForkedEmbedder:
        """Fork a child that runs `opener` and then serves the embedder it returns; OSError when the
        system has no process or pipe to spare."""
        opened: list[int] = []
        try:
            request_read, request_write = os.pipe()
            opened += (request_read, request_write)
            reply_read, reply_write = os.pipe()
            opened += (reply_read, reply_write)
            pid = os.fork()
        except OSError:
            for descriptor in opened:
                os.close(descriptor)
            raise
        if pid == 0:  # the child never returns into the caller's code
            try:
                os.close(request_write)
                os.close(reply_read)
                _serve(opener, request_read, reply_write)
            finally:
                os._exit(0)
        os.close(request_read)
        os.close(reply_write)
        return cls(pid, os.fdopen(request_write, "wb"), os.fdopen(reply_read, "rb"))

    def opened(self) -> tuple[ForkedEmbedder | None, str | None] | None:
        """(self, None) once the child opened the model, (None, reason) when it could not; None when
        the child ended without saying (the caller opens the model itself to see why)."""
        try:
            reason, identity = pickle.load(self._replies)
        except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError):
            self.close()
            return None
        if identity is None:
            self.close()
            return None, reason
        for name in IDENTITY:
            setattr(self, name, identity[name])
        return self, None

    def token_count(self, text: str) -> int:
        return int(self._call("token_count", text))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._call("embed", texts)

    def embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
                    ) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
        return self._call("embed_spans", texts, spans)

    def close(self) -> None:
        """End the child (it holds nothing that could be left half done) and reap it."""
        pid, self._pid = self._pid, None
        if pid is None:
            return
        for stream in (self._requests, self._replies):
            try:
                stream.close()
            except OSError:
                pass
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)

    def _call(self, name: str, *arguments: Any) -> Any:
        with self._lock:
            if self._pid is None:
                raise EmbeddingFailed("the embedding model is closed")
            try:
                pickle.dump((name, arguments), self._requests)
                self._requests.flush()
                ok, value = pickle.load(self._replies)
            except (EOFError, OSError, pickle.PickleError, ValueError, TypeError):
                raise EmbeddingFailed("the embedding model's process ended") from None
        if not ok:
            raise value
        return value


def _serve(opener: Opener, request_fd: int, reply_fd: int) -> None:
    """The child: detach from the terminal's streams, open the model, answer calls until end of input."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    quiet = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(quiet, stream)
    with os.fdopen(request_fd, "rb") as requests, os.fdopen(reply_fd, "wb") as replies:
        embedder, reason = opener()
        identity = None if embedder is None else {name: getattr(embedder, name) for name in IDENTITY}
        _reply(replies, (reason, identity))
        while embedder is not None:
            try:
                name, arguments = pickle.load(requests)
            except EOFError:
                return
            try:
                if name not in CALLS:
                    raise ValueError("unknown call")
                answer: tuple[bool, Any] = (True, getattr(embedder, name)(*arguments))
            except (ValueError, EmbeddingFailed) as exc:
                answer = (False, exc)
            except Exception as exc:
                answer = (False, EmbeddingFailed(f"the embedding model failed ({type(exc).__name__})"))
            _reply(replies, answer)


def _reply(replies: IO[bytes], answer: tuple[Any, Any]) -> None:
    pickle.dump(answer, replies, protocol=pickle.HIGHEST_PROTOCOL)
    replies.flush()
