"""The daemon behind `stormbuffer-mcp` and `sbuf invoke`, driven through the real commands: one
daemon per environment (its socket under the test's cache directory), shared by sessions, replaced
when it belongs to another install, gone when idle, and a relay that answers for a killed daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.daemon import relay
from stormbuffer.daemon.runtime import PROTOCOL, SESSION_END, Runtime, install_identity, peer_uid, runtime
from tests.cli.conftest import sandbox  # noqa: F401 - a fixture shared with the CLI tests
from tests.daemon.sessions import session
from tests.helpers import Sandbox
from tests.mcp.conftest import (
    ACTIVE_ID,
    INITIALIZE_PARAMS,
    INITIALIZED,
    TIMEOUT,
    RawServer,
    Store,
    request,
    store,  # noqa: F401 - fixture
)

WAIT_S = 30.0  # a bound for what must happen, never a speed assertion


def place(box: Sandbox) -> Runtime:
    found = runtime(box.env)
    assert found is not None
    return found


def status(env: dict[str, str]) -> dict[str, Any] | None:
    return relay.ask("status", env)


def wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_sessions_share_one_daemon_in_a_private_directory_and_it_exits_when_idle(store: Store) -> None:  # noqa: F811
    store.seed()
    env = store.box.env_with(STORMBUFFER_DAEMON_IDLE_S="2")
    first = session(store.box, env=env)
    assert first[0] == 0 and first[2] == ""
    recall = next(message for message in first[1] if message.get("id") == 3)
    assert recall["result"]["structuredContent"]["ok"] is True
    running = status(env)
    assert running is not None and running["sessions"] == 0
    second = session(store.box, env=env)
    assert second[0] == 0 and status(env)["pid"] == running["pid"]  # type: ignore[index]
    files = place(store.box)
    assert files.directory == store.box.base / "cache" / "stormbuffer" / "run"
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(files.socket.stat().st_mode) == 0o600
    wait_until(lambda: not alive(running["pid"]), "the idle daemon to exit")
    assert not files.socket.exists() and status(env) is None


def test_the_relay_imports_neither_the_sdk_nor_numpy(store: Store) -> None:  # noqa: F811
    code = (
        "import json, sys\n"
        "sys.argv = ['stormbuffer-mcp', '--stdio', '--project']\n"
        "from stormbuffer.adapters.mcp.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
        "heavy = ('mcp', 'mcp_types', 'numpy', 'onnxruntime', 'anyio')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "sys.stderr.write(json.dumps([code, loaded]))\n"
    )
    lines = [request(1, "initialize", INITIALIZE_PARAMS), INITIALIZED, request(2, "tools/list")]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=store.box.cwd, env=store.box.env, capture_output=True, text=True,
        input="".join(json.dumps(line) + "\n" for line in lines), timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert json.loads(done.stderr) == [0, []]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers[1]["result"]["tools"]) == 5
    assert status(store.box.env) is not None  # served by the daemon


def test_a_daemon_of_another_install_is_replaced_not_used(store: Store) -> None:  # noqa: F811
    store.seed()
    old_env = store.box.env_with(STORMBUFFER_DAEMON_IDLE_S="500")
    assert session(store.box, env=old_env)[0] == 0
    old = status(old_env)
    assert old is not None and old["install"] == install_identity(old_env)
    new_env = store.box.env_with(STORMBUFFER_DAEMON_IDLE_S="600")  # another configuration
    code, answers, stderr = session(store.box, env=new_env)
    assert code == 0 and stderr == "" and len(answers) == 3
    new = status(new_env)
    assert new is not None and new["pid"] != old["pid"] and new["install"] == install_identity(new_env)
    wait_until(lambda: not alive(old["pid"]), "the replaced daemon to exit")


def test_a_daemon_killed_mid_request_gets_an_error_answer_and_the_next_start_a_fresh_daemon(
    store: Store,  # noqa: F811
) -> None:
    store.seed()
    server = RawServer(store.box, "--stdio", "--project")
    server.initialize()
    daemon = status(store.box.env)
    assert daemon is not None
    os.kill(daemon["pid"], signal.SIGSTOP)  # the request below is surely still open when it dies
    server.send(request(7, "tools/call", {"name": "memory_get", "arguments": {"id": ACTIVE_ID}}))
    time.sleep(0.2)
    os.kill(daemon["pid"], signal.SIGKILL)
    answer = server.receive()
    assert answer["id"] == 7 and answer["error"]["code"] == -32603
    assert "daemon stopped" in answer["error"]["message"]
    code = server.process.wait(timeout=TIMEOUT)
    assert code == 1 and "daemon stopped" in server.process.stderr.read()  # type: ignore[union-attr]
    again = session(store.box)
    assert again[0] == 0 and len(again[1]) == 3
    fresh = status(store.box.env)
    assert fresh is not None and fresh["pid"] != daemon["pid"]


def test_without_the_daemon_the_adapter_serves_in_process(store: Store) -> None:  # noqa: F811
    store.seed()
    for flags, env in (((), store.box.env_with(STORMBUFFER_NO_DAEMON="1")), (("--no-daemon",), store.box.env)):
        code, answers, stderr = session(store.box, *flags, env=env)
        assert code == 0 and stderr == "" and len(answers) == 3
        assert not (store.box.base / "cache" / "stormbuffer" / "run").exists()


def test_a_runtime_directory_others_may_enter_is_never_used(store: Store) -> None:  # noqa: F811
    store.seed()
    directory = store.box.base / "cache" / "stormbuffer" / "run"
    directory.mkdir(parents=True)
    directory.chmod(0o755)
    code, answers, _stderr = session(store.box)
    assert code == 0 and len(answers) == 3
    assert list(directory.iterdir()) == []  # served in-process: no socket, no lock


def test_the_peer_of_a_connection_is_this_user() -> None:
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert peer_uid(left) == os.getuid() == peer_uid(right)


def test_memory_and_open_files_stay_bounded_over_hundreds_of_sessions(store: Store) -> None:  # noqa: F811
    store.seed()
    env = store.box.env
    assert session(store.box)[0] == 0  # starts the daemon and loads the model

    def one_session(number: int) -> None:
        hello = relay.hello("mcp", env, view="project", grant="none", cwd=str(store.box.cwd))
        connection = relay.open_door(hello, env, start=False)
        assert connection.reply["ok"] is True
        recall = request(2, "tools/call", {"name": "memory_recall", "arguments": {"query": f"magnetar {number}"}})
        lines = [request(1, "initialize", INITIALIZE_PARAMS), INITIALIZED, recall]
        connection.sock.sendall("".join(json.dumps(line) + "\n" for line in lines).encode())
        connection.sock.shutdown(socket.SHUT_WR)
        *lines_out, end = connection.reader.read().splitlines(keepends=True)
        connection.close()
        assert end == SESSION_END
        answers = [json.loads(line) for line in lines_out]
        assert [answer["id"] for answer in answers] == [1, 2]
        assert answers[1]["result"]["structuredContent"]["ok"] is True, answers[1]

    for number in range(20):
        one_session(number)
    before = status(env)
    for number in range(300):
        one_session(number)
    after = status(env)
    assert before is not None and after is not None and after["pid"] == before["pid"]
    assert after["served"] >= before["served"] + 300
    assert after["open_files"] <= before["open_files"] + 2
    assert after["rss_kib"] <= before["rss_kib"] + 16 * 1024  # far below a leak of one session's objects


def test_an_mcp_session_sent_together_with_its_hello_is_answered_whole(store: Store) -> None:  # noqa: F811
    """Bytes that arrive together with the hello belong to the session that follows it."""
    store.seed()
    env = store.box.env
    assert session(store.box)[0] == 0  # starts the daemon
    hello = relay.hello("mcp", env, view="project", grant="none", cwd=str(store.box.cwd))
    recall = request(2, "tools/call", {"name": "memory_recall", "arguments": {"query": "magnetar"}})
    lines = [hello, request(1, "initialize", INITIALIZE_PARAMS), INITIALIZED, recall]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(TIMEOUT)
        sock.connect(os.fspath(place(store.box).socket))
        sock.sendall("".join(json.dumps(line) + "\n" for line in lines).encode())
        sock.shutdown(socket.SHUT_WR)
        with sock.makefile("rb") as reader:
            accepted, *lines_out, end = reader.read().splitlines(keepends=True)
    assert json.loads(accepted)["ok"] is True
    assert end == SESSION_END
    answers = [json.loads(line) for line in lines_out]
    assert [answer["id"] for answer in answers] == [1, 2]
    assert answers[1]["result"]["structuredContent"]["ok"] is True, answers[1]


def test_daemon_status_and_stop(store: Store) -> None:  # noqa: F811
    box = store.box
    stopped = box.sbuf("daemon", "status")
    assert stopped.returncode == 1 and stopped.stdout == "No daemon is running.\n"
    assert session(box)[0] == 0
    shown = box.sbuf("daemon", "status", "--json")
    info = json.loads(shown.stdout)
    assert shown.returncode == 0 and info["running"] is True and info["current"] is True
    assert info["socket"] == str(box.base / "cache" / "stormbuffer" / "run" / "daemon.sock")
    human = box.sbuf("daemon", "status")
    assert f"Process: {info['pid']}" in human.stdout and "Sessions: 0" in human.stdout
    done = box.sbuf("daemon", "stop")
    assert done.returncode == 0 and done.stdout == f"Stopped the daemon (process {info['pid']}).\n"
    assert not alive(info["pid"]) and box.sbuf("daemon", "status").returncode == 1
    assert box.sbuf("daemon", "stop").stdout == "No daemon is running.\n"


def test_a_bad_hello_is_refused(store: Store) -> None:  # noqa: F811
    assert session(store.box)[0] == 0
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(place(store.box).socket))
        sock.sendall(json.dumps({"protocol": "something-else/9"}).encode() + b"\n")
        assert json.loads(sock.makefile("rb").readline()) == {"ok": False, "reason": "bad_hello"}
    assert relay.ask("status", store.box.env) is not None and PROTOCOL.startswith("stormbuffer-daemon/")


@pytest.mark.parametrize("operation", ["search", "context"])
def test_a_one_shot_retrieval_starts_a_daemon_for_the_next_call(store: Store, operation: str) -> None:  # noqa: F811
    store.seed()
    first = store.invoke(operation, {"version": 1, "query": "magnetar"}, "--project")
    wait_until(lambda: status(store.box.env) is not None, "the daemon a one-shot call started")
    second = store.invoke(operation, {"version": 1, "query": "magnetar"}, "--project")
    assert first["ok"] and second["ok"]
    if operation == "search":
        assert first == second
