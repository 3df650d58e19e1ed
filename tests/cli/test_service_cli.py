"""`sbuf service`: the systemd user unit and the launchd agent that run `sbuf serve`, checked by
systemd-analyze and plistlib, and the unit's command line run for real."""

from __future__ import annotations

import json
import os
import plistlib
import re
import shlex
import signal
import socket
import subprocess
import urllib.request
from importlib import resources
from pathlib import Path

from tests.helpers import SBUF, Sandbox
from tests.system import program

MAN_PAGES = Path(str(resources.files("stormbuffer").joinpath("share", "man")))
LISTENING = re.compile(r"Stormbuffer local API listening address=(\S+)")


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def exec_start(unit: str) -> list[str]:
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_systemd_analyze_verifies_the_unit(sandbox: Sandbox, tmp_path: Path) -> None:
    unit = tmp_path / "stormbuffer-serve.service"
    unit.write_text(ok(sandbox.sbuf("service", "print", "systemd")))
    # the unit's Documentation= names the shipped man pages: let `man` find them as an install would
    (tmp_path / "man").mkdir()
    (tmp_path / "man" / "man1").symlink_to(MAN_PAGES)
    env = os.environ | {"MANPATH": str(tmp_path / "man")}
    done = subprocess.run([program("systemd"), "verify", str(unit)], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert exec_start(unit.read_text()) == [str(SBUF), "--global", "serve", "--bind", "127.0.0.1", "--port", "7342"]
    assert "WorkingDirectory" not in unit.read_text()
    assert "StandardOutput=null" in unit.read_text()  # the sign-in address holds the credential

    broken = tmp_path / "broken.service"  # the check can fail: a unit whose program is missing
    broken.write_text(unit.read_text().replace(str(SBUF), str(tmp_path / "no-such-sbuf")))
    failed = subprocess.run([program("systemd"), "verify", str(broken)], env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    assert failed.returncode != 0


def test_the_units_command_serves_the_store(sandbox: Sandbox) -> None:
    ok(sandbox.sbuf("init"))
    port = free_port()
    argv = exec_start(ok(sandbox.sbuf("service", "print", "systemd", "--port", str(port))))
    token = ok(sandbox.sbuf("auth", "token")).strip()
    server = subprocess.Popen(argv, cwd=sandbox.base, env=sandbox.env, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if match := LISTENING.search(line):
                break
        assert match is not None and match.group(1) == f"127.0.0.1:{port}"
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/records",
                                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200 and json.loads(response.read()) == []
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0


def test_the_launchd_agent_is_a_valid_property_list(sandbox: Sandbox) -> None:
    agent = plistlib.loads(ok(sandbox.sbuf("--project", "service", "print", "launchd", "--port", "7400")).encode())
    assert agent["Label"] == "dev.stormbuffer.serve"
    assert agent["ProgramArguments"] == [str(SBUF), "--project", "serve", "--bind", "127.0.0.1", "--port", "7400"]
    assert agent["WorkingDirectory"] == str(sandbox.cwd)  # a project view finds its store from there
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["StandardErrorPath"].endswith("/Library/Logs/stormbuffer-serve.log")
    assert agent["StandardOutPath"] == "/dev/null"  # the sign-in address holds the credential


def test_install_writes_the_unit_once_and_says_how_to_start_it(sandbox: Sandbox) -> None:
    config = sandbox.base / "config"
    env = sandbox.env_with(XDG_CONFIG_HOME=str(config))
    installed = ok(sandbox.sbuf("service", "install", "systemd", env=env))
    unit = config / "systemd" / "user" / "stormbuffer-serve.service"
    assert unit.read_text() == ok(sandbox.sbuf("service", "print", "systemd"))
    assert "systemctl --user enable --now stormbuffer-serve.service" in installed
    again = sandbox.sbuf("service", "install", "systemd", "--port", "7400", env=env)
    assert again.returncode == 1
    assert again.stderr == "error: stormbuffer-serve.service already exists; pass --force to replace it\n"
    ok(sandbox.sbuf("service", "install", "systemd", "--port", "7400", "--force", env=env))
    assert exec_start(unit.read_text())[-1] == "7400"


def test_a_service_never_binds_beyond_loopback(sandbox: Sandbox) -> None:
    refused = sandbox.sbuf("service", "print", "systemd", "--bind", "0.0.0.0")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("error: serve only accepts loopback addresses")
