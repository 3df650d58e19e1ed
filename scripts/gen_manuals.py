"""Generate the man pages and the shell completion scripts shipped in the wheel from the click
command definitions, into src/stormbuffer/share/{man,completions}/.

Usage: python scripts/gen_manuals.py [--check]

Man pages come from click-man (`sbuf.1`, then `sbuf-<command>.1` and `sbuf-<group>-<command>.1`
for every command and subcommand); completion scripts are the sources of click's bash, zsh and fish
completion and click-pwsh's PowerShell one. `--check` writes nothing and exits 1 when the
committed files differ from what would be generated (`just manuals` and a test both run this).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click
from click.shell_completion import BashComplete, FishComplete, ShellComplete, ZshComplete
from click_man.core import generate_man_page
from click_pwsh.shell_completion import PwshComplete

from stormbuffer import __version__
from stormbuffer.cli.completion import COMPLETE_VAR, SCRIPTS
from stormbuffer.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
SHARE = ROOT / "src" / "stormbuffer" / "share"
SHELLS: dict[str, type[ShellComplete]] = {
    "bash": BashComplete, "zsh": ZshComplete, "fish": FishComplete, "powershell": PwshComplete,
}  # fmt: skip
DATE = " "  # no date in the page header, so that generating again gives the same bytes


def man_pages(command: click.Command, name: str, parent: click.Context | None = None) -> dict[str, str]:
    """`<command path>.1` -> roff, for `command` and every visible subcommand below it."""
    ctx = click.Context(command, info_name=name, parent=parent)
    pages = {f"{ctx.command_path.replace(' ', '-')}.1": generate_man_page(ctx, version=__version__, date=DATE)}
    if isinstance(command, click.Group):
        for child in command.list_commands(ctx):
            sub = command.get_command(ctx, child)
            if sub is not None and not sub.hidden:
                pages |= man_pages(sub, child, ctx)
    return pages


def generated() -> dict[str, str]:
    """Relative path under share/ -> content."""
    root = click.Group("sbuf", commands={}, help=cli.help)  # click-man lists `commands`; ours load lazily
    root.params = cli.params
    ctx = click.Context(cli, info_name="sbuf")
    root.commands = {name: command for name in cli.list_commands(ctx) if (command := cli.get_command(ctx, name))}
    files = {f"man/{name}": page for name, page in man_pages(root, "sbuf").items()}
    for shell, complete in SHELLS.items():
        files[f"completions/{SCRIPTS[shell]}"] = complete(cli, {}, "sbuf", COMPLETE_VAR).source()
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare with the committed files; write nothing")
    args = parser.parse_args()
    wanted = generated()
    present = {path.relative_to(SHARE).as_posix() for path in SHARE.glob("*/*") if path.is_file()}
    stale = sorted(present - set(wanted))
    changed = sorted(path for path, text in wanted.items() if not (SHARE / path).is_file()
                     or (SHARE / path).read_text(encoding="utf-8") != text)  # fmt: skip
    if args.check:
        for path in stale + changed:
            print(f"out of date: src/stormbuffer/share/{path}")
        if stale or changed:
            print("run `just manuals` and commit the result", file=sys.stderr)
            sys.exit(1)
        return
    for path in stale:
        (SHARE / path).unlink()
    for path in changed:
        (SHARE / path).parent.mkdir(parents=True, exist_ok=True)
        (SHARE / path).write_text(wanted[path], encoding="utf-8")
    print(f"{len(changed)} written, {len(stale)} removed, {len(wanted)} in src/stormbuffer/share/")


if __name__ == "__main__":
    main()
