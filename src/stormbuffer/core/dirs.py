"""The platform's data and cache directories, from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import StoreError


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
