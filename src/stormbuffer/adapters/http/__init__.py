"""The local HTTP API (`sbuf serve`): a Starlette app over the core and the version-1 protocol.

`build_app(store, extra_routes)` makes the app; `StoreContext` is what every route works with (the
view, the selected store, the protocol session and the worker limits); `server.serve` runs it with
uvicorn on a loopback address.
"""

from .app import build_app, store_context
from .context import StoreContext

__all__ = ["StoreContext", "build_app", "store_context"]
