"""Failure messages over HTTP name the server's working directory."""

import os

from wrap import serve


def mutate(_operation, status, body):
    if body.get("ok") is False:
        body["error"]["message"] += f" (in {os.getcwd()})"
    return status, body


serve(mutate)
