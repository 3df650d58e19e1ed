"""`InvokeClient`: one `sbuf [view] invoke <operation>` process per request."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .models import json_object, parse_envelope
from .operations import Operations

VIEWS = ("global", "project", "local")


@dataclass(frozen=True)
class Exchange:
    """One run of the command: what went in and everything that came out."""

    operation: str
    stdin: bytes
    stdout: bytes
    stderr: bytes
    returncode: int

    def envelope(self) -> dict[str, Any]:
        """The JSON object on standard output; ValueError when there is none."""
        return json_object(self.stdout)


class InvokeClient(Operations):
    """Runs `command --<view> invoke <operation>` (e.g. `sbuf --project invoke search`) per request.

    `command` is the program and its leading arguments (default `sbuf`); `cwd` selects the project
    for the project and local views; `env` replaces the environment of the process when given.
    """

    def __init__(
        self,
        command: Sequence[str] = ("sbuf",),
        *,
        view: str = "global",
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:
        if view not in VIEWS:
            raise ValueError(f"view must be one of {', '.join(VIEWS)}")
        self.command = list(command)
        self.view = view
        self.cwd = cwd
        self.env = None if env is None else dict(env)
        self.timeout = timeout

    def exchange(self, operation: str, data: bytes) -> Exchange:
        """Send raw bytes on standard input and return what the process did."""
        done = subprocess.run(
            [*self.command, f"--{self.view}", "invoke", operation],
            input=data, capture_output=True, cwd=self.cwd, env=self.env, timeout=self.timeout, check=False,
        )  # fmt: skip
        return Exchange(operation, data, done.stdout, done.stderr, done.returncode)

    def envelope(self, operation: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope answering `request` (`version` 1 is added when missing), as parsed JSON."""
        body = {"version": 1, **request}
        return self.exchange(operation, json.dumps(body, ensure_ascii=False).encode("utf-8")).envelope()

    def call(self, operation: str, request: Mapping[str, Any]) -> BaseModel:
        """The result model of `operation`; `ProtocolFailure` when the envelope reports a failure."""
        return parse_envelope(operation, self.envelope(operation, request))
