"""`sbuf [view] invoke <operation>` straight from the entry point, and every other form through click."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.cli.oneshot import direct_invocation, run_invoke
from stormbuffer.core.stores import View
from stormbuffer.embedding import DEFAULT_VARIANT
from stormbuffer.protocol.session import OneShotEmbedder
from tests.helpers import Sandbox, record_markdown

RECORD_ID = "01890a5d-ac96-774b-bcce-b302099a8001"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["invoke", "search"], (View.GLOBAL, "search")),
        (["--project", "invoke", "get"], (View.PROJECT, "get")),
        (["--local", "invoke", "context"], (View.LOCAL, "context")),
        (["-g", "invoke", "remember"], (View.GLOBAL, "remember")),
        (["invoke", "--help"], None),
        (["invoke", "search", "--project"], None),
        (["--project", "--color", "never", "invoke", "search"], None),
        (["search", "invoke"], None),
        (["invoke"], None),
        ([], None),
    ],
)
def test_only_the_plain_forms_skip_click(args: list[str], expected: tuple[View, str] | None) -> None:
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
    slot = OneShotEmbedder(model_cache(DEFAULT_VARIANT))
    slot.prefetch()
    embedder, reason = slot.get()
    assert embedder is not None and reason is None
    assert slot.get()[0] is embedder
    missing = OneShotEmbedder(tmp_path / "no-models")
    missing.prefetch()
    assert missing.get() == (None, "model_unavailable")


def test_a_failed_search_exits_only_after_the_model_finished_opening(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rejected request is answered long before the model is open; leaving that thread inside
    onnxruntime while the interpreter shuts down aborts the process."""
    assert sandbox.sbuf("--project", "init").returncode == 0
    monkeypatch.chdir(sandbox.cwd)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b'{"version": 1, "query": 3}')))
    status = run_invoke("search", View.PROJECT, sandbox.env)
    assert status == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "invalid_request"
    assert [thread.name for thread in threading.enumerate() if thread.name == "stormbuffer-model-open"] == []
