#!/usr/bin/env python3
"""Health check for an installed Stormbuffer: `sbuf` and `stormbuffer-mcp` found on PATH and working.

Usage: python3 .agents/skills/stormbuffer-memory/verify.py

Everything runs in a temporary home and project, so no existing store is read or changed:
1. `sbuf --version` answers;
2. `sbuf --project init` initializes a project store (it also prepares the embedding model in the
   temporary cache, which can take several seconds);
3. `sbuf --project invoke search` returns a successful version-1 envelope;
4. `stormbuffer-mcp --stdio --project` completes the MCP handshake and lists the five tools, then
   exits cleanly when its stdin closes.
Prints one success line and exits 0, or prints the failing check on stderr and exits 1.
Uses the Python standard library only.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

TOOLS = ("memory_recall", "memory_get", "memory_remember", "memory_update", "memory_forget")
TIMEOUT = 60  # seconds per command; initialization may build the embedding model
SUCCESS = "Stormbuffer health check passed: sbuf and stormbuffer-mcp are ready"


class CheckFailed(Exception):
    """One health check did not pass; the message says which."""


def find(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise CheckFailed(f"{name} was not found on PATH")
    return path


def isolated_environment(root: Path) -> dict[str, str]:
    """This environment with a throwaway home, data and cache directory."""
    env = dict(os.environ)
    home = root / "home"
    env.update(
        HOME=str(home),
        USERPROFILE=str(home),
        XDG_DATA_HOME=str(root / "data"),
        XDG_CACHE_HOME=str(root / "cache"),
    )
    for directory in (home, root / "data", root / "cache"):
        directory.mkdir()
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str], stdin: str = "") -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, input=stdin, text=True, capture_output=True, timeout=TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{' '.join(argv)} did not finish within {TIMEOUT} seconds") from None
    if done.returncode != 0:
        diagnostic = done.stderr.strip() or done.stdout.strip() or "no diagnostic output"
        raise CheckFailed(f"{' '.join(argv)} failed: {diagnostic}")
    return done.stdout


def check_invoke(sbuf: str, cwd: Path, env: dict[str, str]) -> None:
    request = json.dumps({"version": 1, "query": "health check"}) + "\n"
    output = run([sbuf, "--project", "invoke", "search"], cwd, env, request)
    try:
        envelope = json.loads(output)
    except json.JSONDecodeError:
        envelope = None
    if not isinstance(envelope, dict) or envelope.get("version") != 1 or envelope.get("ok") is not True:
        raise CheckFailed("sbuf returned an invalid JSON protocol envelope")


def check_mcp(adapter: str, cwd: Path, env: dict[str, str]) -> None:
    """Initialize, list the tools, then close stdin and expect a clean exit."""
    argv = [adapter, "--stdio", "--project"]
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "stormbuffer-health", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    command = " ".join(argv)
    try:
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    except OSError as exc:
        raise CheckFailed(f"{command} failed: {exc.strerror}") from None
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def read_lines() -> None:
        for line in process.stdout or ():
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read_lines, daemon=True).start()
    answers: list[str] = []
    try:
        process.stdin.write("".join(json.dumps(message) + "\n" for message in messages))
        process.stdin.flush()
        while len(answers) < 2 and (line := lines.get(timeout=TIMEOUT)) is not None:
            answers.append(line)
        process.stdin.close()
        code = process.wait(timeout=TIMEOUT)
    except (queue.Empty, subprocess.TimeoutExpired):
        process.kill()
        process.wait()
        raise CheckFailed(f"{command} did not answer within {TIMEOUT} seconds") from None
    except OSError:  # the adapter exited before reading its input
        code = process.wait()
    if code != 0:
        raise CheckFailed(f"{command} failed: {process.stderr.read().strip() or 'no diagnostic output'}")
    try:
        responses = [json.loads(answer) for answer in answers]
    except json.JSONDecodeError:
        raise CheckFailed("stormbuffer-mcp returned an invalid protocol response") from None
    if [response.get("id") for response in responses] != [1, 2] or any("result" not in r for r in responses):
        raise CheckFailed("stormbuffer-mcp returned an invalid protocol response")
    listed = {tool.get("name") for tool in responses[1]["result"].get("tools", [])}
    missing = sorted(set(TOOLS) - listed)
    if missing:
        raise CheckFailed(f"stormbuffer-mcp is missing tools: {', '.join(missing)}")


def main() -> int:
    try:
        sbuf = find("sbuf")
        adapter = find("stormbuffer-mcp")
        with tempfile.TemporaryDirectory(prefix="stormbuffer-health-") as temporary:
            root = Path(temporary)
            env = isolated_environment(root)
            project = root / "project"
            project.mkdir()
            run([sbuf, "--version"], project, env)
            run([sbuf, "--project", "init"], project, env)
            check_invoke(sbuf, project, env)
            check_mcp(adapter, project, env)
    except (CheckFailed, OSError) as exc:
        print(f"Stormbuffer health check failed: {exc}", file=sys.stderr)
        return 1
    print(SUCCESS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
