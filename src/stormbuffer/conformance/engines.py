"""The throwaway stores of a run on either engine: their records read and written through the engine
their `store.toml` names, and, on PostgreSQL, a database of their own for every place.

`record_files` and `write_records` are the one way the kit (and the project's tests) look at or plant
records: files under `records/` for a directory store, rows for a PostgreSQL store (the canonical
bytes are stored verbatim, so a row's bytes are what the file would hold).

`Databases` makes the databases of a run on the server that a URL reaches (its user needs the right
to create databases): one template seeded once, then a copy of it per place
(`CREATE DATABASE … TEMPLATE`, under a second), all dropped when the run ends.
"""

from __future__ import annotations

import itertools
import re
import shutil
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from stormbuffer.core.stores import DATABASE_URL_ENV, POSTGRESQL

if TYPE_CHECKING:
    from stormbuffer.core.stores import StorePaths
    from stormbuffer.engines.base import RecordStore

ENGINE_LINES = f'engine = "{POSTGRESQL}"\ndatabase_url_env = "{DATABASE_URL_ENV}"\n'


def _paths(root: Path, env: Mapping[str, str]) -> StorePaths:
    """The store at `root` (global or project, as its `store.toml` says), with the cache `env` names."""
    import tomllib

    from stormbuffer.core.stores import StorePaths

    scope = tomllib.loads((root / "store.toml").read_text(encoding="utf-8")).get("scope")
    cache = Path(env.get("XDG_CACHE_HOME", root)) / "stormbuffer"
    return StorePaths("global" if scope == "global" else "project", root, cache)


def engine_of(root: Path) -> str:
    """The engine the store at `root` names ("directory" when it names none)."""
    from stormbuffer.core.stores import DIRECTORY, read_config

    return read_config(_paths(root, {})).engine if (root / "store.toml").is_file() else DIRECTORY


@contextmanager
def _store(root: Path, env: Mapping[str, str]) -> Iterator[RecordStore]:
    """The record store at `root`, its database URL taken from `env`; its connections are closed after."""
    from stormbuffer.core.stores import read_config
    from stormbuffer.engines import open_record_store
    from stormbuffer.engines.postgresql.database import database_url, engine_for, environment

    with environment(env):
        try:
            paths = _paths(root, env)
            yield open_record_store(paths, read_config(paths).record_scope, 30.0, None)
        finally:
            engine_for(database_url(DATABASE_URL_ENV)).dispose()  # no connection outlives the block


def record_files(root: Path, env: Mapping[str, str]) -> dict[str, bytes]:
    """Every record of the store at `root`: file name → canonical bytes (the files of a directory
    store, the rows of a PostgreSQL store)."""
    if engine_of(root) != POSTGRESQL:
        return {path.name: path.read_bytes() for path in sorted((root / "records").glob("*.md"))}
    with _store(root, env) as store:
        stored, _invalid = store.scan(None, recover=False, leave_out_invalid=True)
    return {item.path.name: item.data for item in sorted(stored, key=lambda item: item.path.name)}


def write_records(root: Path, env: Mapping[str, str], records: Mapping[str, bytes]) -> None:
    """Write records (file name → canonical bytes) into the store at `root`, over any of the same name;
    a PostgreSQL store writes them all in one transaction, with their projection."""
    if engine_of(root) != POSTGRESQL:
        (root / "records").mkdir(parents=True, exist_ok=True)
        for name, data in records.items():
            (root / "records" / name).write_bytes(data)
        return
    from stormbuffer.core.staging import FileWrite

    before = record_files(root, env)
    writes = [FileWrite(root / "records" / name, data, before.get(name)) for name, data in records.items()]
    with _store(root, env) as store, store.locked():
        store.write_all(writes, None)


def move_to_postgresql(root: Path, env: Mapping[str, str]) -> None:
    """Make the directory store at `root` a PostgreSQL store in the database `env` names, with the
    same records (its `store.toml` gains the engine lines; `records/` is emptied)."""
    from stormbuffer.engines.postgresql import prepare_database

    files = record_files(root, env)
    on_database(root)
    with _store(root, env):
        prepare_database(DATABASE_URL_ENV)
    if files:
        write_records(root, env, files)


def on_database(root: Path) -> None:
    """Make the directory store at `root` a PostgreSQL store whose rows are already in its database
    (a copy of one `move_to_postgresql` filled): its `store.toml` gains the engine lines, `records/`
    is emptied."""
    config = root / "store.toml"
    config.write_text(config.read_text(encoding="utf-8") + ENGINE_LINES, encoding="utf-8")
    shutil.rmtree(root / "records", ignore_errors=True)
    (root / "records").mkdir()


class Databases:
    """The databases of one run on the server that `url` reaches; `close` drops them."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"sbuf_conformance_{uuid.uuid4().hex[:12]}"
        self._names = itertools.count(1)
        self._made: list[str] = []
        self._lock = threading.Lock()

    def url_of(self, name: str) -> str:
        """`url` with its database replaced by `name` (query parameters such as a socket's host kept)."""
        head, sep, query = self.url.partition("?")
        scheme, _, rest = head.partition("://")
        authority = rest.split("/", 1)[0]
        return f"{scheme}://{authority}/{name}{sep}{query}"

    def create(self, template: str | None = None) -> str:
        """A new database (a copy of the database `template`, when given); its name."""
        with self._lock:
            name = f"{self.prefix}_{next(self._names)}"
            source = f" TEMPLATE {_identifier(template)}" if template else ""
            self._execute(f"CREATE DATABASE {name}{source}")
            self._made.append(name)
        return name

    def close(self) -> None:
        """Drop every database this run made (ending their sessions)."""
        with self._lock:
            for name in reversed(self._made):
                self._execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            self._made.clear()

    def _execute(self, statement: str) -> None:
        import psycopg

        from stormbuffer.engines.postgresql.database import reason

        url = self.url.replace("postgresql+psycopg://", "postgresql://", 1)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
                conn.execute(statement.encode())
        except psycopg.Error as exc:  # the message names no part of the URL
            raise RuntimeError(f"the server {DATABASE_URL_ENV} reaches cannot be used: {reason(exc)}") from None


def _identifier(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise ValueError("not a plain database name")
    return name
