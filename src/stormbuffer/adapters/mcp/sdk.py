"""Loading the MCP SDK's low-level server without the re-exports of its package `__init__` files.

`import mcp.server.stdio` first runs `mcp/__init__.py` and `mcp/server/__init__.py`, which import
the SDK's client, its high-level server and their HTTP stack: over a quarter of the adapter's start
time, for modules a stdio server never uses. `defer_package_inits` registers those two packages
with their `__init__` not yet run: their submodules import as usual, and the first lookup of a
name the `__init__` would define (`from mcp import ClientSession`) runs it then, through the
module `__getattr__` hook of PEP 562, so nothing that needs the re-exports misses them.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from functools import partial
from types import ModuleType

PACKAGES = ("mcp", "mcp.server")
_HOOK = "__getattr__"

_lock = threading.RLock()


def defer_package_inits() -> None:
    """Register `PACKAGES` as deferred packages, unless the SDK is already imported."""
    if PACKAGES[0] in sys.modules:
        return
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations is not None
        package = importlib.util.module_from_spec(spec)
        package.__dict__[_HOOK] = partial(_initialized_attribute, package)
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, package)


def _initialized_attribute(package: ModuleType, name: str) -> object:
    """Run the package's `__init__` (once, whichever thread asks first), then look `name` up."""
    with _lock:
        hook = package.__dict__.get(_HOOK)
        if isinstance(hook, partial) and hook.func is _initialized_attribute:
            del package.__dict__[_HOOK]
            assert package.__spec__ is not None and package.__spec__.loader is not None
            package.__spec__.loader.exec_module(package)
    return getattr(package, name)
