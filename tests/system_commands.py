"""System programs some tests drive, and the Debian package that provides each."""

from __future__ import annotations

import shutil

DEBIAN_PACKAGES = {"man": "man-db", "zsh": "zsh", "fish": "fish", "systemd-analyze": "systemd"}


def system_command(name: str) -> str:
    """The path of system program `name`; fails naming the package to install when it is missing."""
    path = shutil.which(name)
    assert path, f"{name} is not installed: apt-get install {DEBIAN_PACKAGES[name]}"
    return path
