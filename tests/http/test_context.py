"""The worker limits of `StoreContext`: writes run one at a time, and one that waited too long for
its turn is refused as busy, without running."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio

from stormbuffer.core.errors import MutationBusy
from stormbuffer.core.stores import View
from stormbuffer.index.freshness import FreshnessRegistry
from tests.helpers import sbuf_env
from tests.stores import make_store


def test_a_write_waits_for_the_one_before_it_then_gives_up(tmp_path: Path) -> None:
    from stormbuffer.adapters.http.context import StoreContext

    paths = make_store(tmp_path)  # the data and cache directories `sbuf_env` names
    env = sbuf_env(tmp_path)
    freshness = FreshnessRegistry()
    store = StoreContext.open(View.PROJECT, paths.root.parent, env, freshness)
    store.write_wait_s = 0.2
    release, ran = threading.Event(), []

    def first() -> str:
        release.wait(10)
        return "first"

    async def main() -> list[object]:
        answers: list[object] = []

        async def attempt(function: object) -> None:
            try:
                answers.append(await store.write(function))  # type: ignore[arg-type]
            except MutationBusy:
                answers.append("busy")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(attempt, first)
            await anyio.sleep(0.05)
            tasks.start_soon(attempt, lambda: ran.append(True))
            await anyio.sleep(0.5)
            release.set()
        answers.append(await store.write(lambda: "after"))
        return answers

    try:
        assert anyio.run(main) == ["busy", "first", "after"]
    finally:
        freshness.close()
    assert ran == []  # the refused write never ran
