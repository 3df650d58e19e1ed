"""What every command needs: the selected view, the environment, colour, and error reporting."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from ..core.stores import PlatformDirs, StorePaths, View, resolve_store
from .style import Style, colour_enabled

if TYPE_CHECKING:
    from ..core.repository import Repository


class CommandFailed(click.ClickException):
    """A failure already phrased for the user: printed as `error: <message>`, exit 1."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        # Decided now: the command's context is gone by the time `main` shows the error.
        self.coloured = _stderr_style().enabled

    def show(self, file: object = None) -> None:  # noqa: ARG002 - click's signature
        click.echo(f"{Style(self.coloured).failure('error')}: {self.message}", err=True, color=True)


@dataclass
class Cli:
    view: View = View.GLOBAL
    colour: str = "auto"
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    machine_mode: bool = False
    lock_wait: float | None = None  # --lock-wait; else the environment's or the default

    def repository(self) -> Repository:
        """The selected store's repository, waiting for a busy store as configured."""
        from ..core.repository import Repository

        return Repository(self.store(), lock_wait=self.write_wait())

    def write_wait(self) -> float:
        """Seconds to wait for a store another process is changing: --lock-wait, else the environment's."""
        from ..core.locks import lock_wait_from

        return lock_wait_from(self.env, self.lock_wait)

    @property
    def cwd(self) -> Path:
        return Path.cwd()

    def dirs(self) -> PlatformDirs:
        return PlatformDirs.from_environ(self.env)

    def store(self) -> StorePaths:
        return resolve_store(self.view, self.cwd, self.dirs())

    def out(self) -> Style:
        return Style(colour_enabled(self.colour, sys.stdout.isatty(), "NO_COLOR" in self.env, self.machine_mode))

    def err(self) -> Style:
        return Style(colour_enabled(self.colour, sys.stderr.isatty(), "NO_COLOR" in self.env, self.machine_mode))

    @property
    def scope_flag(self) -> str:
        """The flag that selects this view, as shown in follow-up commands (`--global`, `--project`, `--local`)."""
        return f"--{self.view.value}"


def current() -> Cli:
    return click.get_current_context().ensure_object(Cli)


def _stderr_style() -> Style:
    return current().err() if click.get_current_context(silent=True) else Style(False)


def report_error(message: str) -> None:
    click.echo(f"{_stderr_style().failure('error')}: {message}", err=True, color=True)


def fail(message: str) -> NoReturn:
    raise CommandFailed(message)
