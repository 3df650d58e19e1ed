"""The audit trail of a real `sbuf serve --team`: every `/v1/` request, refusals included, leaves one
entry naming who, when, the door, the operation, the status, the record ids and the receipt id, in
a private append-only file; `sbuf team audit` reads and filters it. No token is ever written."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from tests.http.conftest import sandbox_with_stores, start

from .test_server import REMEMBER, STORED, Team, secret_of

HIDDEN = "01900000-0000-7000-8000-0000000000a1"


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    server = start(sandbox_with_stores(tmp_path_factory.mktemp("audit") / "sandbox", None), "--team")
    crew = Team(server)
    for name, role in (("rita", "reader"), ("bot", "agent"), ("alice", "reviewer")):
        crew.make(name, role)
    crew.make("other", "admin", "--scope", "global")
    server.write(STORED, title="Stored fact", body="The deploy runs on Fridays.\n")
    yield crew
    assert crew.server.stop() == 0


def entries(team: Team, *args: str) -> list[dict[str, Any]]:
    read = team.server.box.sbuf("--project", "team", "audit", "--json", *args)
    assert read.returncode == 0, read.stderr
    return [json.loads(line) for line in read.stdout.splitlines()]


def last(team: Team) -> dict[str, Any]:
    return entries(team)[-1]


def test_reads_writes_and_refusals_are_each_one_entry(team: Team) -> None:
    assert team.call(None, "GET", f"/v1/records/{STORED}").status_code == 401
    entry = last(team)
    assert (entry["who"], entry["operation"], entry["status"]) == (None, None, 401)  # refused before routing
    assert entry["door"] == "http" and entry["request"] == f"GET /v1/records/{STORED}" and entry["at"].endswith("Z")

    assert team.call("rita", "GET", f"/v1/records/{STORED}").status_code == 200
    entry = last(team)
    assert (entry["who"], entry["operation"], entry["status"], entry["records"]) == ("rita", "get", 200, [STORED])

    assert team.call("rita", "POST", "/v1/invoke/remember", REMEMBER).status_code == 403
    assert (last(team)["who"], last(team)["operation"], last(team)["status"]) == ("rita", "remember", 403)

    written = team.call("bot", "POST", "/v1/invoke/remember", {**REMEMBER, "title": "Audited"}).json()["result"]
    entry = last(team)
    assert (entry["who"], entry["operation"], entry["records"]) == ("bot", "remember", [written["record_id"]])

    assert team.call("other", "GET", f"/v1/records/{STORED}").status_code == 404
    assert (last(team)["who"], last(team)["status"], last(team)["records"]) == ("other", 404, [STORED])

    approved = team.call("alice", "POST", f"/v1/records/{written['record_id']}/approve")
    assert approved.status_code == 200, approved.text
    assert (last(team)["who"], last(team)["operation"], last(team)["records"]) == (
        "alice", "approve", [written["record_id"]],
    )  # fmt: skip


def test_a_context_entry_holds_its_receipt_and_the_records_it_served(team: Team) -> None:
    answer = team.call("rita", "POST", "/v1/invoke/context", {"version": 1, "query": "when does the deploy run"})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    entry = last(team)
    assert entry["operation"] == "recall" and entry["receipt"] == result["receipt"]["receipt_id"]
    assert entry["records"] == list(dict.fromkeys(block["record_id"] for block in result["blocks"]))
    assert STORED in entry["records"]
    listed = team.call("rita", "GET", "/v1/records")
    assert sorted(last(team)["records"]) == sorted(record["id"] for record in listed.json())


def test_the_audit_command_filters_and_the_file_is_private(team: Team) -> None:
    team.call("rita", "GET", f"/v1/records/{HIDDEN}")
    team.call("bot", "GET", "/v1/records")
    assert {entry["who"] for entry in entries(team, "--who", "rita")} == {"rita"}
    named = entries(team, "--record", HIDDEN)
    assert named and all(HIDDEN in entry["records"] for entry in named)
    assert entries(team, "--since", "2999-01-01") == []
    assert len(entries(team, "--since", "1h")) == len(entries(team)) > 0
    plain = team.server.box.sbuf("--project", "team", "audit", "--who", "rita").stdout.splitlines()
    assert plain and all("  rita  http  " in line for line in plain)
    bad = team.server.box.sbuf("--project", "team", "audit", "--since", "yesterday")
    assert bad.returncode != 0 and "--since must be" in bad.stderr and "Traceback" not in bad.stderr
    trail = team.server.box.project_root / "team" / "audit.jsonl"
    assert stat.S_IMODE(trail.stat().st_mode) == 0o600
    text = trail.read_text(encoding="utf-8")
    for token in team.tokens.values():
        assert token not in text and secret_of(token) not in text
