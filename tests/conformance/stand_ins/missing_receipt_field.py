"""The context receipt loses its `budget`."""

from wrap import invoke


def mutate(operation, _request, envelope):
    if operation == "context" and envelope.get("ok") is True:
        del envelope["result"]["receipt"]["budget"]
    return envelope


invoke(mutate)
