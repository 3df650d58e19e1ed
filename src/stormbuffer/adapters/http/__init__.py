"""The local HTTP API (`sbuf serve`): a Starlette app over the core and the version-1 protocol.

- `build_app(store, bound, credentials, extra_routes)` makes the app. Extra routes (such as review
  pages) come after the API's routes and sit behind the same middleware: the loopback guard (Host,
  Origin, content type, body size), the credential check (`access`), the request log and the JSON
  error answers.
- `Credentials` is what the server accepts: the user's token (`sbuf auth token`) and the review
  page's session; `access.allow(request, operation)` is the authorization every route asks first.
- `StoreContext` is what every route works with: the view, the selected store and its scope, the
  protocol `Session`, and `read`/`write` to run core work on worker threads (writes one at a time,
  bounded in waiting). A route reaches it with `store_context(request)`.
- `server.serve(store, socket, credentials, extra_routes)` runs the app with uvicorn on a bound
  loopback socket, with a header timeout and a connection cap (`connections`).
"""

from .access import Credentials
from .app import build_app
from .context import StoreContext, store_context

__all__ = ["Credentials", "StoreContext", "build_app", "store_context"]
