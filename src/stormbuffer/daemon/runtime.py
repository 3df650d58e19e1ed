"""Where the daemon listens and which install it belongs to (standard library only).

The socket lives in a directory only its user can enter: `$XDG_RUNTIME_DIR/stormbuffer`, else
`stormbuffer/run` in the cache directory. A directory that is not the user's own, or that others
may enter, is never used; neither is a socket path too long for the platform. Then the doors serve
in-process, as they do with `STORMBUFFER_NO_DAEMON=1` or where Unix sockets are missing.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

from stormbuffer import __version__

NO_DAEMON_ENV = "STORMBUFFER_NO_DAEMON"
IDLE_ENV = "STORMBUFFER_DAEMON_IDLE_S"
DEFAULT_IDLE_S = 900.0
PROTOCOL = "stormbuffer-daemon/1"
# What selects stores and checks output: the variables a door forwards with each connection.
SESSION_ENV = (
    "HOME", "USERPROFILE", "XDG_DATA_HOME", "XDG_CACHE_HOME", "STORMBUFFER_VALIDATE_OUTPUT", "STORMBUFFER_LOCK_WAIT",
    "STORMBUFFER_DATABASE_URL",  # a PostgreSQL store's database is the caller's, not the daemon's (same user only)
)  # fmt: skip
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
MAX_HELLO_BYTES = 65536
MAX_HUMAN_PAYLOAD = 1 << 24  # a human command's payload (one record's Markdown); larger ones run in `sbuf`
# The daemon's last line on an MCP connection after the session ended normally (never relayed):
# without it, the daemon went away and the relay answers what is still open.
SESSION_END = b'{"stormbuffer-daemon":"session-end"}\n'


class Runtime:
    """The daemon's files for one user and environment."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def socket(self) -> Path:
        return self.directory / "daemon.sock"

    @property
    def lock(self) -> Path:
        """Held by the serving daemon for its whole life; holds its process id."""
        return self.directory / "daemon.lock"

    @property
    def log(self) -> Path:
        return self.directory / "daemon.log"

    @property
    def identity(self) -> Path:
        """The serving daemon's `identity_record`, for doors that cannot compute the install identity
        themselves (the Node.js plugins); present whenever the socket is."""
        return self.directory / "daemon.identity"


def disabled(env: Mapping[str, str]) -> bool:
    return env.get(NO_DAEMON_ENV, "") not in ("", "0") or not hasattr(socket, "AF_UNIX")


def runtime_directory(env: Mapping[str, str]) -> Path | None:
    """Where the runtime directory of this environment is (nothing is created or checked)."""
    base = env.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_absolute() and Path(base).is_dir():
        return Path(base, "stormbuffer")
    home = env.get("HOME") or env.get("USERPROFILE")
    cache = env.get("XDG_CACHE_HOME") or (str(Path(home, ".cache")) if home else "")
    return Path(cache, "stormbuffer", "run") if cache and Path(cache).is_absolute() else None


def runtime(env: Mapping[str, str], *, create: bool = False) -> Runtime | None:
    """The runtime directory (with `create`, created private when missing); None when it is missing
    or cannot be used safely."""
    directory = runtime_directory(env)
    if directory is None:
        return None
    found = Runtime(directory)
    if len(os.fsencode(found.socket)) > MAX_SOCKET_PATH:
        return None
    try:
        if create:  # its parent too: in the cache, that is Stormbuffer's private cache directory
            directory.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            directory.mkdir(mode=0o700, exist_ok=True)
        info = directory.lstat()
    except OSError:
        return None
    private = stat.S_ISDIR(info.st_mode) and not info.st_mode & 0o077
    return found if private and info.st_uid == os.getuid() else None


def idle_seconds(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(IDLE_ENV, DEFAULT_IDLE_S))
    except ValueError:
        return DEFAULT_IDLE_S
    return value if value > 0 else DEFAULT_IDLE_S


def install_identity(env: Mapping[str, str]) -> str:
    """This install and its daemon configuration: the version, the package's location, the
    interpreter and the idle time. A daemon answering with another identity is replaced."""
    package = Path(__file__).resolve().parents[1]
    return " ".join([PROTOCOL, __version__, str(package), os.path.realpath(sys.executable), repr(idle_seconds(env))])


def identity_record(env: Mapping[str, str]) -> dict[str, object]:
    """What a door outside Python needs to tell whether its `sbuf` is this install: the identity to
    present, the idle time it encodes, the directory of the interpreter `sbuf` scripts of this install
    name, and the package's `__init__.py` stamp (any upgrade or reinstall rewrites that file)."""
    package = Path(__file__).resolve().parents[1]
    stamp = (package / "__init__.py").stat()
    return {
        "install": install_identity(env),
        "idle_s": idle_seconds(env),
        "scripts": os.path.realpath(os.path.dirname(sys.executable)),
        "package": str(package),
        "stamp": [str(stamp.st_ino), str(stamp.st_size), str(stamp.st_mtime_ns)],
    }


def session_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: env[name] for name in SESSION_ENV if name in env}


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end (SO_PEERCRED, Linux); None where it cannot be known."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def same_user(sock: socket.socket) -> bool:
    uid = peer_uid(sock)
    return uid is not None and uid == os.getuid()


def encode_line(message: Mapping[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
