"""A read never stalls on embedding a whole store: a one-shot `sbuf invoke` embeds at most a small
batch, answers from what exists and says the vectors are incomplete, `sbuf sync` embeds the rest,
and a terminal sync that embeds everything shows its progress."""

from __future__ import annotations

import json
import os
import pty
import select
import sqlite3
import subprocess
import time

from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.index.sync import READ_EMBED_LIMIT
from tests.helpers import SBUF
from tests.mcp.conftest import Store, store  # noqa: F401 - fixture

RECORDS = 100  # more embedding texts than one read embeds
TIMEOUT_S = 120.0  # a guard against a hung process, never a speed assertion


def many_records(store: Store) -> None:  # noqa: F811
    for number in range(RECORDS):
        record_id = f"0190a6b3-7c1e-7a51-9c39-{number:012x}"
        store.write(record_id, title=f"Harbour note {number}", body=f"Ferry {number} leaves the harbour at dawn.\n")


def vector_rows(store: Store) -> int:  # noqa: F811
    paths = resolve_store(View.PROJECT, store.box.cwd, PlatformDirs.from_environ(store.box.env))
    with sqlite3.connect(paths.index_path) as conn:
        return int(conn.execute("SELECT count(*) FROM vectors").fetchone()[0])


def test_a_one_shot_read_of_a_store_without_vectors_answers_from_what_exists_and_says_so(store: Store) -> None:  # noqa: F811
    many_records(store)
    env = store.box.env_with(STORMBUFFER_NO_DAEMON="1")
    query = json.dumps({"version": 1, "query": "ferry"})
    done = store.box.sbuf("--project", "invoke", "context", env=env, input=query)
    receipt = json.loads(done.stdout)["result"]["receipt"]
    assert done.returncode == 0 and done.stderr == ""
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("hybrid", "vector_projection_incomplete")
    assert vector_rows(store) == READ_EMBED_LIMIT  # one small batch, not the store
    found = store.box.sbuf("--project", "invoke", "search", env=env, input=query)
    assert found.returncode == 0 and len(json.loads(found.stdout)["result"]) > 0
    assert vector_rows(store) == 2 * READ_EMBED_LIMIT
    status = json.loads(store.box.sbuf("--project", "status", "--json", env=env).stdout)
    assert status["vectors_pending"] == RECORDS - 2 * READ_EMBED_LIMIT
    assert store.box.sbuf("--project", "sync", env=env).returncode == 0
    assert vector_rows(store) == RECORDS
    again = store.box.sbuf(
        "--project", "invoke", "context", env=env, input=json.dumps({"version": 1, "query": "ferry"})
    )
    receipt = json.loads(again.stdout)["result"]["receipt"]
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("hybrid", None)
    assert json.loads(store.box.sbuf("--project", "status", "--json", env=env).stdout)["vectors_pending"] == 0


def test_a_terminal_sync_that_embeds_the_store_shows_progress(store: Store) -> None:  # noqa: F811
    many_records(store)
    main, child = pty.openpty()
    process = subprocess.Popen(
        [str(SBUF), "--project", "sync"], cwd=store.box.cwd, env=store.box.env_with(TERM="xterm"),
        stdin=child, stdout=child, stderr=child, close_fds=True,
    )  # fmt: skip
    os.close(child)
    output = b""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    os.close(main)
    assert process.wait(timeout=TIMEOUT_S) == 0
    text = output.decode("utf-8", "replace")
    assert "Embedding" in text and "embeddings/s" in text
    assert vector_rows(store) >= RECORDS
