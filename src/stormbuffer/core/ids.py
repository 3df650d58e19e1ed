"""Record identifiers: any non-nil UUID on input, canonical lowercase text on output, UUIDv7 for new ids."""

from __future__ import annotations

import os
import time
import uuid

_NIL = uuid.UUID(int=0)


def parse_record_id(text: str) -> str:
    """Return the canonical form of a record id or raise ValueError with the reason."""
    if not text or text != text.strip():
        raise ValueError("must be a non-empty UUID without surrounding whitespace")
    try:
        value = uuid.UUID(text)
    except ValueError:
        raise ValueError("must be a valid UUID") from None
    if value == _NIL:
        raise ValueError("must not be the nil UUID")
    return str(value)


def new_record_id() -> str:
    """A new UUIDv7: 48 bits of Unix milliseconds, then random bits."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def is_canonical_uuid(text: str) -> bool:
    try:
        return parse_record_id(text) == text
    except ValueError:
        return False
