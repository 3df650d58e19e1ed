"""The throwaway store a conformance run works in, removed when the run ends.

One temporary directory per run holds every place the run needs. A place is a private home, data,
cache and temp directory plus a project directory whose `.sbuf/` is a fresh copy of the contract
store (the store the `schema/v1` examples were written against). The implementation under test
runs with that environment and working directory, so it never sees the caller's own stores.

On the PostgreSQL engine (`engine="postgresql"`) every place's stores keep their records in a database
of the place's own, a copy of one seeded with the contract store, on the server the caller's
`STORMBUFFER_DATABASE_URL` reaches (`engines.Databases`); the place's environment names it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path
from types import TracebackType

from stormbuffer.core.dirs import PlatformDirs
from stormbuffer.core.stores import DATABASE_URL_ENV, DIRECTORY, POSTGRESQL

from .engines import Databases, move_to_postgresql, on_database, record_files, write_records

PROJECT_SCOPE = "project:0194d2a0-5c3e-7b41-9f2a-6c8d1e4b7a30"
GLOBAL_RECORD_ID = "0194d2a1-9999-7a09-8a09-000000000009"
# Variables that would let the caller's own stores, editor or colours reach the implementation.
_DROPPED = ("HOME", "USERPROFILE", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "TMPDIR",
            "APPDATA", "LOCALAPPDATA", "NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "EDITOR", "VISUAL")  # fmt: skip

GLOBAL_STORE_TOML = 'format_version = 1\nscope = "global"\nvisibility = "private"\n'


def record_markdown(record_id: str, scope: str, title: str, body: str) -> str:
    """One canonical agent-readable active record, as its Markdown file holds it."""
    return f"""+++
format_version = 1
id = "{record_id}"
title = "{title}"
kind = "procedure"
scope = "{scope}"
status = "active"
access = "agent"
created_at = "2026-03-01T09:00:00Z"
updated_at = "2026-03-01T09:00:00Z"
tags = []
aliases = []
supersedes = []

[[sources]]
kind = "conversation"
reference = "conformance:store"
actor = "maintainer"
+++

{body}
"""


GLOBAL_RECORD = record_markdown(
    GLOBAL_RECORD_ID,
    "global",
    "Release notes are written in the global changelog",
    "Release notes for every project are collected in the global changelog before a release.",
)


@dataclass(frozen=True)
class Place:
    """Where one implementation process runs: its working directory and its environment."""

    base: Path
    cwd: Path
    env: dict[str, str]

    @property
    def records(self) -> Path:
        return self.cwd / ".sbuf" / "records"

    def record_files(self) -> dict[str, bytes]:
        """Every record of the project store (file name → content), to see what a call wrote."""
        return record_files(self.cwd / ".sbuf", self.env)

    def write_records(self, records: dict[str, bytes]) -> None:
        """Plant records (file name → content) in the project store."""
        write_records(self.cwd / ".sbuf", self.env, records)


class ThrowawayStore:
    """The run's temporary directory; `place()` gives a fresh copy of the contract store in it."""

    def __init__(self, environ: Mapping[str, str] | None = None, *, engine: str = DIRECTORY) -> None:
        self.caller = dict(os.environ if environ is None else environ)
        self.databases: Databases | None = None
        if engine == POSTGRESQL:
            url = self.caller.get(DATABASE_URL_ENV, "").strip()
            if not url:
                raise ValueError(f"the {POSTGRESQL} engine needs {DATABASE_URL_ENV}: a database URL on a server "
                                 "where its user may create databases")  # fmt: skip
            self.databases = Databases(url)
        self.root = Path(tempfile.mkdtemp(prefix="sbuf-conformance-", dir=self.caller.get("TMPDIR"))).resolve()
        self._count = 0
        self._lock = threading.Lock()
        self._places: list[Place] = []
        self._template: str | None = None  # the seeded database every place's is a copy of
        self._seed_failure: str | None = None

    def __enter__(self) -> ThrowawayStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the daemon any place's doors started (Stormbuffer's own doors start one in the place's
        cache directory), then remove the whole directory."""
        from stormbuffer.daemon.relay import stop
        from stormbuffer.daemon.runtime import runtime_directory

        for place in self._places:
            directory = runtime_directory(place.env)
            if directory is not None and (directory / "daemon.lock").exists():
                stop(place.env)
        try:
            if self.databases is not None:
                self.databases.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def model_cache(self) -> Path | None:
        """The caller's prepared embedding model (`sbuf init` prepares it), or None."""
        try:
            models = PlatformDirs.from_environ(self.caller).shared_cache / "models"
        except Exception:  # no home directory: no model either
            return None
        return models if models.is_dir() and any(models.iterdir()) else None

    def place(self, *, models: bool = False, global_store: bool = False) -> Place:
        """A fresh copy of the contract store; `models` links the caller's model cache in, and
        `global_store` adds an initialized global store holding one agent-readable record."""
        with self._lock:
            self._count += 1
            base = self.root / f"place-{self._count}"
        env = {name: value for name, value in self.caller.items() if name not in _DROPPED}
        env = {name: value for name, value in env.items() if not name.startswith("STORMBUFFER_")}
        for name, folder in (("HOME", "home"), ("XDG_DATA_HOME", "data"), ("XDG_CACHE_HOME", "cache"),
                             ("TMPDIR", "tmp")):  # fmt: skip
            (base / folder).mkdir(parents=True)
            env[name] = str(base / folder)
        cwd = base / "work" / "project"
        _contract_store(cwd / ".sbuf")
        if models:
            source_models = self.model_cache()
            if source_models is None:
                raise RuntimeError("no prepared embedding model; run `sbuf init` first")
            link_tree(source_models, base / "cache" / "stormbuffer" / "models")
        if global_store:
            _global_store(base / "data" / "stormbuffer")
        if self.databases is not None:
            env[DATABASE_URL_ENV] = self.databases.url_of(self.databases.create(self._seeded()))
            for root in (cwd / ".sbuf", base / "data" / "stormbuffer"):
                if root.is_dir():  # the records are the template's rows
                    on_database(root)
        place = Place(base, cwd, env)
        with self._lock:
            self._places.append(place)
        return place

    def _seeded(self) -> str:
        """The template database, seeded with the contract store and the global store on first use."""
        assert self.databases is not None
        with self._lock:
            if self._template is None:
                if self._seed_failure is not None:  # one failure per run, not one per check
                    raise RuntimeError(self._seed_failure)
                try:
                    self._template = self._seed(self.databases)
                except Exception as exc:
                    self._seed_failure = f"the template database was not made: {exc}"
                    raise
            return self._template

    def _seed(self, databases: Databases) -> str:
        name = databases.create()
        env = {**self.caller, DATABASE_URL_ENV: databases.url_of(name)}
        seed = self.root / "template"
        _contract_store(seed / "project")
        _global_store(seed / "global")
        for root in (seed / "project", seed / "global"):
            move_to_postgresql(root, env)
        return name


def _contract_store(root: Path) -> None:
    with as_file(files(__package__) / "contract_store") as source:
        shutil.copytree(source, root)
    (root / ".gitignore").write_bytes(b"*\n!.gitignore\n")


def _global_store(root: Path) -> None:
    """An initialized global store holding one agent-readable record."""
    (root / "records").mkdir(parents=True)
    (root / "store.toml").write_text(GLOBAL_STORE_TOML, encoding="utf-8")
    (root / "records" / f"{GLOBAL_RECORD_ID}.md").write_text(GLOBAL_RECORD, encoding="utf-8")


def link_tree(source: Path, destination: Path) -> None:
    """Give `destination` the regular files of `source`: hard links where possible (the model is
    large), copies otherwise; dot files are skipped."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, destination, copy_function=link, ignore=shutil.ignore_patterns(".*"), dirs_exist_ok=True)
