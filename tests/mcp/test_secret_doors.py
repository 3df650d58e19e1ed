"""The secret guard through the real doors, on token families the reference's rules never knew: a
`sbuf invoke remember` process and an MCP client's `memory_remember` and `memory_update` calls are
refused with the fixed `secret_detected` message, the value appears nowhere, and no file is written."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import tree_digest

from .conftest import ACTIVE_ID, SOURCE, Store, connect, envelope

pytestmark = pytest.mark.anyio

SECRET_DETECTED = {
    "code": "secret_detected",
    "message": "candidate contains credential-like material; remove it before retrying",
}
NEW_FAMILIES = {
    "npm": "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "huggingface": "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",
    "curl_user": "curl -u deploy:Tr0ub4dor-3 https://ci.internal/job",
    "aws_session": "<AccessKeyId>ASIAQ4RZ7KXM2PLN5VBT</AccessKeyId>",
    "gitlab_ci_job": "CI_JOB_TOKEN=glcbt-64_kR2mWq9XzL5vN8pT3yB",
    "stripe_test": "STRIPE_KEY=sk_test_51Hx9kLmNoPqRsTuVwXyZaBcDe",
}


def distinctive(secret: str) -> list[str]:
    """The parts of a secret that must never be printed: its words of eight characters or more."""
    return [part for part in re.split(r"[\s:=<>]+", secret) if len(part) >= 8]


def records(store: Store) -> dict[str, str]:
    return tree_digest(store.box.project_root / "records")


@pytest.mark.parametrize(("family", "secret"), NEW_FAMILIES.items())
def test_invoke_remember_refuses_a_new_family(store: Store, family: str, secret: str) -> None:
    request = {"version": 1, "title": "Deploy access", "kind": "fact", "body": f"Use {secret} here.", "source": SOURCE}
    before = records(store)
    done = store.box.sbuf("--project", "invoke", "remember", input=json.dumps(request))
    assert (done.returncode, done.stderr) == (1, "")
    assert json.loads(done.stdout)["error"] == SECRET_DETECTED
    assert all(part not in done.stdout for part in distinctive(secret))
    assert records(store) == before


async def test_mcp_writes_refuse_new_families(store: Store) -> None:
    store.write(ACTIVE_ID, title="Release constraint", body="Releases ship on Tuesdays.\n")
    before = records(store)
    async with connect(store.box, "--project", "--allow-candidate-writes") as client:
        for secret in NEW_FAMILIES.values():
            calls = [
                ("memory_remember", {"title": "Access", "kind": "fact", "body": secret, "source": SOURCE}),
                ("memory_update", {"id": ACTIVE_ID, "body": f"Now: {secret}", "source": SOURCE}),
            ]
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                assert envelope(result)["error"] == SECRET_DETECTED, (tool, secret)
                dumped = result.model_dump_json()
                assert all(part not in dumped for part in distinctive(secret))
    assert records(store) == before


def test_read_only_commands_never_import_the_engine(store: Store) -> None:
    """`python -X importtime` (PYTHONPROFILEIMPORTTIME) lists every module a command imports."""
    env = {**store.box.env, "PYTHONPROFILEIMPORTTIME": "1", "STORMBUFFER_NO_DAEMON": "1"}  # this process imports
    search = json.dumps({"version": 1, "query": "release day"})
    for args, stdin in ((("--version",), None), (("--project", "invoke", "search"), search)):
        done = store.box.sbuf(*args, env=env, input=stdin)
        assert done.returncode == 0 and "import time:" in done.stderr, done.stderr[-500:]
        assert not guard_modules(done.stderr), args
    remember = {"version": 1, "title": "Day", "kind": "fact", "body": "Releases ship on Tuesdays.", "source": SOURCE}
    done = store.box.sbuf("--project", "invoke", "remember", env=env, input=json.dumps(remember))
    assert {"betterleaks", "stormbuffer.core.secrets"} <= guard_modules(done.stderr)  # a write imports both


def guard_modules(importtime: str) -> set[str]:
    """The guard's and the engine's modules in a `-X importtime` report."""
    names = {line.rpartition("|")[2].strip() for line in importtime.splitlines() if line.startswith("import time:")}
    return {name for name in names if name.startswith(("betterleaks", "stormbuffer.core.secrets"))}
