"""Debian packages the tests use, installed on first use in a test run.

`program(package)` returns the path of the program a package provides. When any listed package is
missing, all missing ones are installed once per run (`apt-get update` and `apt-get install`, as root
or through `sudo -n`); when that is impossible, the tests that need a package fail, naming the
packages and the command that installs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache

import pytest

# package -> the program the tests run from it (a name on PATH or an absolute path)
PACKAGES = {
    "chromium": "/usr/bin/chromium",  # the review page in a headless browser (tests/web)
    "chromium-driver": "/usr/bin/chromedriver",  # Selenium's driver for it (tests/web)
    "curl": "curl",  # the HTTP API's documented examples (tests/http)
    "strace": "strace",  # a secret scan opens no socket (tests/unit)
    "man-db": "man",  # the man pages render (tests/cli)
    "zsh": "zsh",  # the zsh completion script parses (tests/cli)
    "fish": "fish",  # fish completes a subcommand (tests/cli)
    "systemd": "systemd-analyze",  # the systemd user unit verifies (tests/cli)
}
APT_TIMEOUT = 900  # seconds; a cold Chromium download is the slow part
LOCK_TIMEOUT = 300  # seconds to wait for another apt or dpkg run on the machine


def _located(package: str) -> str | None:
    return shutil.which(PACKAGES[package])


@cache
def _install_missing() -> str | None:
    """Install every missing package once; None on success, else why it could not be done."""
    missing = [package for package in PACKAGES if _located(package) is None]
    if not missing:
        return None
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if prefix and shutil.which("sudo") is None:
        return "not root, and sudo is not installed"
    apt = [*prefix, "apt-get", "-qq", "-o", f"DPkg::Lock::Timeout={LOCK_TIMEOUT}"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["update"], ["install", "-y", *missing]):
        try:
            done = subprocess.run(
                [*apt, *step], env=env, capture_output=True, text=True, timeout=APT_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"`apt-get {step[0]}` did not run: {exc}"
        if done.returncode != 0:
            return f"`apt-get {step[0]}` failed: {(done.stderr or done.stdout).strip()[-2000:]}"
    return None


def program(package: str) -> str:
    """The path of the program `package` provides, installing the missing packages on first use."""
    found = _located(package)
    if found is None:
        problem = _install_missing()
        found = _located(package)
        if found is None:
            missing = [name for name in PACKAGES if _located(name) is None]
            pytest.fail(
                f"this test needs the Debian package {package!r}, which is not installed"
                f" ({problem or 'installing it did not provide ' + PACKAGES[package]}); "
                f"install the missing packages with: sudo apt-get install -y {' '.join(missing)}",
                pytrace=False,
            )
    return found
