"""The eight operations as methods, shared by the clients that speak every operation of version 1."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel


class Operations(ABC):
    """`search` … `archive`, each `call(operation, request)` with the keyword arguments as the request."""

    @abstractmethod
    def call(self, operation: str, request: Mapping[str, Any]) -> BaseModel:
        """The result model of `operation`; `ProtocolFailure` when the envelope reports a failure."""

    def search(self, **request: Any) -> BaseModel:
        """`SearchResult` (`.root` is the list of `SearchHit`)."""
        return self.call("search", request)

    def context(self, **request: Any) -> BaseModel:
        """`ContextResult`: blocks, the trust contract and the receipt."""
        return self.call("context", request)

    def get(self, **request: Any) -> BaseModel:
        """`GetResult` (`.root` is the `Record`)."""
        return self.call("get", request)

    def remember(self, **request: Any) -> BaseModel:
        """`RememberResult`: the proposal outcome of a new candidate."""
        return self.call("remember", request)

    def update(self, **request: Any) -> BaseModel:
        """`UpdateResult`: the proposal outcome of a replacement candidate."""
        return self.call("update", request)

    def propose(self, **request: Any) -> BaseModel:
        """`ProposeResult`: the proposal outcome of a full record."""
        return self.call("propose", request)

    def supersede(self, **request: Any) -> BaseModel:
        """`SupersedeResult`: the active replacement."""
        return self.call("supersede", request)

    def archive(self, **request: Any) -> BaseModel:
        """`ArchiveResult`: the archived record's new state."""
        return self.call("archive", request)
