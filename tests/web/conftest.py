"""A real `sbuf serve` on a loopback port over a real project store, and headless Debian Chromium.

Each test saves a screenshot under `build/screenshots/` (the pictures in docs/web.md come from there).
"""

from __future__ import annotations

import functools
import http.server
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from stormbuffer.auth.credential import read_token
from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.records import Record
from tests.helpers import SBUF, Sandbox, invoke, link_tree
from tests.system import program

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
START_TIMEOUT = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """`sbuf --project serve` running for one test module."""

    box: Sandbox
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        """The sandbox user's credential (`sbuf auth token`), which the server made on start."""
        token = read_token(self.box.env)
        assert token is not None
        return token

    @property
    def sign_in_url(self) -> str:
        """The address `sbuf serve` prints: it sets the session cookie and leads to the inbox."""
        return f"{self.url}/sign-in?token={self.token}"

    @functools.cached_property
    def cookie(self) -> str:
        """The session cookie (`name=value`) the sign-in address sets, as a browser would keep it."""
        answer = fetch(self, self.sign_in_url.removeprefix(self.url), signed_in=False)
        assert answer.status == 303, answer
        return answer.headers["Set-Cookie"].split(";", 1)[0]

    def record_file(self, record_id: str) -> Path:
        return self.box.project_root / "records" / f"{record_id}.md"

    def on_disk(self, record_id: str) -> Record:
        path = self.record_file(record_id)
        return parse_markdown(path.read_bytes(), path.name)

    def propose(self, title: str, body: str, *, kind: str = "fact") -> str:
        """An agent candidate written through the real CLI; its id."""
        done = self.box.sbuf("--project", "propose", "--title", title, "--kind", kind, "--body", body)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[0]

    def add(self, title: str, body: str) -> str:
        done = self.box.sbuf("--project", "add", "--title", title, "--body", body)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, acquired_models: Path) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("web")
    box = Sandbox.create(base)
    link_tree(acquired_models, base / "cache" / "stormbuffer" / "models")
    for args in (("init",), ("--project", "init")):
        done = box.sbuf(*args)
        assert done.returncode == 0, done.stderr
    port = free_port()
    process = subprocess.Popen(
        [str(SBUF), "--project", "serve", "--port", str(port)],
        cwd=box.cwd, env=box.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=2):
                break
        except OSError:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "sbuf serve did not answer in time"
            time.sleep(0.1)
    yield Server(box, port, process)
    process.terminate()
    process.wait(timeout=10)


def chromium(*, javascript: bool = True, insecure_certs: bool = False) -> WebDriver:
    """Headless Chromium; it reaches nothing but loopback (no background networking, no updates);
    `insecure_certs` accepts a test's self-signed TLS certificate."""
    options = webdriver.ChromeOptions()
    options.accept_insecure_certs = insecure_certs
    options.binary_location = program("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1100,900"):  # fmt: skip
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    driver = webdriver.Chrome(service=Service(program("chromium-driver")), options=options)
    driver.set_page_load_timeout(30)
    return driver


def sign_in(driver: WebDriver, server: Server) -> None:
    """Open the address `sbuf serve` printed: the browser keeps the session cookie, not the token."""
    driver.get(server.sign_in_url)
    assert driver.current_url == server.url + "/"


@pytest.fixture(scope="module")
def browser(server: Server) -> Iterator[WebDriver]:
    driver = chromium()
    sign_in(driver, server)
    yield driver
    driver.quit()


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def fetch(
    server: Server,
    path: str,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    signed_in: bool = True,
) -> Answer:
    """One request with urllib, redirects not followed; the session cookie unless `signed_in=False`."""
    request = urllib.request.Request(server.url + path, data=data, method="POST" if data is not None else "GET")
    for name, value in {**({"Cookie": server.cookie} if signed_in else {}), **(headers or {})}.items():
        request.add_header(name, value)
    try:
        with urllib.request.build_opener(_NoRedirects).open(request, timeout=10) as answer:
            return Answer(answer.status, answer.headers, answer.read().decode())
    except urllib.error.HTTPError as refused:
        return Answer(refused.code, refused.headers, refused.read().decode())


def snapshot(driver: WebDriver, name: str) -> None:
    """Save a screenshot of the page as it is now."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


@pytest.fixture
def shot(request: pytest.FixtureRequest, browser: WebDriver) -> Iterator[None]:
    """Save a screenshot of the page as the test left it."""
    yield
    snapshot(browser, request.node.name)


def agent_update(server: Server, title: str, old_body: str, new_body: str) -> tuple[str, str]:
    """An active agent memory and an agent's update of it awaiting approval: (old id, candidate id)."""
    source = {"kind": "conversation", "reference": "stormbuffer://session/web", "actor": "agent"}
    remembered = invoke(
        "remember", {"version": 1, "title": title, "kind": "fact", "body": old_body, "source": source},
        cwd=server.box.cwd, env=server.box.env,
    )  # fmt: skip
    old_id = remembered["result"]["record_id"]
    done = server.box.sbuf("--project", "approve", old_id)
    assert done.returncode == 0, done.stderr
    updated = invoke(
        "update", {"version": 1, "id": old_id, "body": new_body, "source": source},
        cwd=server.box.cwd, env=server.box.env,
    )  # fmt: skip
    assert updated["result"]["outcome"] == "requires_approval", updated
    return old_id, updated["result"]["record_id"]


class Tracker(http.server.BaseHTTPRequestHandler):
    """Counts every request a page sends it: an inert page sends none."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        Tracker.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def tracker() -> Iterator[str]:
    """A loopback server that counts every request a page might send it."""
    Tracker.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tracker)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
