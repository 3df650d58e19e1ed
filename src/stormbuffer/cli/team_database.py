"""`sbuf team db status|start|stop`: the embedded PostgreSQL that PostgreSQL stores without a database URL
run on (`engines.postgresql.embedded`). It starts with the first process that opens such a store and
keeps running until `stop`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .context import current
from .failures import failing

if TYPE_CHECKING:
    from ..core.stores import StorePaths


@click.group("db", help="The embedded PostgreSQL of PostgreSQL stores without a database URL.")
def database() -> None:
    pass


@database.command("status", help="Whether the embedded PostgreSQL runs, where it keeps its files, their size.")
def status() -> None:
    from ..engines.postgresql.embedded import Embedded

    server = Embedded.of_user()
    out = current().out()
    state = "running" if server.is_running() else "stopped" if server.is_initialized() else "not created yet"
    click.echo(out.field("State", state))
    click.echo(out.field("Directory", out.path(str(server.base))))
    click.echo(out.field("Log", out.path(str(server.log))))
    click.echo(out.field("Socket directory", out.path(str(server.sockets))))
    if server.is_initialized():
        click.echo(out.field("Size", f"{_size(server.data) / 2**20:.1f} MiB"))


@database.command("start", help="Start the embedded PostgreSQL (creating it the first time); attaching is a no-op.")
def start() -> None:
    from ..engines.postgresql.embedded import Embedded

    with failing("sbuf team db start"):
        Embedded.of_user().ensure_running()
    click.echo("The embedded PostgreSQL is running.")


@database.command("stop", help="Stop the embedded PostgreSQL; the next process that opens its stores starts it.")
def stop() -> None:
    from ..engines.postgresql.embedded import Embedded

    with failing("sbuf team db stop"):
        stopped = Embedded.of_user().stop()
    click.echo("Stopped the embedded PostgreSQL." if stopped else "The embedded PostgreSQL was not running.")


def database_line(paths: StorePaths) -> str | None:
    """For `init`: which database a PostgreSQL store uses (None for a directory store)."""
    from ..core.stores import DATABASE_URL_ENV, EMBEDDED, read_config

    found = read_config(paths).database
    if found is None:
        return None
    out = current().out()
    if found == EMBEDDED:
        from ..engines.postgresql.embedded import Embedded

        where = out.path(str(Embedded.of_user().base))
        return out.field("Database", f"embedded PostgreSQL at {where} (set {DATABASE_URL_ENV} for a managed one)")
    return out.field("Database", f"PostgreSQL named by {found}")


def _size(directory: Path) -> int:
    """Bytes in the files under `directory` (those that vanish meanwhile are skipped)."""
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total
