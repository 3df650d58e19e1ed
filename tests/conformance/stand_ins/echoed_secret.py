"""`secret_detected` repeats the credential it found."""

from wrap import invoke


def mutate(_operation, request, envelope):
    if envelope.get("error", {}).get("code") == "secret_detected":
        words = " ".join(str(value) for value in request.values()).split()
        envelope["error"]["message"] += ": " + next(word for word in words if word.startswith("ghp_"))
    return envelope


invoke(mutate)
