"""`HttpClient`: `POST /v1/invoke/{operation}` of a running `sbuf serve`, over one kept connection."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
from pydantic import BaseModel

from .models import ProtocolFailure, json_object, parse_envelope
from .operations import Operations

DEFAULT_URL = "http://127.0.0.1:7342"


@dataclass(frozen=True)
class HttpExchange:
    """One request to the server and everything that came back."""

    operation: str
    body: bytes
    status: int
    content_type: str
    content: bytes

    def envelope(self) -> dict[str, Any]:
        """The JSON object of the answer; ValueError when there is none."""
        return json_object(self.content)


class HttpClient(Operations):
    """Posts each request to `<url>/v1/invoke/<operation>` (e.g. `http://127.0.0.1:7342`); use it as a
    context manager, or `close()` it. The server's view decides the store; proxies from the
    environment are never used (the server is on loopback).

    Each request carries `Authorization: Bearer <token>`: `token` when given, else the user's local
    credential (`sbuf auth token`), read from its file under the configuration directory of `env`
    (default: this process's environment). Without either, the server answers 401."""

    def __init__(
        self, url: str = DEFAULT_URL, *, token: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
    ) -> None:  # fmt: skip
        from stormbuffer.auth.credential import read_token

        self.url = url.rstrip("/")
        token = token if token is not None else read_token(os.environ if env is None else env)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx2.Client(base_url=self.url, timeout=timeout, trust_env=False, headers=headers)

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def exchange(self, operation: str, data: bytes, headers: Mapping[str, str] | None = None) -> HttpExchange:
        """Post raw bytes as the body (`Content-Type: application/json`, plus `headers`) and return
        the answer as it came."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        answer = self._http.post(f"/v1/invoke/{operation}", content=data, headers=sent)
        return HttpExchange(operation, data, answer.status_code, answer.headers.get("content-type", ""),
                            answer.content)  # fmt: skip

    def envelope(self, operation: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """The envelope answering `request` (`version` 1 is added when missing), as parsed JSON."""
        body = {"version": 1, **request}
        return self.exchange(operation, json.dumps(body, ensure_ascii=False).encode("utf-8")).envelope()

    def call(self, operation: str, request: Mapping[str, Any]) -> BaseModel:
        """The result model of `operation`; `ProtocolFailure` when the envelope reports a failure, or
        when the server refused the request before the protocol saw it (the API's error body, e.g.
        401 `unauthorized` or a team server's 403 `permission_denied`)."""
        answer = self.envelope(operation, request)
        error = answer.get("error")
        if "ok" not in answer and isinstance(error, dict):
            raise ProtocolFailure(operation, str(error.get("code")), str(error.get("message")))
        return parse_envelope(operation, answer)
