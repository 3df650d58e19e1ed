"""Routes added to the app (`build_app(…, extra_routes)`, as the review pages are) sit behind the same
guard, credential check and error answers as the API, and reach the store through `store_context`. A
real uvicorn server on a loopback port, in a thread of the test process."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from stormbuffer.adapters.http import Credentials, store_context
from stormbuffer.adapters.http.context import StoreContext
from stormbuffer.adapters.http.server import bind, loopback_server
from stormbuffer.core.stores import View
from stormbuffer.index.freshness import FreshnessRegistry
from tests.helpers import sbuf_env
from tests.stores import make_store, write_record

from .conftest import TIMEOUT

TOKEN = secrets.token_urlsafe(32)
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def page(request: Request) -> Response:
    store = store_context(request)
    records = await store.read(store.repository().records)
    return HTMLResponse(f"<p>{len(records)} records in {store.view.value} view</p>")


async def save(request: Request) -> Response:
    return HTMLResponse("<p>saved</p>")


EXTRA: list[BaseRoute] = [Route("/", page, methods=["GET"]), Route("/review/save", save, methods=["POST"])]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("extra")
    paths = make_store(base)
    write_record(paths, "Page record", "Shown on the page.")
    freshness = FreshnessRegistry()
    store = StoreContext.open(View.PROJECT, Path(paths.root.parent), sbuf_env(base), freshness)
    sock = bind("127.0.0.1", 0)
    server = loopback_server(store, sock, Credentials(TOKEN), EXTRA)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        with httpx2.Client(trust_env=False, timeout=TIMEOUT) as probe:
            url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            deadline = time.monotonic() + TIMEOUT
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.02)
            assert probe.get(f"{url}/openapi.json").status_code == 200
        yield url
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)
        freshness.close()


def test_an_extra_route_reads_the_store(base_url: str) -> None:
    answer = httpx2.get(base_url + "/", headers=AUTH, trust_env=False, timeout=TIMEOUT)
    assert (answer.status_code, answer.text) == (200, "<p>1 records in project view</p>")


def test_an_extra_route_needs_the_credential(base_url: str) -> None:
    for headers in ({}, {"Authorization": "Bearer " + secrets.token_urlsafe(32)}):
        answer = httpx2.get(base_url + "/", headers=headers, trust_env=False, timeout=TIMEOUT)
        assert (answer.status_code, answer.headers["location"]) == (303, "/sign-in")


def test_the_guard_covers_extra_routes(base_url: str) -> None:
    foreign_host = httpx2.get(base_url + "/", headers={"Host": "evil.example", **AUTH}, trust_env=False,
                              timeout=TIMEOUT)  # fmt: skip
    assert foreign_host.status_code == 403 and foreign_host.json()["error"]["code"] == "host_not_allowed"
    form = httpx2.post(base_url + "/review/save", data={"a": "b"}, headers=AUTH, trust_env=False, timeout=TIMEOUT)
    assert form.status_code == 415 and form.json()["error"]["code"] == "unsupported_media_type"
    cross = httpx2.post(base_url + "/review/save", json={}, headers={"Origin": "http://evil.example", **AUTH},
                        trust_env=False, timeout=TIMEOUT)  # fmt: skip
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "origin_not_allowed"
    same = httpx2.post(base_url + "/review/save", json={}, headers=AUTH, trust_env=False, timeout=TIMEOUT)
    assert (same.status_code, same.text) == (200, "<p>saved</p>")


def test_api_errors_still_answer_around_extra_routes(base_url: str) -> None:
    wrong_method = httpx2.delete(base_url + "/", headers={"Content-Type": "application/json", **AUTH},
                                 trust_env=False, timeout=TIMEOUT)  # fmt: skip
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["code"] == "method_not_allowed"
    nothing = httpx2.get(base_url + "/nothing", headers=AUTH, trust_env=False, timeout=TIMEOUT)
    assert nothing.json()["error"]["code"] == "not_found"
