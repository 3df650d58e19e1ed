"""`stormbuffer-mcp` and `sbuf mcp` as processes: arguments, exit status, stdio lifecycle, bad input lines."""

from __future__ import annotations

import subprocess

import pytest

from tests.helpers import SBUF, Sandbox

from .conftest import (
    ACTIVE_ID,
    ARCHIVED_ID,
    CANDIDATE_ID,
    HUMAN_ID,
    INITIALIZE_PARAMS,
    INITIALIZED,
    SECOND_ID,
    SOURCE,
    STORMBUFFER_MCP,
    TIMEOUT,
    RawServer,
    Store,
    request,
)

SEEDED_PROJECT = (ACTIVE_ID, SECOND_ID, CANDIDATE_ID, ARCHIVED_ID, HUMAN_ID)
CANDIDATES_ONLY = "MCP candidate-write mode permits only remember and update"

ONE_WRITE_FLAG = "select only one of --allow-candidate-writes or --allow-writes"
USAGE = (
    "Usage: stormbuffer-mcp --stdio [--global | --project | --local] [--allow-candidate-writes | --allow-writes]"
    " [--no-daemon]"
)


def run(box: Sandbox, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STORMBUFFER_MCP), *args],
        cwd=box.cwd,
        env=box.env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_and_write_modes(sandbox: Sandbox, flag: str) -> None:
    done = run(sandbox, flag)
    assert done.returncode == 0
    assert done.stdout.startswith(USAGE + "\n\n")
    assert "--global | --project | --local" in done.stdout
    assert "writes are disabled by default" in done.stdout.lower()
    assert done.stderr == ""


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(sandbox: Sandbox, flag: str) -> None:
    done = run(sandbox, flag)
    assert (done.returncode, done.stdout, done.stderr) == (0, "stormbuffer-mcp 0.1.0\n", "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--stdio is required"),
        (["--project"], "--stdio is required"),
        (["--stdio", "--global", "--project"], "select only one of --global, --project, or --local"),
        (["--stdio", "--local", "--local"], "select only one of --global, --project, or --local"),
        (["--stdio", "--allow-candidate-writes", "--allow-writes"], ONE_WRITE_FLAG),
        (["--stdio", "--allow-writes", "--allow-writes"], ONE_WRITE_FLAG),
        (["--stdio", "--verbose"], "unknown argument"),
        (["--stdio", "--project", "--project", "--help"], "select only one of --global, --project, or --local"),
        (["--bogus", "--help"], "unknown argument"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2(sandbox: Sandbox, args: list[str], message: str) -> None:
    done = run(sandbox, *args)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"stormbuffer-mcp: {message}\n")


def test_help_wins_when_reached_before_an_error(sandbox: Sandbox) -> None:
    done = run(sandbox, "--stdio", "--help", "--bogus")
    assert done.returncode == 0
    assert done.stdout.startswith(USAGE)


def test_startup_fails_without_a_home_directory(sandbox: Sandbox) -> None:
    done = subprocess.run(
        [str(STORMBUFFER_MCP), "--stdio"],
        cwd=sandbox.cwd,
        env=sandbox.env_with(HOME=None, XDG_DATA_HOME=None, XDG_CACHE_HOME=None),
        input="",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    reason = "could not determine the user data directory; set HOME or the platform equivalent"
    assert done.stderr == f"stormbuffer-mcp: could not start the stdio adapter: {reason}\n"


def test_stdin_closed_before_any_request_is_a_startup_failure(sandbox: Sandbox) -> None:
    done = run(sandbox, "--stdio", "--project")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "stormbuffer-mcp: could not start the stdio adapter\n"


def test_closing_stdin_after_the_handshake_exits_0(store: Store) -> None:
    server = RawServer(store.box, "--stdio", "--project")
    answer = server.initialize()
    assert answer["result"]["serverInfo"] == {"name": "stormbuffer-mcp", "version": "0.1.0"}
    code, rest, stderr = server.close()
    assert (code, rest, stderr) == (0, [], "")


def test_pipelined_requests_are_all_answered_before_exit(store: Store) -> None:
    """Requests written together with EOF still get answers; an unknown cancellation gets none."""
    server = RawServer(store.box, "--stdio", "--project")
    server.send(
        request(1, "initialize", INITIALIZE_PARAMS),
        INITIALIZED,
        request(2, "tools/list"),
        request(3, "resources/templates/list"),
        request(4, "tools/call", {"name": "memory_recall", "arguments": {"query": "magnetar"}}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 999}},
    )  # fmt: skip
    code, messages, _stderr = server.close()
    assert code == 0
    assert sorted(message["id"] for message in messages) == [1, 2, 3, 4]
    assert all("result" in message for message in messages)
    recall = next(message for message in messages if message["id"] == 4)
    assert recall["result"]["structuredContent"]["operation"] == "context"


def test_a_call_cancelled_before_it_starts_never_runs(store: Store) -> None:
    """Calls run one at a time: a remember queued behind the first recall (which opens the model) and
    cancelled while it waits is neither run nor answered; the adapter keeps serving."""
    store.seed()
    server = RawServer(store.box, "--stdio", "--project", "--allow-candidate-writes")
    assert "result" in server.initialize()
    remember = {"title": "Never written", "kind": "fact", "body": "Cancelled before it ran.", "source": SOURCE}
    server.send(
        request(2, "tools/call", {"name": "memory_recall", "arguments": {"query": "release constraint"}}),
        request(3, "tools/call", {"name": "memory_remember", "arguments": remember}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "reason": "user"}},
        request(4, "ping"),
    )
    answers = [server.receive(), server.receive()]
    code, rest, _stderr = server.close()
    assert sorted(answer["id"] for answer in answers) == [2, 4]
    assert (code, rest) == (0, [])
    assert sorted(path.stem for path in (store.box.project_root / "records").iterdir()) == sorted(SEEDED_PROJECT)


def test_malformed_lines_are_answered_and_the_next_request_is_answered(store: Store) -> None:
    server = RawServer(store.box, "--stdio", "--project")
    assert "result" in server.initialize()
    server.send(
        "this is not json",
        '{"jsonrpc": "2.0", "id": 5, "method": ',
        "[1, 2, 3]",
        '{"hello": "world"}',
        '{"jsonrpc": "1.0", "id": 6, "method": "ping"}',
        "",
        request(7, "tools/list"),
    )
    errors = [server.receive() for _ in range(5)]
    assert [(error["id"], error["error"]["code"]) for error in errors] == [
        (None, -32700),
        (5, -32700),
        (None, -32600),
        (None, -32600),
        (6, -32600),
    ]
    answer = server.receive()
    assert answer["id"] == 7
    assert len(answer["result"]["tools"]) == 5
    server.send(request(8, "ping"))
    assert server.receive() == {"jsonrpc": "2.0", "id": 8, "result": {}}
    code, rest, _stderr = server.close()
    assert (code, rest) == (0, [])


def test_connecting_never_initializes_a_store(sandbox: Sandbox) -> None:
    """A session against an uninitialized project reads nothing and creates no store directory."""
    server = RawServer(sandbox, "--stdio", "--project", "--allow-writes")
    assert "result" in server.initialize()
    server.send(
        request(2, "tools/list"),
        request(3, "tools/call", {"name": "memory_get", "arguments": {"id": "0190a6b3-7c1e-7a51-9c39-1b2f4c9d8e11"}}),
        request(4, "resources/read", {"uri": "stormbuffer://scope/global/records"}),
    )
    answers = {answer["id"]: answer for answer in (server.receive(), server.receive(), server.receive())}
    assert answers[3]["result"]["structuredContent"]["error"]["code"] == "not_initialized"
    assert answers[4]["error"]["message"] == "could not read the requested resource: not_initialized"
    code, _rest, _stderr = server.close()
    assert code == 0
    assert not sandbox.project_root.exists()
    assert not sandbox.global_root.exists()


# ---- sbuf mcp ---------------------------------------------------------------------------------


def test_sbuf_mcp_starts_the_adapter_with_the_view_and_write_flags(store: Store) -> None:
    env = store.box.env_with(STORMBUFFER_MCP_BIN=str(STORMBUFFER_MCP))
    server = RawServer(store.box, "--local", "mcp", "--stdio", "--allow-candidate-writes", program=SBUF, env=env)
    assert "bounded to the local store" in server.initialize()["result"]["instructions"]
    server.send(request(2, "tools/call", {"name": "memory_forget", "arguments": {"id": ACTIVE_ID}}))
    error = server.receive()["result"]["structuredContent"]["error"]
    assert error == {"code": "permission_denied", "message": CANDIDATES_ONLY}
    code, rest, _stderr = server.close()
    assert (code, rest) == (0, [])


def test_sbuf_mcp_passes_the_exit_status_through(store: Store) -> None:
    env = store.box.env_with(STORMBUFFER_MCP_BIN=str(STORMBUFFER_MCP))
    done = store.box.sbuf("--project", "mcp", "--stdio", env=env, input="")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "stormbuffer-mcp: could not start the stdio adapter\n"


def test_sbuf_mcp_requires_stdio(store: Store) -> None:
    done = store.box.sbuf("mcp")
    assert (done.returncode, done.stdout, done.stderr) == (1, "", "error: mcp requires --stdio\n")


def test_sbuf_mcp_write_flags_conflict(store: Store) -> None:
    done = store.box.sbuf("mcp", "--stdio", "--allow-candidate-writes", "--allow-writes")
    assert done.returncode == 2
    assert "--allow-candidate-writes cannot be used with --allow-writes" in done.stderr


def test_sbuf_mcp_reports_an_adapter_that_cannot_be_started(store: Store) -> None:
    env = store.box.env_with(STORMBUFFER_MCP_BIN=str(store.box.base / "no-such-adapter"))
    done = store.box.sbuf("mcp", "--stdio", env=env, input="")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: could not start stormbuffer-mcp: No such file or directory\n"
