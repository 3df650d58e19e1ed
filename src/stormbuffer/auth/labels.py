"""Scope labels of a store's team: the names people read instead of `project:<uuid>`.

An admin sets them with `sbuf team scope label SCOPE LABEL`; they live with the store's team
tokens, in `<store>/team/labels.toml` (directory 0700, file 0600), replaced whole and atomically
under the store's mutation lock. `ScopeNames` names any scope: its label, else the project's name
for the store's own scope (`store.toml`), `global` for the global scope, else `unnamed project`.
"""

from __future__ import annotations

import os
import tomllib

from stormbuffer.core.atomic import write_atomic
from stormbuffer.core.codec import toml_string
from stormbuffer.core.errors import StormbufferError
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.scopes import GLOBAL, parse_scope
from stormbuffer.core.stores import StorePaths, read_config

from .tokens import LOCK_WAIT_S, TEAM_DIR

LABELS_FILE = "labels.toml"
MAX_LABEL = 64
UNNAMED = "unnamed project"


class LabelError(StormbufferError):
    """A label cannot be set or read."""


def check_label(text: str) -> str:
    """`text` when it is 1 to `MAX_LABEL` printable characters without surrounding blanks."""
    if not text or text != text.strip() or len(text) > MAX_LABEL or not text.isprintable():
        raise LabelError(f"a label is 1 to {MAX_LABEL} printable characters without surrounding blanks")
    return text


class ScopeLabels:
    """The labels of one store."""

    def __init__(self, paths: StorePaths) -> None:
        self.paths = paths
        self.folder = paths.root / TEAM_DIR
        self.file = self.folder / LABELS_FILE

    def read(self) -> dict[str, str]:
        """Scope → label; empty when none were set."""
        try:
            text = self.file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            table = tomllib.loads(text).get("labels", {})
            return {parse_scope(str(scope)): check_label(str(label)) for scope, label in table.items()}
        except (tomllib.TOMLDecodeError, AttributeError, ValueError, LabelError):
            raise LabelError(f"the scope label file {TEAM_DIR}/{LABELS_FILE} is damaged") from None

    def set(self, scope: str, label: str) -> None:
        """Label `scope` (ValueError for a malformed scope, LabelError for a bad label)."""
        scope, label = parse_scope(scope), check_label(label)
        self.folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.folder, 0o700)
        with exclusive_lock(self.paths.mutation_lock, wait=LOCK_WAIT_S):
            labels = {**self.read(), scope: label}
            lines = ["# Scope labels of this team (`sbuf team scope label`).", "[labels]"]
            lines += [f"{toml_string(key)} = {toml_string(value)}" for key, value in sorted(labels.items())]
            write_atomic(self.file, ("\n".join(lines) + "\n").encode("utf-8"))
            os.chmod(self.file, 0o600)


class ScopeNames:
    """What a page calls each scope of the store at `paths`."""

    def __init__(self, paths: StorePaths) -> None:
        try:
            self.labels = ScopeLabels(paths).read()
        except LabelError:
            self.labels = {}  # a damaged file names nothing; `sbuf team scope label` reports it
        config = read_config(paths)
        self.own = (config.record_scope, config.project_name)

    def __call__(self, scope: str) -> str:
        if scope in self.labels:
            return self.labels[scope]
        if scope == self.own[0] and self.own[1]:
            return self.own[1]
        return GLOBAL if scope == GLOBAL else UNNAMED
