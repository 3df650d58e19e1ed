"""A request naming another host is answered as if it named the server (no DNS-rebinding guard)."""

from wrap import serve

serve(lambda _operation, status, body: (status, body), host=False)
