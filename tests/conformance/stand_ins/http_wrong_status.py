"""`POST /v1/invoke/...` answers `not_found` with status 200 instead of 404."""

from wrap import serve


def mutate(_operation, status, body):
    return (200 if body.get("error", {}).get("code") == "not_found" else status), body


serve(mutate)
