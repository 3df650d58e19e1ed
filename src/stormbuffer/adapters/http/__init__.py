"""The local HTTP API (`sbuf serve`): a Starlette app over the core and the version-1 protocol.

- `build_app(store, bound, extra_routes)` makes the app. Extra routes (such as review pages) come
  after the API's routes and sit behind the same middleware: the loopback guard (Host, Origin,
  content type, body size), the request log and the JSON error answers.
- `StoreContext` is what every route works with: the view, the selected store and its scope, the
  protocol `Session`, and `read`/`write` to run core work on worker threads (writes one at a time,
  bounded in waiting). A route reaches it with `store_context(request)`.
- `server.serve(store, socket, extra_routes)` runs the app with uvicorn on a bound loopback socket.
"""

from .app import build_app
from .context import StoreContext, store_context

__all__ = ["StoreContext", "build_app", "store_context"]
