"""The adapter loads the SDK's low-level server without the re-exports of its package `__init__` files."""

from __future__ import annotations

import json
import subprocess
import sys

from stormbuffer.adapters.mcp import sdk

from .conftest import TIMEOUT

SERVER_MODULES = """
import json, sys
from stormbuffer.adapters.mcp.sdk import defer_package_inits
defer_package_inits()
import stormbuffer.adapters.mcp.server
loaded = sorted(name for name in sys.modules if name == "mcp" or name.startswith("mcp."))
"""


def run_python(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", timeout=TIMEOUT, check=False
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return json.loads(done.stdout)


def test_the_server_loads_without_the_client_or_the_high_level_server() -> None:
    loaded = run_python(SERVER_MODULES + "print(json.dumps(loaded))")
    assert isinstance(loaded, list)
    assert "mcp.server.lowlevel.server" in loaded
    assert not [name for name in loaded if name.startswith(("mcp.client", "mcp.server.mcpserver"))]


def test_a_name_from_a_deferred_init_is_still_found() -> None:
    found = run_python(
        SERVER_MODULES
        + """
from mcp import ClientSession
from mcp.server import MCPServer
import mcp, mcp.server
print(json.dumps([
    mcp.ClientSession is ClientSession and ClientSession.__module__ == "mcp.client.session",
    mcp.server.MCPServer is MCPServer,
    "mcp.client" in sys.modules,
    "__getattr__" in vars(mcp) or "__getattr__" in vars(mcp.server),
    hasattr(mcp, "no_such_name"),
]))
"""
    )
    assert found == [True, True, True, False, False]


def test_deferring_after_the_sdk_was_imported_changes_nothing() -> None:
    import mcp  # this process imports the client for the other tests

    sdk.defer_package_inits()
    assert sys.modules["mcp"] is mcp
    assert "__getattr__" not in vars(mcp)
