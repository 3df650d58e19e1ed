"""`not_found` is reported as `invalid_state`."""

from wrap import invoke


def mutate(_operation, _request, envelope):
    if envelope.get("error", {}).get("code") == "not_found":
        envelope["error"]["code"] = "invalid_state"
    return envelope


invoke(mutate)
