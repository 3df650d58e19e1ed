"""A loopback HTTP file server for download tests: Range requests, and ways to misbehave."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Request:
    path: str
    query: str
    range: str | None
    bytes_sent: int = 0


@dataclass
class Loopback:
    """Serves `files` (name -> bytes) on 127.0.0.1 at an ephemeral port.

    `honour_range=False` answers every request with the whole file (status 200); `cut_after[name] = n`
    announces the full length but sends only `n` bytes and closes the connection.
    """

    files: dict[str, bytes]
    honour_range: bool = True
    cut_after: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/repo/resolve/rev"

    def __enter__(self) -> Loopback:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler_for(site: Loopback) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server naming convention
            url = urlsplit(self.path)
            name = url.path.removeprefix("/repo/resolve/rev/")
            request = Request(name, url.query, self.headers.get("Range"))
            site.requests.append(request)
            data = site.files.get(name)
            if data is None:
                self.send_error(404)
                return
            start = 0
            if request.range and site.honour_range:
                start = int(request.range.removeprefix("bytes=").rstrip("-"))
                if start >= len(data):
                    self.send_error(416)
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if name in site.cut_after:
                body = body[: site.cut_after[name]]
                self.close_connection = True
            self.wfile.write(body)
            request.bytes_sent = len(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class signature
            """Keep test output quiet."""

    return Handler
