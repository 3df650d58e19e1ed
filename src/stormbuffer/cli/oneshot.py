"""One `sbuf invoke` call, without the command-line framework: the work behind `sbuf invoke <operation>`.

`sbuf [--global|--project|--local] invoke <operation>` reaches `run_invoke` straight from the console
entry point, so a per-prompt call does not import click; any other form goes through click, whose
`invoke` command calls the same function.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.stores import PlatformDirs, View

if TYPE_CHECKING:
    from ..protocol.session import Session

VALIDATE_ENV = "STORMBUFFER_VALIDATE_OUTPUT"
RETRIEVAL_OPERATIONS = ("search", "context")
VIEW_FLAGS = {"-g": View.GLOBAL, "--global": View.GLOBAL, "--project": View.PROJECT, "--local": View.LOCAL}


def direct_invocation(args: list[str]) -> tuple[View, str] | None:
    """(view, operation) when `args` is exactly `[view flag] invoke <operation>`; None otherwise."""
    if len(args) == 2 and args[0] == "invoke" and not args[1].startswith("-"):
        return View.GLOBAL, args[1]
    if len(args) == 3 and args[0] in VIEW_FLAGS and args[1] == "invoke" and not args[2].startswith("-"):
        return VIEW_FLAGS[args[0]], args[2]
    return None


def run_invoke(operation: str, view: View, env: Mapping[str, str]) -> int:
    """Read one request from stdin, write one envelope line to stdout; the exit status (0 iff `ok`).

    For search and context the model starts opening on a background thread at once, while the
    request is read and checked and the modules it needs are imported; the process does not exit
    before that thread is done.
    """
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    from ..core.stores import resolve_store
    from ..protocol.session import OneShotEmbedder, Session

    try:
        dirs = PlatformDirs.from_environ(env)
        selected = resolve_store(view, Path.cwd(), dirs)
    except Exception:  # no home directory, no working directory: nothing to tell but the fixed message
        return _answer(operation, None, env)
    embedder = OneShotEmbedder(selected.cache_dir)
    if operation in RETRIEVAL_OPERATIONS:
        embedder.prefetch()
    try:
        return _answer(operation, Session(view, selected, dirs, embedder), env)
    finally:
        embedder.settle()


def _answer(operation: str, session: Session | None, env: Mapping[str, str]) -> int:
    """The envelope for the request on stdin (an internal error without a store), and its exit status."""
    from ..protocol.invoke import MAX_INPUT_BYTES, encode, failure, invoke_line

    if session is None:
        _emit(encode(failure(operation, "internal_error", "could not resolve the selected store")))
        return 1
    try:
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    except (OSError, ValueError, AttributeError):  # unreadable, closed or missing stdin
        _emit(encode(failure(operation, "invalid_request", "could not read the JSON request")))
        return 1
    answer = invoke_line(operation, data, session, validate=env.get(VALIDATE_ENV) == "1")
    _emit(answer.line)
    for problem in answer.problems:  # only when asked to validate, as the test suite does
        sys.stderr.write(f"schema: {problem}\n")
    return 0 if answer.ok else 1


def _emit(line: str) -> None:
    """One UTF-8 line, whatever the locale says about stdout's encoding."""
    sys.stdout.buffer.write(line.encode("utf-8") + b"\n")
    sys.stdout.flush()
