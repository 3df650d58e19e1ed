"""`sbuf [view] invoke <operation>` straight from the entry point, and every other form through click."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.cli.oneshot import OneShotEmbedder, direct_invocation, run_invoke
from stormbuffer.embedding import DEFAULT_VARIANT, open_embedder
from stormbuffer.embedding.forked import ForkedEmbedder
from tests.helpers import SBUF, Sandbox, record_markdown

RECORD_ID = "01890a5d-ac96-774b-bcce-b302099a8001"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["invoke", "search"], ("global", "search")),
        (["--project", "invoke", "get"], ("project", "get")),
        (["--local", "invoke", "context"], ("local", "context")),
        (["-g", "invoke", "remember"], ("global", "remember")),
        (["invoke", "--help"], None),
        (["invoke", "search", "--project"], None),
        (["--project", "--color", "never", "invoke", "search"], None),
        (["search", "invoke"], None),
        (["invoke"], None),
        ([], None),
    ],
)
def test_only_the_plain_forms_skip_click(args: list[str], expected: tuple[str, str] | None) -> None:
    assert direct_invocation(args) == expected


def test_both_ways_give_the_same_envelope_and_the_direct_one_imports_no_click(sandbox: Sandbox) -> None:
    box = sandbox
    assert box.sbuf("--project", "init").returncode == 0
    scope = "project:" + json.loads(box.sbuf("--project", "status", "--json").stdout)["project_id"]
    records = box.project_root / "records"
    records.mkdir(exist_ok=True)
    (records / f"{RECORD_ID}.md").write_text(
        record_markdown(RECORD_ID, scope, title="Deploy ritual", body="Two approvals.", access="agent"),
        encoding="utf-8",
    )
    request = json.dumps({"version": 1, "id": RECORD_ID})
    via_click = box.sbuf("invoke", "get", "--project", input=request)
    direct = box.sbuf("--project", "invoke", "get", input=request)
    assert direct.returncode == via_click.returncode == 0, (direct, via_click)
    assert json.loads(direct.stdout) == json.loads(via_click.stdout)
    assert json.loads(direct.stdout)["result"]["title"] == "Deploy ritual"
    code = (
        "import sys\n"
        "sys.argv = ['sbuf', '--project', 'invoke', 'get']\n"
        "from stormbuffer.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write('click' if 'click' in sys.modules else 'no click')\n"
    )
    probe = subprocess.run(
        [sys.executable, "-c", code], cwd=box.cwd, env=box.env, input=request, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert probe.stderr == "no click" and json.loads(probe.stdout)["ok"]


def test_a_prefetched_model_is_the_one_get_returns(tmp_path: Path, model_cache: Callable[[str], Path]) -> None:
    cache = model_cache(DEFAULT_VARIANT)
    slot = OneShotEmbedder(lambda: open_embedder(cache))
    slot.prefetch()
    embedder, reason = slot.get()
    assert isinstance(embedder, ForkedEmbedder) and reason is None
    assert slot.get()[0] is embedder and embedder.embed(["hello"]).shape == (1, 384)
    slot.close()
    missing = OneShotEmbedder(lambda: open_embedder(tmp_path / "no-models"))
    missing.prefetch()
    assert missing.get() == (None, "model_unavailable")


def test_without_a_prefetch_the_model_opens_in_this_process(model_cache: Callable[[str], Path]) -> None:
    cache = model_cache(DEFAULT_VARIANT)
    slot = OneShotEmbedder(lambda: open_embedder(cache))
    embedder, reason = slot.get()
    assert embedder is not None and not isinstance(embedder, ForkedEmbedder) and reason is None


def test_a_failed_search_ends_the_model_process_before_it_returns(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rejected request is answered long before the model is open; the child must not outlive the call."""
    assert sandbox.sbuf("--project", "init").returncode == 0
    started: list[ForkedEmbedder] = []
    start = ForkedEmbedder.start.__func__  # type: ignore[attr-defined]

    def recording(cls: type[ForkedEmbedder], opener: Callable[[], tuple[object, str | None]]) -> ForkedEmbedder:
        started.append(start(cls, opener))
        return started[-1]

    monkeypatch.setattr(ForkedEmbedder, "start", classmethod(recording))
    monkeypatch.chdir(sandbox.cwd)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"version": 1, "query": 3}')))
    status = run_invoke("search", "project", sandbox.env)
    assert status == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_request"
    assert len(started) == 1 and started[0].pid is None


def test_a_search_still_answers_when_no_process_can_be_forked(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0

    def no_fork() -> int:
        raise BlockingIOError("Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    monkeypatch.chdir(sandbox.cwd)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"version": 1, "query": "deploy", "budget": 64}')))
    assert run_invoke("context", "project", sandbox.env) == 0
    receipt = json.loads(capsys.readouterr().out)["result"]["receipt"]
    assert receipt["retrieval_mode"] == "hybrid" and receipt["semantic_fallback"] is None


# Runs a command as a subreaper (Linux): a process the command leaves behind is adopted here and
# counted when it ends.
ADOPTING_RUNNER = """
import ctypes, json, os, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
done = subprocess.run(sys.argv[1:], input=sys.stdin.buffer.read(), capture_output=True)
adopted = 0
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
    adopted += 1
print(json.dumps({"status": done.returncode, "stdout": done.stdout.decode(), "stderr": done.stderr.decode(),
                  "adopted": adopted}))
"""


def run_adopting(sandbox: Sandbox, operation: str, request: str) -> dict[str, object]:
    """`sbuf --project invoke <operation>` and how many processes it left behind (without the
    daemon, which a successful one-shot retrieval starts on purpose)."""
    command = [sys.executable, "-c", ADOPTING_RUNNER, str(SBUF), "--project", "invoke", operation]
    env = sandbox.env_with(STORMBUFFER_NO_DAEMON="1")
    runner = subprocess.run(command, cwd=sandbox.cwd, env=env, input=request, capture_output=True,
                            text=True, check=True)  # fmt: skip
    result: dict[str, object] = json.loads(runner.stdout)
    return result


def test_no_model_process_outlives_the_call(sandbox: Sandbox) -> None:
    """A rejected search is answered while its model's child process is still opening the model;
    a successful context after the child answered. Neither leaves that process behind."""
    assert sandbox.sbuf("--project", "init").returncode == 0
    rejected = run_adopting(sandbox, "search", '{"version": 1, "query": 3}')
    assert (rejected["status"], rejected["stderr"], rejected["adopted"]) == (1, "", 0), rejected
    assert json.loads(str(rejected["stdout"]))["error"]["code"] == "invalid_request"
    answered = run_adopting(sandbox, "context", json.dumps({"version": 1, "query": "deploy ritual", "budget": 64}))
    assert (answered["status"], answered["stderr"], answered["adopted"]) == (0, "", 0), answered
    assert json.loads(str(answered["stdout"]))["result"]["receipt"]["retrieval_mode"] == "hybrid"
