"""`sbuf invoke <operation>`: one version-1 JSON request on stdin, one envelope line on stdout.

It never prompts, never writes to stderr and exits 0 exactly when the envelope says `ok`.
"""

from __future__ import annotations

import logging
import sys
import warnings

import click

from .context import current
from .main import command

VALIDATE_ENV = "STORMBUFFER_VALIDATE_OUTPUT"


@command(
    "invoke",
    help="Invoke a versioned, noninteractive JSON operation.\n\nOPERATION is one of search, context, get, remember, "
    "update, propose, supersede or archive. The request is one JSON object on stdin; the answer is one JSON "
    "envelope line on stdout.",
)
@click.argument("operation", metavar="OPERATION")
def invoke(operation: str) -> None:
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    from ..core.stores import resolve_store
    from ..protocol.invoke import MAX_INPUT_BYTES, encode, failure, invoke_line
    from ..protocol.session import OneShotEmbedder, Session

    cli = current()
    cli.machine_mode = True
    try:
        dirs = cli.dirs()
        selected = resolve_store(cli.view, cli.cwd, dirs)
    except Exception:  # no home directory, no working directory: nothing to tell but the fixed message
        _emit(encode(failure(operation, "internal_error", "could not resolve the selected store")))
        sys.exit(1)
    try:
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    except (OSError, ValueError, AttributeError):  # unreadable, closed or missing stdin
        _emit(encode(failure(operation, "invalid_request", "could not read the JSON request")))
        sys.exit(1)
    session = Session(cli.view, selected, dirs, OneShotEmbedder(selected.cache_dir))
    answer = invoke_line(operation, data, session, validate=cli.env.get(VALIDATE_ENV) == "1")
    _emit(answer.line)
    for problem in answer.problems:  # only when asked to validate, as the test suite does
        sys.stderr.write(f"schema: {problem}\n")
    sys.exit(0 if answer.ok else 1)


def _emit(line: str) -> None:
    """One UTF-8 line, whatever the locale says about stdout's encoding."""
    sys.stdout.buffer.write(line.encode("utf-8") + b"\n")
    sys.stdout.flush()
