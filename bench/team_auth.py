"""What a team token costs `sbuf serve --team`: the in-process check of one request's token against a
store holding 100 tokens (hash, lookup by id, constant-time compare, the file's change check), one
audit entry's append, and through a real team server on a one-record store the p50 of an
authenticated `GET /v1/records` beside a refused one (401, no token), and of `GET` of a missing id
beside that of the record by a token of another scope (both 404: the time should tell nothing), each
audited; then, on a store of `--records` records, the p50 of a remote `memory_recall` through the
SDK's MCP client over Streamable HTTP (`/mcp`) beside the same recall through `/v1/invoke/context`.
`sbuf --version` is timed in the same run. Targets: a token check adds at most 1 ms at p50, a remote
recall takes at most 25 ms at p50.

    .venv/bin/python bench/team_auth.py [--requests 300] [--records 200] [--recalls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from invoke_latency import timed_run  # noqa: E402
from local_auth import LISTENING, p50s_through  # noqa: E402
from machine import machine, result_rows  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from stormbuffer.adapters.http.access import Credentials  # noqa: E402
from stormbuffer.auth import Role  # noqa: E402
from stormbuffer.auth.audit import AuditFile  # noqa: E402
from stormbuffer.auth.tokens import TeamTokens  # noqa: E402
from stormbuffer.core.stores import PlatformDirs, View, record_scope, resolve_store  # noqa: E402
from tests.helpers import SBUF, Sandbox, record_markdown  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "team_auth.json"
TARGETS = {"team_token_check_p50": 0.001, "remote_mcp_recall_p50": 0.025}
TOPICS = ("deploy", "release", "database", "cache", "review", "billing", "search", "queue", "login", "backup")
RECALL_BUDGET_S = 120.0  # the remote recall loop stops here whatever --recalls says
TOKENS = 100
STORED = "01900000-0000-7000-8000-0000000005e1"
MISSING = "01900000-0000-7000-8000-00000000dead"


def per_call(function: object, rounds: int = 5, per_round: int = 2_000) -> float:
    """Seconds per call of `function()`, the median of `rounds` rounds."""
    assert callable(function)
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(per_round):
            function()
        times.append((time.perf_counter() - began) / per_round)
    return statistics.median(times)


def in_process(box: Sandbox) -> tuple[dict[str, float], str, str]:
    """The token check and the audit append, in this process; the last token made, and one of
    another scope."""
    paths = resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env))
    tokens = TeamTokens(paths)
    elsewhere = tokens.create("elsewhere", Role.ADMIN, ("global",), None)
    token = ""
    for number in range(TOKENS - 1):
        token = tokens.create(f"member-{number}", Role.AGENT, (record_scope(paths),), None)
    credentials = Credentials.for_team(tokens)
    scope = {"type": "http", "path": "/v1/records", "server": ("127.0.0.1", 7342),
             "headers": [(b"host", b"127.0.0.1:7342"), (b"authorization", f"Bearer {token}".encode())]}  # fmt: skip
    assert credentials.principal(scope) is not None
    trail = AuditFile(paths)
    entry = {"at": "2026-01-01T00:00:00Z", "who": "member-1", "door": "http", "operation": "get",
             "request": "GET /v1/records", "status": 200, "records": [], "receipt": None}  # fmt: skip
    return (
        {
            "team_token_check_p50": per_call(lambda: credentials.principal(scope)),
            "audit_append_p50": per_call(lambda: trail.append(entry)),
        },
        token,
        elsewhere,
    )


def seed(box: Sandbox, count: int) -> None:
    """`count` agent-readable records in the project store, on a few topics."""
    scope = record_scope(resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env)))
    for number in range(count):
        record_id = f"01900000-0000-7000-8000-{number + 1:012x}"
        topic = TOPICS[number % len(TOPICS)]
        body = f"Note {number} on the {topic} service: step {number % 7} runs after the {topic} check.\n"
        (box.project_root / "records" / f"{record_id}.md").write_text(
            record_markdown(record_id, scope, title=f"{topic.title()} note {number}", body=body, access="agent"),
            "utf-8",
        )


async def recall_timings(url: str, token: str, recalls: int) -> tuple[list[float], list[float]]:
    """Seconds of each `memory_recall` through the SDK's MCP client at `url`/mcp, and of each
    `POST /v1/invoke/context` with the same query, taken in turn (after five of each unmeasured)."""
    headers = {"Authorization": f"Bearer {token}"}
    arguments = {"query": "release check", "budget": 512}
    mcp_times: list[float] = []
    api_times: list[float] = []
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, trust_env=False) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        deadline = time.monotonic() + RECALL_BUDGET_S
        for number in range(recalls + 5):
            began = time.perf_counter()
            result = await client.call_tool("memory_recall", arguments)
            elapsed = time.perf_counter() - began
            assert result.is_error is False, result.structured_content
            began = time.perf_counter()
            answer = await http.post(f"{url}/v1/invoke/context", json={"version": 1, **arguments})
            api_elapsed = time.perf_counter() - began
            assert answer.status_code == 200, answer.status_code
            if number >= 5:
                mcp_times.append(elapsed)
                api_times.append(api_elapsed)
            if time.monotonic() > deadline:
                print(f"remote recall: stopped after {number + 1} calls at the time budget", file=sys.stderr)
                break
    return mcp_times, api_times


def remote_recall(box: Sandbox, token: str, recalls: int) -> dict[str, float]:
    """p50 and p95 of a remote recall over `/mcp` and `/v1/invoke/context` of a real team server."""
    process = subprocess.Popen([str(SBUF), "--project", "serve", "--port", "0", "--team"], cwd=box.cwd,
                               env=box.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert process.stderr is not None
        address = next(found.group(1) for line in process.stderr if (found := LISTENING.search(line)))
        threading.Thread(target=process.stderr.read, daemon=True).start()  # one log line per request
        mcp_times, api_times = asyncio.run(recall_timings(f"http://{address}", token, recalls))
    finally:
        process.terminate()
        process.wait(timeout=30)
    return {
        "remote_mcp_recall_p50": statistics.median(mcp_times),
        "remote_mcp_recall_p95": statistics.quantiles(mcp_times, n=20)[-1],
        "remote_api_context_p50": statistics.median(api_times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--recalls", type=int, default=200)
    options = parser.parse_args()
    requests = options.requests
    with tempfile.TemporaryDirectory() as base:
        box = Sandbox.create(Path(base))
        assert box.sbuf("--project", "init").returncode == 0
        timed_run(["--version"], box.cwd, box.env)
        version = statistics.median(timed_run(["--version"], box.cwd, box.env)[0] for _ in range(10))
        measured, token, elsewhere = in_process(box)
        scope = record_scope(resolve_store(View.PROJECT, box.cwd, PlatformDirs.from_environ(box.env)))
        (box.project_root / "records" / f"{STORED}.md").write_text(
            record_markdown(STORED, scope, title="Stored", body="A record of this store.\n", access="agent"), "utf-8"
        )
        member, other = {"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {elsewhere}"}
        served = p50s_through(box, ["--team"], requests, {
            "authenticated_get_records": ("/v1/records", member, 200),
            "refused_get_records": ("/v1/records", {}, 401),
            "missing_get_record": (f"/v1/records/{MISSING}", member, 404),
            "other_scope_get_record": (f"/v1/records/{STORED}", other, 404),
        })  # fmt: skip
        measured.update({f"team_{name}": seconds for name, seconds in served.items()})
        seed(box, options.records - 1)  # beside the one record already stored
        print(f"remote recall: {options.recalls} calls on {options.records} records ...", file=sys.stderr)
        measured.update(remote_recall(box, token, options.recalls))
    rows = result_rows(measured, TARGETS, version)
    print(f"sbuf --version: {version * 1000:.1f} ms ({TOKENS} tokens in the store)")
    for row in rows:
        seconds = measured[row["name"]]
        print(f"{row['name']:>40}: {seconds * 1e6:9.1f} µs  ({seconds / version:.4f} × --version)  "
              f"meets target: {row['meets_target']}")  # fmt: skip
        row["microseconds"] = round(seconds * 1e6, 1)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"when": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
                                   "version_s": round(version, 4), "tokens": TOKENS, "requests": requests,
                                   "records": options.records, "recalls": options.recalls,
                                   "results": rows}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
