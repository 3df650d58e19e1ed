"""The supersession journal: two record files change together or not at all.

Before a supersession touches either file, `locks/supersede.toml` records both files' before and
after bytes. Every locked operation first rolls an unfinished journal forward, so a crash at any
point ends in a consistent store. Paths are stored relative to the store root (absolute paths
written by older writers are accepted when they point into the store).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from .atomic import read_or_none, remove_durably, replace_atomic_if, write_atomic
from .errors import Conflict, StoreIntegrityError
from .stores import StorePaths


@dataclass(frozen=True)
class Supersession:
    old_path: Path
    old_before: bytes
    old_after: bytes
    new_path: Path
    new_before: bytes | None  # None: the new file must not exist before
    new_after: bytes


def commit(paths: StorePaths, change: Supersession) -> None:
    table: dict[str, object] = {
        "old_path": _relative(paths, change.old_path),
        "new_path": _relative(paths, change.new_path),
        "old_before": list(change.old_before),
        "old_after": change.old_after.decode("utf-8"),
        "new_after": change.new_after.decode("utf-8"),
    }
    if change.new_before is not None:
        table["new_before"] = list(change.new_before)
    if read_or_none(change.old_path) != change.old_before or read_or_none(change.new_path) != change.new_before:
        raise Conflict("record changed while it was being written")
    write_atomic(paths.journal, tomli_w.dumps(table).encode())
    _roll_forward(paths, change)


def recover(paths: StorePaths) -> bool:
    """Finish an interrupted supersession; return True when a journal was found."""
    if not paths.journal.exists():
        return False
    change = _load(paths)
    old_now = read_or_none(change.old_path)
    new_now = read_or_none(change.new_path)
    if old_now not in (change.old_before, change.old_after) or new_now not in (change.new_before, change.new_after):
        raise Conflict("supersession recovery conflicts with an authored change")
    _roll_forward(paths, change)
    return True


def _roll_forward(paths: StorePaths, change: Supersession) -> None:
    """Write whichever side is not in its "after" state yet, each only over its "before" bytes: a file
    edited meanwhile keeps the edit and the journal stays for the next recovery to report."""
    for path, before, after in ((change.old_path, change.old_before, change.old_after),
                                (change.new_path, change.new_before, change.new_after)):  # fmt: skip
        if read_or_none(path) != after and not replace_atomic_if(path, before, after):
            raise Conflict("supersession recovery conflicts with an authored change")
    remove_durably(paths.journal)


def _load(paths: StorePaths) -> Supersession:
    try:
        table = tomllib.loads(paths.journal.read_text(encoding="utf-8"))
        new_before = table.get("new_before")
        return Supersession(
            old_path=_resolve(paths, table["old_path"]),
            old_before=bytes(table["old_before"]),
            old_after=table["old_after"].encode("utf-8"),
            new_path=_resolve(paths, table["new_path"]),
            new_before=None if new_before is None else bytes(new_before),
            new_after=table["new_after"].encode("utf-8"),
        )
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise StoreIntegrityError("supersession journal is invalid") from None


def _relative(paths: StorePaths, path: Path) -> str:
    return path.relative_to(paths.root).as_posix()


def _resolve(paths: StorePaths, text: str) -> Path:
    path = Path(text)
    if not path.is_absolute():
        path = paths.root / path
    resolved = path.resolve()
    if not resolved.is_relative_to(paths.records.resolve()) or resolved.suffix != ".md":
        raise ValueError("journal path outside the records directory")
    return path
