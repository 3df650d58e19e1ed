"""Turning expected failures into one `error: <context>: <reason>` line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from ..core.errors import NO_SPACE, NotInitialized, StormbufferError, out_of_space
from ..core.stores import View
from .context import current, fail, report_error
from .text import one_line


@contextmanager
def failing(context: str) -> Iterator[None]:
    """Report a core error or an OS error raised inside the block as `<context>: <reason>`, exit 1.

    A full disk is reported as such whatever layer noticed it (a record write, SQLite, a vector
    file). OS errors are reported by their reason only, so no host path reaches the message.
    """
    try:
        yield
    except Exception as exc:
        if out_of_space(exc):
            fail(f"{context}: {NO_SPACE}")
        if isinstance(exc, NotInitialized):
            fail(f"{context}: store is not initialized; run `{init_command()}`")
        if isinstance(exc, StormbufferError):
            fail(f"{context}: {exc}")
        if isinstance(exc, OSError):
            fail(f"{context}: {exc.strerror or type(exc).__name__}")
        raise


def fail_on_invalid_records(invalid_files: list[tuple[str, str]]) -> None:
    """Report each invalid canonical record (path under `records/`, reason) on its own line, then exit 1."""
    if invalid_files:
        for path, reason in invalid_files:
            report_error(f"invalid canonical record {path}: {reason}")
        raise click.exceptions.Exit(1)


def init_command() -> str:
    """The command that initializes the selected store: `sbuf init` or `sbuf --project init`."""
    view = current().view
    return "sbuf init" if view is View.GLOBAL else f"sbuf {current().scope_flag} init"


def warn_degraded(invalid_files: list[tuple[str, str]]) -> None:
    """A warning on stderr for each invalid record file (store-relative path, reason): the command
    answers from the other records."""
    for path, reason in invalid_files:
        click.echo(f"warning: the store is degraded: {one_line(path)} is invalid and was left out "
                   f"({one_line(reason)})", err=True)  # fmt: skip
