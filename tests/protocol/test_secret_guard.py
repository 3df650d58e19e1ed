"""The secret guard on every agent-originated write: remember, update, propose and supersede.

Every credential pattern is refused in every scanned field (title, body, tags, aliases and each
source text field) with `secret_detected`, nothing is written, and the secret appears nowhere in
the answer. Allowed placeholders pass. Human CLI writes are not checked. The full matrix runs in
process; a rotation of it runs through real `sbuf invoke` processes, checking stdout and stderr.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from stormbuffer.protocol.invoke import encode
from tests.helpers import SBUF, tree_digest
from tests.protocol.conftest import LOCKFILE_ID, Store

TAIL = "A1b2C3d4E5f6G7h8J9k0LmNoPq"
SECRETS = {
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA",
    "authorization": "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.cGF5bG9hZA.c2lnbmF0dXJl",
    "proxy_authorization": "proxy-authorization: Basic dXNlcjphLXJlYWwtcGFzc3dvcmQ=",
    "bearer_word": "call it with bearer=Zk29xLq81mWp",
    **{
        f"token_{prefix}": f"token {prefix}{TAIL}"
        for prefix in (
            "ghp_",
            "gho_",
            "ghu_",
            "ghs_",
            "github_pat_",
            "glpat-",
            "sk_live_",
            "rk_live_",
            "sk-proj-",
            "xoxb-",
            "xoxp-",
            "xoxa-",
        )
    },
    "google_api_key": "key AIza" + "0123456789abcdefghijklmnopqrstuv",
    "aws_access_key": "AWS_ACCESS_KEY_ID=AKIA0123456789ABCDEF",
    "credential_url": "postgres://service:correct-horse-battery@db.internal/app",
}
ALLOWED = [
    "fixed in 3f786850e387550fdab836ed7e6dc881de23001b",
    "record 0190f5c2-7a3e-7cc1-9a0e-5f3d2b1c4a99 was replaced",
    "Authorization: Bearer ${YOUR_TOKEN}",
    "set the token to github_pat_example_placeholder",
    "https://user:<password>@example.com/docs",
    "https://user:password@example.com/docs",
    "the sk- prefix marks such keys",
]
FIELDS = ("title", "body", "tags", "aliases", "reference", "actor", "revision", "content_hash")
OPERATIONS = ("remember", "update", "propose", "supersede")
SECRET_DETECTED = {
    "code": "secret_detected",
    "message": "candidate contains credential-like material; remove it before retrying",
}
SOURCE = {"kind": "conversation", "reference": "session 7", "actor": "agent"}


def request_with(operation: str, field: str, text: str) -> dict[str, Any]:
    """A request for `operation` that is valid apart from `text` in `field`."""
    source = {**SOURCE, field: text} if field in ("reference", "actor", "revision", "content_hash") else SOURCE
    values: dict[str, Any] = {"title": "Secrets stay out of memory", "body": "Keep credentials in the vault."}
    if field in ("title", "body"):
        values[field] = text
    elif field in ("tags", "aliases"):
        values[field] = [text]
    if operation == "remember":
        return {"version": 1, "kind": "fact", **values, "source": source}
    if operation == "update":
        return {"version": 1, "id": LOCKFILE_ID, **values, "source": source}
    if operation == "propose":
        return {"version": 1, "kind": "fact", "access": "agent", **values, "sources": [source]}
    return {"version": 1, "id": LOCKFILE_ID, **values, "sources": [source]}


def distinctive(secret: str) -> list[str]:
    """Parts of a secret that must never be printed (the longest word of each line)."""
    return [max(line.split(), key=len) for line in secret.splitlines()]


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("field", FIELDS)
def test_every_pattern_in_every_field_is_refused_in_process(store: Store, operation: str, field: str) -> None:
    before = tree_digest(store.records)
    for name, secret in SECRETS.items():
        envelope = store.handle(operation, request_with(operation, field, secret))
        assert envelope.get("error") == SECRET_DETECTED, (name, envelope)
        text = encode(envelope)
        assert all(part not in text for part in distinctive(secret)), name
    assert tree_digest(store.records) == before


@pytest.mark.parametrize("operation", OPERATIONS)
def test_allowed_placeholders_are_written(store: Store, operation: str) -> None:
    target = LOCKFILE_ID
    for index, text in enumerate(ALLOWED):
        request = {**request_with(operation, "body", f"{text}\nNote {index}."), "title": f"Placeholder note {index}"}
        if "id" in request:
            request["id"] = target
        envelope = store.handle(operation, request)
        assert envelope["ok"] and envelope["result"]["outcome"] in ("requires_approval", "accepted"), (text, envelope)
        if operation == "supersede":
            target = envelope["result"]["id"]  # the replacement is now the active record


@pytest.mark.parametrize("operation", OPERATIONS)
def test_secrets_never_reach_stdout_or_stderr(store: Store, operation: str) -> None:
    """A rotation of patterns over fields through real processes (the full matrix runs in process above)."""
    before = tree_digest(store.records)
    names = list(SECRETS)
    for index, field in enumerate(FIELDS):
        secret = SECRETS[names[(index + OPERATIONS.index(operation) * len(FIELDS)) % len(names)]]
        completed = subprocess.run(
            [str(SBUF), "--project", "invoke", operation],
            input=json.dumps(request_with(operation, field, secret)),
            capture_output=True,
            text=True,
            cwd=store.cwd,
            env=store.env,
            check=False,
        )
        assert completed.returncode == 1 and completed.stderr == ""
        assert json.loads(completed.stdout)["error"] == SECRET_DETECTED
        for part in distinctive(secret):
            assert part not in completed.stdout and part not in completed.stderr
    assert tree_digest(store.records) == before


def test_human_cli_writes_are_not_checked(store: Store) -> None:
    body = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.cGF5bG9hZA.c2lnbmF0dXJl"
    completed = subprocess.run(
        [str(SBUF), "--project", "add", "--title", "Header format", "--kind", "fact", "--body", body],
        capture_output=True,
        text=True,
        cwd=store.cwd,
        env=store.env,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert any(body in path.read_text(encoding="utf-8") for path in store.records.glob("*.md"))
