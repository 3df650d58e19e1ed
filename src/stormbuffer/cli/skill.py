"""`sbuf skill install`: copy the selected scope's memory skill into an agent skill directory.

Offline and idempotent: identical content is left alone, different content is kept unless
`--force`. A new file appears complete or not at all (temp file, fsync, hard link, so a file
that appeared meanwhile is never overwritten); `--force` replaces atomically (rename).
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

import click

from ..core.atomic import fsync_directory, write_temp
from ..core.stores import View
from .context import current, fail
from .main import store_options

SKILL_FILE = "SKILL.md"


def skill_name(view: View) -> str:
    """`--project` and `--local` install the project skill; the global view the global one."""
    return "stormbuffer-global-memory" if view is View.GLOBAL else "stormbuffer-memory"


def shipped_skill(name: str) -> bytes:
    return (files("stormbuffer") / "skills" / name / SKILL_FILE).read_bytes()


@click.group("skill", help="Manage agent skills shipped with Stormbuffer.")
@store_options
def skill() -> None:
    pass


@skill.command("install", help="Install the selected scope's memory skill into an agent skill directory.")
@click.option("--directory", required=True, metavar="<DIRECTORY>", type=click.Path(file_okay=False, path_type=Path),
              help="Agent skill directory in which to create the Stormbuffer skill.")  # fmt: skip
@click.option("--force", is_flag=True, help="Replace different existing skill content atomically.")
@store_options
def install(directory: Path, force: bool) -> None:
    cli = current()
    name = skill_name(cli.view)
    destination = directory / name / SKILL_FILE
    content = shipped_skill(name)
    try:
        existing = destination.read_bytes()
    except FileNotFoundError:
        existing = None
    except OSError as exc:
        fail(f"could not read {destination}: {exc.strerror or type(exc).__name__}")
    if existing is not None and existing != content and not force:
        _refuse(destination)
    if existing != content:
        try:
            _write(destination, content, replace=force)
        except FileExistsError:
            _refuse(destination)
        except OSError as exc:
            fail(f"could not install {destination}: {exc.strerror or type(exc).__name__}")
    out = cli.out()
    click.echo(f"{out.success('Installed')} {out.path(str(destination))}")


def _refuse(destination: Path) -> None:
    fail(f"{destination} already contains different content; rerun with --force to replace it")


def _write(destination: Path, content: bytes, *, replace: bool) -> None:
    """Write via a fsynced temp file: rename over (`replace`) or hard-link to a path that must not exist."""
    temp = write_temp(destination, content)
    try:
        if replace:
            os.replace(temp, destination)
        else:
            os.link(temp, destination)
    finally:
        temp.unlink(missing_ok=True)
    fsync_directory(destination.parent)
