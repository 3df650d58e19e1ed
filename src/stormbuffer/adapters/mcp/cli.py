"""The `stormbuffer-mcp` command: arguments (read left to right), store selection, exit status.

Exit 0 after the host closes stdin, 2 for a usage error, 1 when the adapter cannot start: the
store cannot be resolved, or stdin closed before the host sent its first request; 1 too when the
daemon went away during the session. Starting never initializes a store or writes anything.

By default the command is a relay between its stdio and a session of the user's daemon
(`stormbuffer.daemon`), started on demand; it then imports neither the SDK nor NumPy. With
`--remote URL` it relays to a team server's MCP endpoint instead (`remote`).
`--no-daemon`, `STORMBUFFER_NO_DAEMON=1`, or a platform without Unix sockets serve in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from stormbuffer import __version__

PROG = "stormbuffer-mcp"
USAGE = (
    f"Usage: {PROG} --stdio [--global | --project | --local] [--allow-candidate-writes | --allow-writes] [--no-daemon]"
)
HELP = f"""{USAGE}

Serve Stormbuffer memory to an MCP host over stdin and stdout.

Store view:
  --global                  the global store (default)
  --project                 the nearest project store plus applicable global memory
  --local                   the nearest project store only

Write access (writes are disabled by default):
  --allow-candidate-writes  allow memory_remember and memory_update, which only create candidates
  --allow-writes            also allow memory_forget, which archives active records

Process:
  --no-daemon               serve in this process instead of a session of the user's daemon

Team server (instead of the options above):
  --remote URL              relay stdio to the MCP endpoint of a team server (`sbuf serve --team`,
                            URL like https://HOST:PORT/mcp), sending the team token in
                            STORMBUFFER_TOKEN; its store and the token's role decide the rest
"""
START_FAILED = "could not start the stdio adapter"

VIEW_FLAGS = {"--global": "global", "--project": "project", "--local": "local"}  # View values
WRITE_FLAGS = {"--allow-candidate-writes": "candidates", "--allow-writes": "all"}  # WriteGrant values


class UsageError(Exception):
    """A bad command line; the message follows `stormbuffer-mcp: ` on stderr, exit 2."""


class Options(NamedTuple):
    """The command line, as View and WriteGrant values (strings: the relay imports neither)."""

    view: str = "global"
    grant: str = "none"
    daemon: bool = True
    remote: str | None = None  # a team server's MCP address


def parse(argv: Sequence[str]) -> Options | str:
    """The options, or the text `--help`/`--version` print. The first problem met raises UsageError."""
    stdio = False
    daemon = True
    view: str | None = None
    grant: str | None = None
    remote: str | None = None
    args = iter(argv)
    for arg in args:
        if arg in ("-h", "--help"):
            return HELP
        if arg in ("-V", "--version"):
            return f"{PROG} {__version__}\n"
        if arg == "--stdio":
            stdio = True
        elif arg == "--no-daemon":
            daemon = False
        elif arg == "--remote":
            remote = next(args, None)
            if remote is None:
                raise UsageError("--remote needs the team server's MCP address")
        elif arg in VIEW_FLAGS:
            if view is not None:
                raise UsageError("select only one of --global, --project, or --local")
            view = VIEW_FLAGS[arg]
        elif arg in WRITE_FLAGS:
            if grant is not None:
                raise UsageError("select only one of --allow-candidate-writes or --allow-writes")
            grant = WRITE_FLAGS[arg]
        else:
            raise UsageError("unknown argument")
    if remote is not None:
        if view or grant or not daemon:
            raise UsageError("--remote takes no store, write or process flags: the team server and the token decide")
        return Options(remote=remote)
    if not stdio:
        raise UsageError("--stdio is required")
    return Options(view or "global", grant or "none", daemon)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        parsed = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        sys.exit(2)
    if isinstance(parsed, str):
        sys.stdout.write(parsed)
        sys.exit(0)
    if parsed.remote is not None:
        sys.exit(run_remote(parsed.remote))
    if parsed.daemon:
        status = relay(parsed)
        if status is not None:
            sys.exit(status)
    sys.exit(run(parsed))


def relay(options: Options) -> int | None:
    """Relay this process's stdio to a daemon session; the exit status, or None when no daemon can
    be used (then this process serves)."""
    from stormbuffer.daemon.relay import DAEMON_STOPPED, Unreachable, hello, open_door, relay_mcp

    try:
        connection = open_door(hello("mcp", os.environ, view=options.view, grant=options.grant), os.environ, start=True)
    except Unreachable:
        return None
    try:
        if connection.reply.get("reason") == "start_failed":
            return _start_failed(connection.reply.get("message"))
        if connection.reply.get("ok") is not True:
            return None
        ended, requested = relay_mcp(connection)
    finally:
        connection.close()
    if not ended:
        print(f"{PROG}: {DAEMON_STOPPED}", file=sys.stderr)
        return 1
    return 0 if requested else _start_failed()


def run(options: Options) -> int:
    """Serve one host over stdio until it closes stdin, in this process; returns the exit status."""
    from stormbuffer.core.errors import StoreError, StormbufferError
    from stormbuffer.core.locks import lock_wait_from
    from stormbuffer.core.stores import PlatformDirs, View, resolve_store
    from stormbuffer.index.freshness import FreshnessRegistry
    from stormbuffer.index.readers import keep_warm
    from stormbuffer.protocol.session import Session
    from stormbuffer.threads import limit_math_threads

    from .sdk import defer_package_inits
    from .tools import WriteGrant
    from .warm import WarmEmbedder

    limit_math_threads()
    defer_package_inits()  # before the first import of the SDK
    from .server import serve

    _log_to_stderr()
    try:
        dirs = PlatformDirs.from_environ(os.environ)
        selected = resolve_store(View(options.view), Path.cwd(), dirs)
    except StoreError as exc:  # its message names what is wrong with the store, never a path
        return _start_failed(str(exc))
    except (StormbufferError, OSError):
        return _start_failed()
    freshness = FreshnessRegistry()  # watchers start once the host is quiet, or with the first read
    keep_warm()
    session = Session(View(options.view), selected, dirs, WarmEmbedder(selected.cache_dir), freshness,
                      lock_wait=lock_wait_from(os.environ))  # fmt: skip
    try:
        opened = serve(session, WriteGrant(options.grant))
    except KeyboardInterrupt:
        return 130
    finally:
        freshness.close()
    return 0 if opened else _start_failed()


def run_remote(url: str) -> int:
    """Relay this process's stdio to a team server until the host closes stdin; the exit status."""
    from .remote import RemoteError, checked, relay

    try:
        address, token = checked(url, os.environ)
    except RemoteError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    import anyio

    from .sdk import defer_package_inits

    defer_package_inits()
    _log_to_stderr()
    try:
        sent = anyio.run(relay, address, token)
    except KeyboardInterrupt:
        return 130
    return 0 if sent else _start_failed()


def _start_failed(reason: object = None) -> int:
    """Say the adapter could not start, with the store's own reason when there is one."""
    print(f"{PROG}: {START_FAILED}: {reason}" if isinstance(reason, str) and reason else f"{PROG}: {START_FAILED}",
          file=sys.stderr)  # fmt: skip
    return 1


def _log_to_stderr() -> None:
    """Log lines without tracebacks: diagnostics on stderr stay short and hold no source paths."""
    import logging

    class OneLine(logging.Formatter):
        def formatException(self, ei: object) -> str:  # noqa: N802 - logging's name
            return ""

        def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
            return ""

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine(f"{PROG}: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
