"""Errors of archive handling and import planning (messages never contain host paths or record text)."""

from __future__ import annotations

from ..core.errors import InvalidInput, StormbufferError


class ArchiveInvalid(InvalidInput):
    """The archive is malformed, unsafe, too large, or holds an invalid record."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"export archive is invalid: {detail}")
        self.detail = detail


class ImportCollision(StormbufferError):
    """An archive record collides with the store and the chosen policy forbids it (or none was chosen)."""
