"""A search answer grows past the 262144-byte output bound (its hits repeated)."""

from wrap import compact, invoke

BOUND = 262144


def mutate(operation, _request, envelope):
    hits = envelope.get("result")
    if operation == "search" and envelope.get("ok") is True and hits:
        envelope["result"] = hits * (BOUND // len(compact(hits)) + 2)
    return envelope


invoke(mutate)
