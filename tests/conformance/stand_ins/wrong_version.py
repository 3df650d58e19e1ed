"""Envelopes say version 2."""

from wrap import invoke


def mutate(_operation, _request, envelope):
    envelope["version"] = 2
    return envelope


invoke(mutate)
