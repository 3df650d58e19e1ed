"""Failure messages name the working directory."""

import os

from wrap import invoke


def mutate(_operation, _request, envelope):
    if envelope.get("ok") is False:
        envelope["error"]["message"] += f" (in {os.getcwd()})"
    return envelope


invoke(mutate)
