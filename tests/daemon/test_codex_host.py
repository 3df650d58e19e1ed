"""Real-host acceptance: the Codex CLI (pinned in tests/tools) runs `codex exec` with
`stormbuffer-mcp --stdio --project` configured and its model provider pointed at the loopback stub
of the Responses API (tests/hosts). With the daemon warm, the first model request lists the five
memory tools every time, and the recall's result (a seeded record's id) reaches the next request.
(bench/codex_first_turn.py measures the same with a cold daemon.)"""

from __future__ import annotations

from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.daemon.codex import TOOLS, listed_tools, run_codex
from tests.daemon.sessions import session
from tests.mcp.conftest import ACTIVE_ID, Store, store  # noqa: F401 - fixture

RUNS = 10


def test_codex_sees_the_memory_tools_on_its_first_request_and_gets_the_recall(store: Store) -> None:  # noqa: F811
    store.seed()
    assert store.box.sbuf("--project", "sync").returncode == 0
    assert session(store.box)[0] == 0  # the daemon is running, its SDK imported and its model open
    for run in range(RUNS):
        requests = run_codex(store.box.cwd, store.box.env, store.box.base / "codex-home")
        assert len(requests) >= 2, f"run {run}: {len(requests)} model requests"
        assert listed_tools(requests[0].body) == list(TOOLS), f"run {run}: {listed_tools(requests[0].body)}"
        assert ACTIVE_ID in requests[1].text, f"run {run}: the recall's result did not reach the model"
