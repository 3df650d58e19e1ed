"""The local credential: one random secret per user, in `<config>/stormbuffer/local-token`.

`<config>` is `$XDG_CONFIG_HOME`, else `~/.config`. The directory is made 0700 and the file 0600,
created whole or not at all (written under a unique name with `O_EXCL | O_NOFOLLOW`, then linked
into place, so two first uses agree on one secret). Reading checks that the directory and the file
belong to this user, that nobody else may read or write them, and that the file is not a link.
The secret never appears in an error message.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from stormbuffer.core.errors import StormbufferError

FILE_NAME = "local-token"
TOKEN_BYTES = 32
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # token_urlsafe(32)


class CredentialError(StormbufferError):
    """The credential file cannot be trusted or made; the message names the file, never the secret."""


def credential_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/stormbuffer`, else `$HOME/.config/stormbuffer`."""
    config = env.get("XDG_CONFIG_HOME")
    if not config:
        home = env.get("HOME") or env.get("USERPROFILE")
        if not home:
            raise CredentialError("could not determine the user configuration directory; set HOME")
        config = str(Path(home, ".config"))
    return Path(config, "stormbuffer")


def token_path(env: Mapping[str, str]) -> Path:
    return credential_dir(env) / FILE_NAME


def read_token(env: Mapping[str, str]) -> str | None:
    """The user's token, None when there is none yet; CredentialError when the file is not safe."""
    folder = credential_dir(env)
    try:
        _check_private(os.lstat(folder), "directory", folder)
    except FileNotFoundError:
        return None
    return _read(folder / FILE_NAME)


def ensure_token(env: Mapping[str, str]) -> str:
    """The user's token, made on first use."""
    folder = credential_dir(env)
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        status = os.lstat(folder)
        if stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid() and status.st_mode & 0o077:
            os.chmod(folder, 0o700)  # our own directory, made by hand: close it before the secret goes in
    _check_private(os.lstat(folder), "directory", folder)
    found = _read(folder / FILE_NAME)
    return found if found is not None else _create(folder)


def same_token(given: str, expected: str) -> bool:
    """Constant-time comparison of two tokens."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii"))


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symbolic link
        raise CredentialError(f"could not read the credential file {path.name}: it must be a regular file") from exc
    try:
        _check_private(os.fstat(fd), "file", path)
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _TOKEN.fullmatch(text):
        raise CredentialError(f"the credential file {path.name} is damaged; remove it and run `sbuf auth token`")
    return text


def _create(folder: Path) -> str:
    token = secrets.token_urlsafe(TOKEN_BYTES)
    partial = folder / f".{FILE_NAME}.{os.getpid()}.{secrets.token_hex(8)}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, (token + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(partial, folder / FILE_NAME)  # never replaces: a racing first use wins, and we read its token
        except FileExistsError:
            found = _read(folder / FILE_NAME)
            if found is None:
                raise CredentialError(f"could not create the credential file {FILE_NAME}") from None
            return found
    finally:
        partial.unlink(missing_ok=True)
    return token


def _check_private(status: os.stat_result, what: str, path: Path) -> None:
    wanted = stat.S_ISDIR if what == "directory" else stat.S_ISREG
    if not wanted(status.st_mode):
        raise CredentialError(f"the credential {what} {path.name} must be a real {what}, not a link or other file")
    if status.st_uid != os.geteuid():
        raise CredentialError(f"the credential {what} {path.name} belongs to another user")
    if status.st_mode & 0o077:
        raise CredentialError(
            f"the credential {what} {path.name} is open to other users; run `chmod go= {path.name}` on it"
        )
