"""Turning expected failures into one `error: <context>: <reason>` line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from ..core.errors import RepositoryError, StormbufferError
from .context import fail, report_error
from .text import one_line


@contextmanager
def failing(context: str) -> Iterator[None]:
    """Report a core error or an OS error raised inside the block as `<context>: <reason>`, exit 1.

    OS errors are reported by their reason only, so no host path reaches the message.
    """
    try:
        yield
    except RepositoryError as exc:
        fail(f"{context}: repository operation failed: {exc}")
    except StormbufferError as exc:
        fail(f"{context}: {exc}")
    except OSError as exc:
        fail(f"{context}: {exc.strerror or type(exc).__name__}")


def fail_on_invalid_records(invalid_files: list[tuple[str, str]]) -> None:
    """Report each invalid canonical record (path under `records/`, reason) on its own line, then exit 1."""
    if invalid_files:
        for path, reason in invalid_files:
            report_error(f"invalid canonical record {path}: {reason}")
        raise click.exceptions.Exit(1)


def warn_degraded(invalid_files: list[tuple[str, str]]) -> None:
    """A warning on stderr for each invalid record file (store-relative path, reason): the command
    answers from the other records."""
    for path, reason in invalid_files:
        click.echo(f"warning: the store is degraded: {one_line(path)} is invalid and was left out "
                   f"({one_line(reason)})", err=True)  # fmt: skip
