"""Record scopes: `global` or `project:<name>`."""

from __future__ import annotations

GLOBAL = "global"


def parse_scope(text: str) -> str:
    """Return the scope unchanged when valid, else raise ValueError with the reason."""
    if not text or text != text.strip():
        raise ValueError("must be a non-empty scope without surrounding whitespace")
    if text == GLOBAL:
        return text
    if not text.startswith("project:"):
        raise ValueError("must be `global` or use the `project:<uuid>` form")
    name = text[len("project:") :]
    if not name or any(ch.isspace() or ch == ":" or _is_control(ch) for ch in name):
        raise ValueError("project scope names must be non-empty and contain no whitespace or colons")
    return text


def is_valid_scope(text: str) -> bool:
    try:
        parse_scope(text)
    except ValueError:
        return False
    return True


def project_scope(project_id: str) -> str:
    return f"project:{project_id}"


def _is_control(ch: str) -> bool:
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0
