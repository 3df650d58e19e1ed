"""`sbuf invoke <operation>`: one version-1 JSON request on stdin, one envelope line on stdout.

It never prompts, never writes to stderr and exits 0 exactly when the envelope says `ok`. The work
is `oneshot.run_invoke`, which the console entry point also calls directly for the plain forms.
"""

from __future__ import annotations

import sys

import click

from ..core.locks import LOCK_WAIT_ENV
from .context import current
from .main import command
from .oneshot import run_invoke


@command(
    "invoke",
    help="Invoke a versioned, noninteractive JSON operation.\n\nOPERATION is one of search, context, get, remember, "
    "update, propose, supersede or archive. The request is one JSON object on stdin; the answer is one JSON "
    "envelope line on stdout.",
)
@click.argument("operation", metavar="OPERATION")
def invoke(operation: str) -> None:
    cli = current()
    cli.machine_mode = True
    env = dict(cli.env) if cli.lock_wait is None else {**cli.env, LOCK_WAIT_ENV: str(cli.lock_wait)}
    sys.exit(run_invoke(operation, cli.view, env))
