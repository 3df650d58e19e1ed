"""The review page served by `sbuf serve` at `/`: inbox, search, records and health, in the browser.

Server-rendered (Jinja2) over the same core as every other door; reading works without JavaScript,
and `static/review.js` only adds keyboard shortcuts and bulk selection. `routes()` gives the routes
that the local HTTP app mounts.
"""

from .routes import routes

__all__ = ["routes"]
