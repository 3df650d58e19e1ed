"""The HTTP API (`sbuf serve`, `sbuf serve --team`): a Starlette app over the core and the version-1 protocol.

- `build_app(store, bound, credentials, extra_routes, proxy, team)` makes the app. Extra routes (such as review
  pages) come after the API's routes and sit behind the same middleware: the loopback guard (Host,
  Origin, content type, body size), the credential check (`access`), the request log and the JSON
  error answers.
- `Credentials` is what the server accepts: the user's token (`sbuf auth token`) and the review
  page's session, or on a team server the store's team tokens; `access.allow(request, operation)`
  is the authorization every route asks first. A team server also keeps an audit trail (`audit`),
  holds each token to a rate (`ratelimit`), may sit behind an HTTPS proxy (`proxy`), and is run as
  its `TeamSettings` say (`team`: rate, host names, public URL, audit retention).
- `StoreContext` is what every route works with: the view, the selected store and its scope, the
  protocol `Session`, and `read`/`write` to run core work on worker threads (writes one at a time,
  bounded in waiting). A route reaches it with `store_context(request)`.
- `server.loopback_server(store, socket, credentials, extra_routes, tls, proxy, team).run([socket])`
  runs the app with uvicorn on a bound socket (loopback unless a team server's TLS or proxy),
  with a header timeout and a connection cap (`connections`).
"""

from .access import Credentials
from .app import build_app
from .context import StoreContext, store_context

__all__ = ["Credentials", "StoreContext", "build_app", "store_context"]
