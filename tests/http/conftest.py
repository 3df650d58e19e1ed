"""A real `sbuf serve` on an ephemeral loopback port, driven by a real HTTP client.

Each test module starts its server once (`served`). Every response the client sees is checked
against the OpenAPI document the server publishes: the operation is found by method and path
template, the response by status (else `default`), and the JSON body validated with the schemas
embedded in the document.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from stormbuffer.auth.credential import read_token
from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from tests.helpers import SBUF, Sandbox, link_tree, record_markdown

TIMEOUT = 60.0  # seconds: a guard against a hung server, never a speed assertion
LISTENING = re.compile(r"Stormbuffer local API listening address=(\S+)")
DOCUMENT = "urn:stormbuffer:openapi"
SECRET = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6"  # planted in a record; must never come back in an error


class Schemas:
    """Validation of response bodies against the OpenAPI document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.registry = Registry().with_resource(DOCUMENT, DRAFT202012.create_resource(document))
        self.templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path) for path in document["paths"]
        ]

    def schema_for(self, method: str, path: str, status: int) -> dict[str, Any]:
        if (method, path, status) == ("GET", "/openapi.json", 200):  # the document does not describe itself
            return {"type": "object", "required": ["openapi", "paths", "components"]}
        for pattern, template in self.templates:
            operation = self.document["paths"][template].get(method.lower())
            if pattern.match(path) and operation is not None:
                responses = operation["responses"]
                response = responses.get(str(status), responses["default"])
                return dict(response["content"]["application/json"]["schema"])
        return {"$ref": "#/components/schemas/ErrorResponse"}  # no route, or not this method

    def problems(self, schema: dict[str, Any], instance: Any) -> list[str]:
        """Where `instance` breaks `schema`, a schema whose references point into the document."""
        rooted = json.loads(json.dumps(schema).replace('"#/components/', f'"{DOCUMENT}#/components/'))
        return [error.message for error in Draft202012Validator(rooted, registry=self.registry).iter_errors(instance)]

    def check(self, method: str, path: str, status: int, body: Any) -> None:
        problems = self.problems(self.schema_for(method, path, status), body)
        assert not problems, (method, path, status, problems[:3])


@dataclass
class Server:
    """One running `sbuf serve` and the sandbox it serves."""

    box: Sandbox
    process: subprocess.Popen[str]
    address: str
    log: list[str] = field(default_factory=list)
    schemas: Schemas | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.address}"

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    @property
    def scope(self) -> str:
        text = (self.box.project_root / "store.toml").read_text(encoding="utf-8")
        return "project:" + re.search(r'project_id = "([^"]+)"', text).group(1)  # type: ignore[union-attr]

    @property
    def token(self) -> str:
        """The sandbox user's credential, which the server made on start."""
        token = read_token(self.box.env)
        assert token is not None
        return token

    def client(self, *, token: bool = True, headers: dict[str, str] | None = None, **kwargs: Any) -> httpx2.Client:
        """A client whose every response is checked against the OpenAPI document; it sends the
        user's credential unless `token=False`, and `headers`."""
        headers = {**({"Authorization": f"Bearer {self.token}"} if token else {}), **(headers or {})}
        return httpx2.Client(base_url=self.base_url, timeout=TIMEOUT, trust_env=False, headers=headers,
                             event_hooks={"response": [self._check]}, **kwargs)  # fmt: skip

    def _check(self, response: httpx2.Response) -> None:
        response.read()
        assert self.schemas is not None
        assert not any(name.lower().startswith("access-control-") for name in response.headers)  # never CORS
        path = response.request.url.path
        if response.headers.get("content-type") == "text/html; charset=utf-8" and not path.startswith("/v1/"):
            assert "script-src 'self'" in response.headers["content-security-policy"]  # the review page
            return
        assert response.headers.get("content-type") == "application/json", response.headers
        if response.request.method == "HEAD":
            assert response.content == b""
            return
        self.schemas.check(response.request.method, response.request.url.path, response.status_code, response.json())

    def write(self, record_id: str, **fields: Any) -> Path:
        """A canonical record file written by hand (agent-readable unless `access` says otherwise)."""
        fields.setdefault("access", "agent")
        path = self.box.project_root / "records" / f"{record_id}.md"
        path.write_text(record_markdown(record_id, self.scope, **fields), encoding="utf-8")
        return path

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout=TIMEOUT)
        return code


def start(box: Sandbox, *args: str, view: str = "--project", **popen: Any) -> Server:
    """`sbuf <view> serve --port 0 <args>` in the sandbox, once it listens (`popen`: more arguments
    of `subprocess.Popen`)."""
    process = subprocess.Popen(
        [str(SBUF), view, "serve", "--port", "0", *args], cwd=box.cwd, env=box.env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
        **popen,
    )  # fmt: skip
    assert process.stderr is not None
    log: list[str] = []
    address = None
    timer = threading.Timer(TIMEOUT, process.kill)
    timer.start()
    try:
        for line in process.stderr:
            log.append(line)
            found = LISTENING.search(line)
            if found:
                address = found.group(1)
                break
    finally:
        timer.cancel()
    assert address is not None, "".join(log)
    server = Server(box, process, address, log)
    threading.Thread(target=_drain, args=(process, log), daemon=True).start()
    with httpx2.Client(base_url=server.base_url, trust_env=False, timeout=TIMEOUT) as client:
        server.schemas = Schemas(client.get("/openapi.json").json())
    return server


def _drain(process: subprocess.Popen[str], log: list[str]) -> None:
    assert process.stderr is not None
    for line in process.stderr:
        log.append(line)


def sandbox_with_stores(base: Path, models: Path | None) -> Sandbox:
    """Initialized global and project stores; the model cache is linked in when given."""
    box = Sandbox.create(base)
    if models is not None:
        link_tree(models, base / "cache" / "stormbuffer" / "models")
    dirs = PlatformDirs.from_environ(box.env)
    for view in (View.GLOBAL, View.PROJECT):
        initialize_store(resolve_store(view, box.cwd, dirs))
    return box


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Server]:  # noqa: F811
    """A server for this module's tests: the project view of a fresh sandbox, with the model."""
    server = start(sandbox_with_stores(tmp_path_factory.mktemp("http") / "sandbox", acquired_models))
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def client(served: Server) -> Iterator[httpx2.Client]:
    with served.client() as http:
        yield http
