"""`sbuf mcp --stdio`: start the MCP adapter for the selected view and hand it this terminal's stdio."""

from __future__ import annotations

import subprocess
import sys

import click

from .context import current, fail
from .main import command

BINARY_ENV = "STORMBUFFER_MCP_BIN"
DEFAULT_BINARY = "stormbuffer-mcp"


@command("mcp", help="Run the MCP adapter over stdio.")
@click.option("--stdio", is_flag=True, help="Serve MCP over stdin and stdout (required).")
@click.option("--allow-candidate-writes", is_flag=True, help="Allow memory_remember and memory_update (candidates).")
@click.option("--allow-writes", is_flag=True, help="Also allow memory_forget, which archives active records.")
@click.pass_context
def mcp(ctx: click.Context, stdio: bool, allow_candidate_writes: bool, allow_writes: bool) -> None:
    if allow_candidate_writes and allow_writes:
        raise click.UsageError("--allow-candidate-writes cannot be used with --allow-writes", ctx)
    if not stdio:
        fail("mcp requires --stdio")
    cli = current()
    argv = [cli.env.get(BINARY_ENV) or DEFAULT_BINARY, "--stdio"]
    if cli.view.value != "global":
        argv.append(cli.scope_flag)
    if allow_candidate_writes:
        argv.append("--allow-candidate-writes")
    if allow_writes:
        argv.append("--allow-writes")
    try:
        code = subprocess.call(argv, env=dict(cli.env))
    except OSError as exc:
        fail(f"could not start stormbuffer-mcp: {exc.strerror or type(exc).__name__}")
    sys.exit(code if code >= 0 else 1)  # the adapter's status; killed by a signal counts as a failure
