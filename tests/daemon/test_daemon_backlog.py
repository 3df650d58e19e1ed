"""A daemon that a read left with texts to embed keeps embedding them past its idle time, and exits
idle only once none is left."""

from __future__ import annotations

import time

from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.index import projection as pj
from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.daemon.sessions import session
from tests.daemon.test_daemon import alive, status
from tests.mcp.conftest import Store, store  # noqa: F401 - fixture

RECORDS = 120  # far more texts than a read embeds (`READ_EMBED_LIMIT`): a backlog of several steps
EXIT_BOUND_S = 600.0  # a bound for the exit, never a speed assertion


def test_the_daemon_embeds_its_backlog_before_its_idle_exit(store: Store) -> None:  # noqa: F811
    store.seed()
    for number in range(RECORDS):
        body = f"Magnetar note {number} says the build {number} needs checking after a release.\n"
        store.write(f"01900000-0000-7000-8000-{number:012d}", title=f"Magnetar note {number}", body=body)
    paths = resolve_store(View.PROJECT, store.box.cwd, PlatformDirs.from_environ(store.box.env))
    env = store.box.env_with(STORMBUFFER_DAEMON_IDLE_S="1")
    code, answers, _stderr = session(store.box, env=env)  # its recall syncs, embeds a few texts, leaves the rest
    assert code == 0 and any(answer.get("id") == 3 for answer in answers)
    running = status(env)
    assert running is not None
    assert pj.describe(paths)["vectors_pending"] > 0  # what the daemon is left to do
    deadline = time.monotonic() + EXIT_BOUND_S
    while alive(running["pid"]):
        assert time.monotonic() < deadline, "the daemon did not exit"
        time.sleep(0.1)
    assert pj.describe(paths)["vectors_pending"] == 0
