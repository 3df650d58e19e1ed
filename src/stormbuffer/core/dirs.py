"""The platform's data and cache directories, from the environment, and private directories.

Everything Stormbuffer keeps (stores, the model cache, projections, drafts, the daemon's runtime
directory) lives in directories only its user may enter (0700) and in files only its user may read
(0600), whatever the umask says. A directory at a name others could create first (in the shared
temporary directory) is used only when it is a real directory, this user's own and closed to others.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreError

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


@dataclass(frozen=True)
class PlatformDirs:
    data: Path
    cache: Path

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> PlatformDirs:
        home = env.get("HOME") or env.get("USERPROFILE")
        if not home:
            raise StoreError("could not determine the user data directory; set HOME or the platform equivalent")
        data = env.get("XDG_DATA_HOME") or str(Path(home, ".local", "share"))
        cache = env.get("XDG_CACHE_HOME") or str(Path(home, ".cache"))
        return cls(Path(data), Path(cache))

    @property
    def shared_cache(self) -> Path:
        """The cache every store shares: the model and the global projection."""
        return self.cache / "stormbuffer"


def make_private(directory: Path) -> Path:
    """Create `directory` (0700; missing parents with the umask's modes) unless it exists."""
    directory.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    return directory


def is_private(directory: Path) -> bool:
    """Whether `directory` is a real directory (not a symbolic link), this user's own, closed to others."""
    try:
        info = directory.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077


def claim_private(directory: Path, what: str, instead: str) -> Path:
    """`directory`, created 0700 when missing, else used only when `is_private`: a directory at a
    name another user could have made first (in the shared temporary directory). Raises StoreError
    naming `what` (never the path) and the variables to set `instead` when it is a link, another
    user's, or open to others."""
    try:
        directory.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    if not is_private(directory):
        raise StoreError(
            f"refusing the {what}: it is a symbolic link, belongs to another user or is open to others; "
            f"remove it, or set {instead} to a directory of your own"
        )
    return directory
