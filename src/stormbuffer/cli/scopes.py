"""Scopes as people read them: a project's name (its directory's, from `store.toml`) with the scope
string beside it, which `inbox --scope` and the JSON output use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core.errors import StormbufferError
from ..core.stores import StorePaths, read_config
from .text import one_line


def scope_names(stores: Iterable[StorePaths]) -> dict[str, str]:
    """`project:<id>` -> project name, for the initialized project stores among `stores`."""
    names = {}
    for paths in stores:
        try:
            config = read_config(paths)
        except (StormbufferError, OSError):  # the command itself reports an unusable store
            continue
        if config.project_id is not None and config.project_name:
            names[config.record_scope] = config.project_name
    return names


def scope_label(scope: str, names: Mapping[str, str]) -> str:
    """`myproject (project:<id>)` for a project of known name; the scope string otherwise (`global`)."""
    name = names.get(scope)
    return one_line(scope) if name is None else f"{one_line(name)} ({one_line(scope)})"
