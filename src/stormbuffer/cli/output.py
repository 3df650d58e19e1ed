"""JSON for programs, text for people: the choice made by commands whose reference output is JSON.

Such a command prints its JSON envelope when stdout is not a terminal (a pipe, a file, a script) and
its human view on a terminal; `--json` and `--text` force either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click


def json_or_text(function: Callable[..., Any]) -> Callable[..., Any]:
    """`--json` / `--text`, passed to the command as `output` ("json", "text" or None; the last given wins)."""
    text = click.option("--text", "output", flag_value="text", help="Print the human view, even into a pipe or file.")
    as_json = click.option("--json", "output", flag_value="json", help="Print JSON, even on a terminal.")
    return as_json(text(function))


def prints_json(output: str | None) -> bool:
    """Whether to print JSON: as `--json`/`--text` said, else when stdout is not a terminal."""
    return output == "json" if output is not None else not sys.stdout.isatty()
