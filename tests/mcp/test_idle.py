"""Getting ready while the host is quiet: when it starts, what it does, and what it never does."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import anyio
import pytest

from stormbuffer.adapters.mcp import idle
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.daemon import relay
from stormbuffer.embedding import Embedder
from stormbuffer.index.freshness import FreshnessRegistry
from stormbuffer.protocol.session import Session
from tests.helpers import Sandbox

from .conftest import ACTIVE_ID, TIMEOUT, RawServer, Store, call, connect, request

WATCHER_THREAD = "stormbuffer-records-watcher"


class CountingSlot:
    """An embedder slot that only counts how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def get(self) -> tuple[Embedder | None, str | None]:
        self.asked += 1
        return None, "intentionally_unavailable"


def watcher_threads() -> int:
    return sum(thread.name == WATCHER_THREAD for thread in threading.enumerate())


def project_session(box: Sandbox, slot: CountingSlot, freshness: FreshnessRegistry) -> Session:
    dirs = PlatformDirs.from_environ(box.env)
    return Session(View.PROJECT, resolve_store(View.PROJECT, box.cwd, dirs), dirs, slot, freshness)


# ---- when the host is quiet --------------------------------------------------------------------


async def wait_quiet(activity: idle.Activity, done: anyio.Event) -> None:
    await activity.quiet()
    done.set()


@pytest.mark.anyio
async def test_quiet_waits_for_the_initialized_session_and_the_end_of_requests() -> None:
    activity = idle.Activity()
    done = anyio.Event()
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_quiet, activity, done)
            await anyio.sleep(idle.QUIET_S * 2)
            assert not done.is_set()  # not initialized yet
            activity.request_started()
            activity.notified(idle.INITIALIZED)
            await anyio.sleep(idle.QUIET_S * 2)
            assert not done.is_set()  # a request is in flight
            activity.request_ended()
            await done.wait()
    assert activity.opened


@pytest.mark.anyio
async def test_a_request_during_the_quiet_period_starts_it_again() -> None:
    activity = idle.Activity()
    activity.notified(idle.INITIALIZED)
    done = anyio.Event()
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_quiet, activity, done)
            await anyio.sleep(idle.QUIET_S / 2)
            activity.request_started()
            activity.request_ended()
            await anyio.sleep(idle.QUIET_S * 3 / 4)  # past the first period, within the second
            assert not done.is_set()
            await done.wait()


@pytest.mark.anyio
async def test_quiet_returns_at_once_while_no_request_started_since(monkeypatch: pytest.MonkeyPatch) -> None:
    activity = idle.Activity()
    activity.notified(idle.INITIALIZED)
    with anyio.fail_after(TIMEOUT):
        await activity.quiet()
        monkeypatch.setattr(idle, "QUIET_S", 3600.0)  # from now on, any wait would outlast the guard
        await activity.quiet()
    activity.request_started()
    activity.request_ended()
    with anyio.move_on_after(0.2) as scope:
        await activity.quiet()
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_only_the_initialized_notification_initializes() -> None:
    activity = idle.Activity()
    activity.notified("notifications/cancelled")
    with anyio.move_on_after(idle.QUIET_S * 3) as scope:
        await activity.quiet()
    assert scope.cancelled_caught
    activity.notified(idle.INITIALIZED)
    with anyio.fail_after(TIMEOUT):
        await activity.quiet()


# ---- what the steps do ---------------------------------------------------------------------------


def test_the_steps_watch_the_composed_stores_and_never_open_the_model(store: Store) -> None:
    slot = CountingSlot()
    freshness = FreshnessRegistry()
    before = watcher_threads()
    try:
        for step in idle.steps(project_session(store.box, slot, freshness)):
            step()  # each step works as it is: no failure is hidden here
        assert watcher_threads() == before + 2  # the project store and the global store
    finally:
        freshness.close()
    assert slot.asked == 0


def test_the_steps_create_nothing_for_an_uninitialized_store(sandbox: Sandbox) -> None:
    freshness = FreshnessRegistry()
    before = watcher_threads()
    try:
        for step in idle.steps(project_session(sandbox, CountingSlot(), freshness)):
            step()
        assert watcher_threads() == before
    finally:
        freshness.close()
    assert not sandbox.project_root.exists()
    assert not sandbox.global_root.exists()


def test_a_failing_step_is_only_logged(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    def fails() -> None:
        raise OSError(f"cannot read {tmp_path}")

    with caplog.at_level("DEBUG", logger=idle.__name__):
        idle.run_step(fails)
    assert [record.getMessage() for record in caplog.records] == ["warm-up step failed: OSError"]


# ---- through the adapter -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_calls_after_a_quiet_period_are_answered_as_before(store: Store) -> None:
    store.seed()
    async with connect(store.box, "--project") as client:
        await client.list_tools()
        await anyio.sleep(idle.QUIET_S * 3)  # the adapter gets ready meanwhile
        got = await call(client, "memory_get", {"id": ACTIVE_ID})
        recalled = await call(client, "memory_recall", {"query": "when do releases ship", "budget": 128})
    assert got["ok"] and got["result"]["id"] == ACTIVE_ID
    receipt = recalled["result"]["receipt"]
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("hybrid", None)
    assert recalled["result"]["blocks"][0]["record_id"] == ACTIVE_ID


def inotify_instances(pid: int) -> int:
    """How many inotify instances the process holds: one per records watcher."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd) == "anon_inode:inotify"
        except FileNotFoundError:  # closed meanwhile
            continue
    return count


def test_a_quiet_adapter_watches_the_records_before_the_first_read(store: Store) -> None:
    server = RawServer(store.box, "--stdio", "--project")
    assert "result" in server.initialize()
    daemon = relay.ask("status", store.box.env)
    serving = server.process.pid if daemon is None else daemon["pid"]  # the daemon serves the session
    deadline = time.monotonic() + TIMEOUT
    while inotify_instances(serving) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inotify_instances(serving) == 2  # the project store and the global store
    assert server.close() == (0, [], "")


def test_closing_stdin_while_getting_ready_exits_0(store: Store) -> None:
    server = RawServer(store.box, "--stdio", "--project")
    assert "result" in server.initialize()
    server.send(request(2, "tools/list"))
    assert server.receive()["id"] == 2
    threading.Event().wait(idle.QUIET_S * 2)  # the first step is under way
    assert server.close() == (0, [], "")
