"""One `sbuf invoke` call, without the command-line framework: the work behind `sbuf invoke <operation>`.

`sbuf [--global|--project|--local] invoke <operation>` reaches `run_invoke` straight from the console
entry point, so a per-prompt call does not import click; any other form goes through click, whose
`invoke` command calls the same function. A running daemon of this install answers the request
(the same bytes, in milliseconds); without one, this process answers it and then starts a daemon
for the next call. This module imports little, so that a search can start opening the model in a
child process before the rest of the work is imported.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..embedding.forked import ForkedEmbedder
    from ..index.sync import Embedder
    from ..protocol.session import Session

VALIDATE_ENV = "STORMBUFFER_VALIDATE_OUTPUT"
RETRIEVAL_OPERATIONS = ("search", "context")
VIEW_FLAGS = {"-g": "global", "--global": "global", "--project": "project", "--local": "local"}

Opened = tuple["Embedder | None", "str | None"]  # the embedder, or None and the semantic fallback reason


def direct_invocation(args: list[str]) -> tuple[str, str] | None:
    """(view, operation) when `args` is exactly `[view flag] invoke <operation>`; None otherwise."""
    if len(args) == 2 and args[0] == "invoke" and not args[1].startswith("-"):
        return "global", args[1]
    if len(args) == 3 and args[0] in VIEW_FLAGS and args[1] == "invoke" and not args[2].startswith("-"):
        return VIEW_FLAGS[args[0]], args[2]
    return None


class OneShotEmbedder:
    """The embedder of a one-shot process: the already acquired model, opened on first use or
    ahead of it in a child process (`prefetch`).

    It never acquires or builds a model (that is `sbuf init`'s job), so a process without a model
    answers lexically with the reason (`model_unavailable`, or `embedder_initialization_failed` for
    a damaged cache) instead of spending seconds on a build.
    """

    def __init__(self, opener: Callable[[], Opened]) -> None:
        self._opener = opener
        self._opened: Opened | None = None
        self._child: ForkedEmbedder | None = None

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> OneShotEmbedder:
        """The model in the cache the environment names."""

        def opener() -> Opened:
            from ..core.dirs import PlatformDirs
            from ..embedding import open_embedder

            return open_embedder(PlatformDirs.from_environ(env).shared_cache)

        return cls(opener)

    def prefetch(self) -> None:
        """Start opening the model in a child process on Linux (call it before the process starts a
        thread; elsewhere the model opens on first use). NumPy is imported first: both processes need it."""
        from ..embedding.forked import ForkedEmbedder, can_fork

        if self._child is None and self._opened is None and can_fork():
            import numpy  # noqa: F401

            try:
                self._child = ForkedEmbedder.start(self._opener)
            except OSError:  # no process or pipe to spare: the model opens here when needed
                self._child = None

    def get(self) -> Opened:
        if self._opened is None and self._child is not None:
            self._opened = self._child.opened()
        if self._opened is None:  # not prefetched, or the child ended unexpectedly: open here, visibly
            self._opened = self._opener()
        return self._opened

    def close(self) -> None:
        """End the child process, if any: the process must not leave it behind."""
        if self._child is not None:
            self._child.close()


def run_invoke(operation: str, view: str, env: Mapping[str, str]) -> int:
    """Read one request from stdin, write one envelope line to stdout; the exit status (0 iff `ok`).

    A running daemon answers when there is one. Otherwise, for search and context the model starts
    opening in a child process at once, while the request is read and checked, the modules it
    needs are imported and the records synced; the child ends with this call. After a successful
    search or context, a daemon starts for the next call.
    """
    from ..daemon import relay

    data = _read_request()
    if data is not None:
        try:
            line, ok, problems = relay.invoke(operation, view, data, env)
        except relay.Unreachable:
            pass
        else:
            return _print_answer(line, ok, problems)
    embedder = OneShotEmbedder.from_environ(env)
    if operation in RETRIEVAL_OPERATIONS:
        embedder.prefetch()
    try:
        status = _answer(operation, view, env, embedder, data)
    finally:
        embedder.close()
    if status == 0 and operation in RETRIEVAL_OPERATIONS:  # a per-prompt caller: the next call is warm
        relay.start(env)
    return status


def _read_request() -> bytes | None:
    """Stdin up to one byte past the input bound; None when it cannot be read."""
    from ..protocol.limits import MAX_INPUT_BYTES

    try:
        return sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    except (OSError, ValueError, AttributeError):  # unreadable, closed or missing stdin
        return None


def _answer(operation: str, view: str, env: Mapping[str, str], embedder: OneShotEmbedder, data: bytes | None) -> int:
    """Answer the request read from stdin (None: it could not be read); the exit status."""
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    from ..protocol.invoke import encode, failure, invoke_line

    session = _session(view, env, embedder)
    if session is None:
        _emit(encode(failure(operation, "internal_error", "could not resolve the selected store")))
        return 1
    if data is None:
        _emit(encode(failure(operation, "invalid_request", "could not read the JSON request")))
        return 1
    answer = invoke_line(operation, data, session, validate=env.get(VALIDATE_ENV) == "1")
    return _print_answer(answer.line, answer.ok, answer.problems)


def _print_answer(line: str, ok: bool, problems: list[str]) -> int:
    _emit(line)
    for problem in problems:  # only when asked to validate, as the test suite does
        sys.stderr.write(f"schema: {problem}\n")
    return 0 if ok else 1


def _session(view: str, env: Mapping[str, str], embedder: OneShotEmbedder) -> Session | None:
    """The caller's session; None without a home directory or working directory."""
    from pathlib import Path

    from ..core.locks import lock_wait_from
    from ..core.stores import PlatformDirs, View, resolve_store
    from ..protocol.session import Session

    try:
        selected_view = View(view)
        dirs = PlatformDirs.from_environ(env)
        selected = resolve_store(selected_view, Path.cwd(), dirs)
    except Exception:  # nothing to tell but the fixed message
        return None
    return Session(selected_view, selected, dirs, embedder, lock_wait=lock_wait_from(env))


def _emit(line: str) -> None:
    """One UTF-8 line, whatever the locale says about stdout's encoding."""
    sys.stdout.buffer.write(line.encode("utf-8") + b"\n")
    sys.stdout.flush()
