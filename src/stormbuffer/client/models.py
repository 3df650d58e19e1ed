"""Envelopes and results as the generated Pydantic models (`stormbuffer_models`)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

OPERATIONS = ("search", "context", "get", "remember", "update", "propose", "supersede", "archive")


class ProtocolFailure(Exception):
    """A failure envelope: `code` is one of the stable error codes, `message` its fixed text."""

    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"{operation}: {code}: {message}")
        self.operation = operation
        self.code = code
        self.message = message


def json_object(data: bytes) -> dict[str, Any]:
    """The JSON object `data` holds; ValueError when it holds something else."""
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ValueError("the answer is not a JSON object")
    return value


def result_model(operation: str) -> type[BaseModel]:
    """The model of one operation's result, e.g. `SearchResult` for `search`."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}")
    module = importlib.import_module(f"stormbuffer_models.{operation}_result_schema")
    model: type[BaseModel] = getattr(module, f"{operation.capitalize()}Result")
    return model


def parse_envelope(operation: str, envelope: Mapping[str, Any]) -> BaseModel:
    """The result model of a success envelope; `ProtocolFailure` for a failure envelope.

    The envelope is validated as a whole first (`stormbuffer_models.envelope_schema.Envelope`), so a
    malformed answer raises pydantic's `ValidationError`, never passes silently.
    """
    from stormbuffer_models.envelope_schema import Envelope, FailureEnvelope

    parsed = Envelope.model_validate(envelope).root
    if isinstance(parsed, FailureEnvelope):
        raise ProtocolFailure(parsed.operation, parsed.error.code.value, parsed.error.message)
    return result_model(operation).model_validate(parsed.result)
