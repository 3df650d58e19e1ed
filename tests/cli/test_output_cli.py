"""Human output that helps: nothing found is said, weak vector-only hits stay out of the human
search view (never out of `--json`), `context` prints JSON to programs and text at a terminal,
`list --json`, and ids typed in part."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import Sandbox, run_at_terminal

NOTES = {
    "Releases ship on Tuesdays": "Releases ship on Tuesdays after the magnetar check.",
    "Build command": "Run the build with just before pushing.",
    "Staging restarts": "The staging server restarts every night.",
}


@pytest.fixture
def notes(sandbox: Sandbox) -> dict[str, str]:
    """Title → id of three agent-readable memories in a project store."""
    assert sandbox.sbuf("--project", "init").returncode == 0
    ids = {}
    for title, body in NOTES.items():
        added = sandbox.sbuf("--project", "add", "--access", "agent", "--title", title, "--body", body)
        assert added.returncode == 0, added.stderr
        ids[title] = added.stdout.strip()
    return ids


def test_an_empty_store_says_so(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    listed = sandbox.sbuf("--project", "list")
    assert (listed.returncode, listed.stdout) == (0, "")
    assert listed.stderr.startswith("No active memories in this store (--all includes")
    assert sandbox.sbuf("--project", "list", "--all").stderr == "No memories in this store\n"
    assert json.loads(sandbox.sbuf("--project", "list", "--json").stdout) == []


def test_nonsense_finds_no_memory_for_people_but_every_hit_for_machines(
    sandbox: Sandbox, notes: dict[str, str]
) -> None:
    nonsense = sandbox.sbuf("--project", "search", "zzzqqqxx")
    assert (nonsense.returncode, nonsense.stdout) == (0, "")
    assert "No memories match 'zzzqqqxx'" in nonsense.stderr
    assert re.search(r"^\d+ weak semantic match\(es\) not shown \(--json lists every hit\)$", nonsense.stderr, re.M)
    machine = json.loads(sandbox.sbuf("--project", "search", "zzzqqqxx", "--json").stdout)
    assert machine and all(not any(r.startswith("lexical:") for r in hit["match_reasons"]) for hit in machine)
    punctuation = sandbox.sbuf("--project", "search", "!!!")
    assert punctuation.returncode == 0 and "No memories match '!!!'" in punctuation.stderr
    found = sandbox.sbuf("--project", "search", "magnetar").stdout
    assert found.startswith("Releases ship on Tuesdays\n") and notes["Releases ship on Tuesdays"] in found


def test_context_prints_json_to_programs_and_text_at_a_terminal(sandbox: Sandbox, notes: dict[str, str]) -> None:
    piped = sandbox.sbuf("--project", "context", "magnetar check")
    assert piped.returncode == 0 and list(json.loads(piped.stdout)) == ["contract", "blocks", "receipt"]
    status, shown = run_at_terminal(sandbox, ["--project", "context", "magnetar check", "--limit", "1"])
    shown = shown[shown.index("Releases ship on Tuesdays") :].replace("\r\n", "\n")  # after the progress bar
    assert status == 0 and "{" not in shown
    human = sandbox.sbuf("--project", "context", "magnetar check", "--limit", "1", "--text").stdout
    assert human.startswith("Releases ship on Tuesdays\n") and "{" not in human
    assert "  | Releases ship on Tuesdays after the magnetar check." in human
    assert re.search(r"^Receipt: [0-9a-f-]{36} \((hybrid|lexical), \d+/512 tokens", human, re.M)
    assert len(human.splitlines()) < 10
    assert shown.split("Receipt:")[0] == human.split("Receipt:")[0]
    status, forced = run_at_terminal(sandbox, ["--project", "context", "magnetar check", "--json"])
    assert status == 0 and json.loads(forced[forced.index("{") :])["blocks"][0]["title"] == "Releases ship on Tuesdays"
    assert json.loads(sandbox.sbuf("--project", "context", "magnetar", "--text", "--json").stdout)["blocks"]


def test_list_json_holds_the_records(sandbox: Sandbox, notes: dict[str, str]) -> None:
    listed = json.loads(sandbox.sbuf("--project", "list", "--json").stdout)
    assert sorted(record["id"] for record in listed) == sorted(notes.values())
    assert {record["title"] for record in listed} == set(NOTES)


def test_ids_may_be_typed_as_a_unique_prefix_or_suffix(sandbox: Sandbox, notes: dict[str, str]) -> None:
    record_id = notes["Build command"]
    for part in (record_id[-12:], record_id[-12:].upper(), record_id[:23]):  # 48 random bits: unique
        shown = sandbox.sbuf("--project", "show", part)
        assert shown.returncode == 0 and f'id = "{record_id}"' in shown.stdout, shown.stderr
    shared = record_id[:4]  # made in the same minute: every id starts alike
    ambiguous = sandbox.sbuf("--project", "archive", shared)
    assert ambiguous.returncode == 1
    assert f"error: ID `{shared}` matches 3 memories (" in ambiguous.stderr and "type more of it" in ambiguous.stderr
    unknown = sandbox.sbuf("--project", "show", "ffff-ffff")
    assert unknown.stderr == "error: ID `ffff-ffff`: no memory's id starts or ends with it\n"
    typo = sandbox.sbuf("--project", "show", "01a232ce-eb9g")
    assert typo.stderr.startswith("error: invalid ID `01a232ce-eb9g`: must be a valid UUID")
