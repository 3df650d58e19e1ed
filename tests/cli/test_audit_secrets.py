"""`sbuf audit` reports records already in a store whose text holds a secret: by record id and rule
family, never the value, and without changing the store (hand-edited files are never blocked)."""

from __future__ import annotations

import json

from tests.helpers import Sandbox, record_markdown, tree_digest

LEAKY_ID = "01890a5d-ac96-774b-bcce-b302099a8061"
CLEAN_ID = "01890a5d-ac96-774b-bcce-b302099a8062"
TOKEN = "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PASSWORD = "Tr0ub4dor-3"


def test_audit_names_the_record_and_family_never_the_value(sandbox: Sandbox) -> None:
    assert sandbox.sbuf("--project", "init").returncode == 0
    scope = "project:" + json.loads(sandbox.sbuf("--project", "status", "--json").stdout)["project_id"]
    records = sandbox.project_root / "records"
    body = f"Publish with NPM_TOKEN={TOKEN}\nand curl -u deploy:{PASSWORD} https://ci.internal\n"
    (records / f"{LEAKY_ID}.md").write_text(record_markdown(LEAKY_ID, scope, body=body), encoding="utf-8")
    (records / f"{CLEAN_ID}.md").write_text(record_markdown(CLEAN_ID, scope), encoding="utf-8")
    before = tree_digest(sandbox.project_root)

    machine = sandbox.sbuf("--project", "audit", "--json")
    human = sandbox.sbuf("--project", "audit")
    assert machine.returncode == 0 and human.returncode == 0, (machine.stderr, human.stderr)
    found = [item for item in json.loads(machine.stdout)["findings"] if item["kind"] == "secret"]
    assert [item["record_ids"] for item in found] == [[LEAKY_ID]]
    assert found[0]["evidence"] == "the record's text holds credential-like material (authorization, npm)"
    assert found[0]["follow_up"] == f"sbuf --project edit {LEAKY_ID}"
    assert f"secret | likely | {LEAKY_ID}" in human.stdout.splitlines()
    for output in (machine.stdout + machine.stderr, human.stdout + human.stderr):
        assert TOKEN not in output and PASSWORD not in output
    assert tree_digest(sandbox.project_root) == before
