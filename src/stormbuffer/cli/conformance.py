"""`sbuf conformance`: run the version-1 contract checks against any implementation's doors."""

from __future__ import annotations

import json
import sys

import click

from .context import current, fail


@click.command("conformance")
@click.option(
    "--invoke",
    "invoke",
    multiple=True,
    metavar="CMD",
    help="A program speaking `CMD --project invoke <operation>` (e.g. `sbuf`).",
)
@click.option(
    "--mcp",
    "mcp",
    multiple=True,
    metavar="CMD",
    help="A program speaking `CMD --stdio --project [--allow-writes]` (e.g. `stormbuffer-mcp`).",
)
@click.option(
    "--http",
    "http",
    multiple=True,
    metavar="URL",
    help="A running server answering `POST URL/v1/invoke/<operation>` (e.g. `http://127.0.0.1:7342`).",
)
@click.option(
    "--http-serve",
    "http_serve",
    multiple=True,
    metavar="CMD",
    help="A program the kit starts as `CMD --project serve --port N` in its throwaway store (e.g. `sbuf`).",
)
@click.option(
    "--mcp-http",
    "mcp_http",
    multiple=True,
    metavar="URL",
    help="A running team server's MCP endpoint (e.g. `http://127.0.0.1:7342/mcp`); the team token is read "
    "from STORMBUFFER_TOKEN.",
)
@click.option(
    "-k",
    "--select",
    "patterns",
    multiple=True,
    metavar="GLOB",
    help="Run only the checks whose id matches (e.g. 'mcp.*'); repeatable.",
)
@click.option(
    "--engine",
    type=click.Choice(["directory", "postgresql"]),
    default="directory",
    show_default=True,
    help="Where the throwaway stores keep their records; postgresql makes a database per store on the server "
    "STORMBUFFER_DATABASE_URL reaches (its user needs CREATEDB).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def conformance(
    invoke: tuple[str, ...],
    mcp: tuple[str, ...],
    http: tuple[str, ...],
    http_serve: tuple[str, ...],
    mcp_http: tuple[str, ...],
    patterns: tuple[str, ...],
    engine: str,
    as_json: bool,
) -> None:
    """Check an implementation of the version-1 protocol against the contract.

    Each door is a command line quoted as one argument, or the URL of a running HTTP server; give any
    of them (doors given together are also compared with --invoke). A running server's store is its
    own, so --http runs only the checks that hold in any store; --http-serve runs them all. --mcp-http
    runs the checks of MCP over Streamable HTTP that hold in any store and for any role. The checks
    run in a throwaway store made for the run and removed afterwards; each is reported as pass or fail
    with a one-line reason. Exit status 0 iff every check passes.
    """
    from stormbuffer.conformance import Outcome, run
    from stormbuffer.conformance.doors import parse_command

    if not invoke and not mcp and not http and not http_serve and not mcp_http:
        raise click.UsageError("give --invoke CMD, --mcp CMD, --http URL, --http-serve CMD or --mcp-http URL")
    if any(len(door) > 1 for door in (invoke, mcp, http, http_serve, mcp_http)) or (http and http_serve):
        raise click.UsageError("give each door once, and either --http or --http-serve")
    if http and not http[0].startswith(("http://", "https://")):
        raise click.UsageError("--http takes a URL such as http://127.0.0.1:7342")
    try:
        doors = [parse_command(door[0]) if door else None for door in (invoke, mcp, http_serve)]
    except ValueError:
        fail("a door's command is empty or badly quoted")
    remote = _remote(mcp_http[0]) if mcp_http else None
    out, err = current().out(), current().err()

    def show(outcome: Outcome) -> None:
        mark = out.success("pass") if outcome.passed else out.failure("FAIL")
        if as_json:
            if sys.stderr.isatty():
                click.echo(f"{'pass' if outcome.passed else 'FAIL'} {outcome.id}", err=True)
        else:
            click.echo(f"{mark} {outcome.id}: {outcome.reason}", color=True)

    try:
        report = run(invoke=doors[0], mcp=doors[1], http=http[0] if http else None, http_serve=doors[2],
                     mcp_http=remote, patterns=patterns, progress=show, environ=current().env,
                     engine=engine)  # fmt: skip
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        click.echo(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        failed = report.failed()
        summary = f"{len(report.outcomes) - len(failed)} passed, {len(failed)} failed in {report.seconds:.1f} s"
        click.echo((err.failure(summary) if failed else err.success(summary)) if failed else summary, color=True)
    if not report.outcomes:
        fail("no check matches the selection")
    sys.exit(0 if report.passed else 1)


def _remote(url: str) -> tuple[str, str]:
    """The MCP address and the team token of `STORMBUFFER_TOKEN` (checked as `stormbuffer-mcp --remote`
    checks them: https, or http to a loopback address only)."""
    from stormbuffer.adapters.mcp.remote import RemoteError, checked

    try:
        return checked(url, current().env)
    except RemoteError as exc:
        raise click.UsageError(str(exc).replace("--remote", "--mcp-http")) from None
