"""`sbuf` sync, watch, reindex, doctor, gc, search and context, run as real processes with the real model."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tests.helpers import ESC, SBUF, Sandbox, lock_held_elsewhere, record_markdown, tree_digest

ID_A = "01890a5d-ac96-774b-bcce-b302099a8001"
ID_B = "01890a5d-ac96-774b-bcce-b302099a8002"
ID_C = "01890a5d-ac96-774b-bcce-b302099a8003"
REFERENCE_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "reference-store"
REFERENCE_RECORD = "019fd5d7-6e0c-7d93-b9fe-54b02f7f11e9"


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The stderr lines of a command that exited 1, each an `error:` line."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), result.stderr
    return lines


def project_store(sandbox: Sandbox) -> str:
    """Initialize the project store; returns its record scope."""
    ok(sandbox.sbuf("--project", "init"))
    return "project:" + json.loads(ok(sandbox.sbuf("--project", "status", "--json")))["project_id"]


def put(root: Path, record_id: str, scope: str, title: str, body: str, name: str | None = None) -> Path:
    path = root / "records" / (name or f"{record_id}.md")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(record_markdown(record_id, scope, title=title, body=body, access="agent"), encoding="utf-8")
    return path


def start_watcher(sandbox: Sandbox) -> subprocess.Popen[str]:
    return subprocess.Popen([str(SBUF), "--project", "watch", "--interval-ms", "50"], cwd=sandbox.cwd, env=sandbox.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def counts(stdout: str) -> dict[str, int]:
    return {name: int(value) for name, value in (line.split(": ") for line in stdout.splitlines())}


def test_sync_reports_counts_and_each_invalid_record(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Deploy ritual", "Two approvals before production deploys.")
    assert counts(ok(sandbox.sbuf("--project", "sync"))) == {
        "Indexed": 1, "Skipped": 0, "Removed": 0, "Invalid": 0, "Embedded": 1
    }  # fmt: skip
    broken = sandbox.project_root / "records" / "broken.md"
    broken.write_text("+++\nformat_version = 1\n+++\n\nno fields\n")
    foreign = put(sandbox.project_root, ID_B, "project:elsewhere", "Foreign", "Not ours.")
    before = tree_digest(sandbox.project_root / "records")
    result = sandbox.sbuf("--project", "sync")
    assert counts(result.stdout) == {"Indexed": 0, "Skipped": 1, "Removed": 0, "Invalid": 2, "Embedded": 0}
    assert sorted(failed(result)) == [
        f"error: invalid canonical record {foreign.name}: record is outside the selected store scope",
        "error: invalid canonical record broken.md: frontmatter TOML is invalid: missing field `id`",
    ]
    for args in (("watch", "--once"), ("reindex",)):
        lines = failed(sandbox.sbuf("--project", *args))
        assert any("invalid canonical record broken.md" in line for line in lines), args
    for args in (("search", "deploy", "--json"), ("context", "deploy")):  # reads answer from the valid records
        read = sandbox.sbuf("--project", *args)
        assert read.returncode == 0 and "Deploy ritual" in read.stdout, args
        assert "warning: the store is degraded: records/broken.md is invalid and was left out" in read.stderr
    assert tree_digest(sandbox.project_root / "records") == before


def test_watch_once_and_reindex(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Cache policy", "Caches are warmed before traffic shifts.")
    assert ok(sandbox.sbuf("--project", "watch", "--once")) == "Watch cycles: 1\n"
    out = ok(sandbox.sbuf("--project", "reindex"))
    assert out.startswith("Reindexed: 1\nSemantic index: rebuilt (")
    assert (sandbox.project_root / "index.sqlite3").is_file()


def test_search_cards_are_sanitized(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    ok(sandbox.sbuf("--project", "add", "--title", "Project\u202e collision\u2028card", "--body", "Collision body."))
    out = ok(sandbox.sbuf("--project", "search", "collision"))
    assert "Project collision card\n  ID: " in out
    assert f"  Kind: fact  Scope: project ({scope})\n" in out and "\n  Score: " in out
    assert "\t" not in out and "\u202e" not in out and "\u2028" not in out


def test_search_json_and_project_view_order(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    ok(sandbox.sbuf("--global", "init"))
    put(sandbox.global_root, ID_A, "global", "Branch naming", "Feature branches carry the ticket number.")
    put(sandbox.project_root, ID_B, scope, "Branch naming", "Feature branches carry the ticket number.")
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "branch naming", "--json")))
    assert [hit["scope"] for hit in hits] == [scope, "global"]
    assert list(hits[0]) == [
        "record_id",
        "chunk_id",
        "title",
        "kind",
        "scope",
        "status",
        "access",
        "excerpt",
        "sources",
        "path",
        "score",
        "lexical_match_reason",
        "match_reasons",
        "vector_distance",
    ]
    assert hits[0]["path"] == str(sandbox.project_root.resolve() / "records" / f"{ID_B}.md")
    assert hits[0]["match_reasons"][:2] == ["lexical:exact_title", f"vector:distance={hits[0]['vector_distance']:.6f}"]
    assert ok(sandbox.sbuf("--project", "search", "!!! ???", "--json")) == "[]\n"
    local = json.loads(ok(sandbox.sbuf("--local", "search", "branch naming", "--json")))
    assert [hit["scope"] for hit in local] == [scope]


def test_an_invalid_global_record_degrades_the_project_view_but_not_the_local_view(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    ok(sandbox.sbuf("--global", "init"))
    put(sandbox.project_root, ID_B, scope, "Local fact", "Only the project knows this.")
    (sandbox.global_root / "records" / "broken.md").write_text("not a record\n")
    assert len(json.loads(ok(sandbox.sbuf("--local", "search", "project knows", "--json")))) == 1
    degraded = sandbox.sbuf("--project", "search", "project knows", "--json")
    assert degraded.returncode == 0 and len(json.loads(degraded.stdout)) == 1
    assert degraded.stderr.splitlines() == [
        "warning: the store is degraded: records/broken.md (global store) is invalid and was left out (Markdown is "
        "invalid: record must begin with a TOML opening delimiter (`+++`))"
    ]


def test_context_prints_the_contract_blocks_and_a_hybrid_receipt(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Paging", "The on-call engineer is phoned when production alerts fire.")
    put(sandbox.project_root, ID_B, scope, "Coffee", "The grinder is cleaned every Friday.")
    out = ok(sandbox.sbuf("--project", "context", "who gets called about outages at night", "--budget", "5", "--json"))
    assert out.startswith('{\n  "contract": {') and ESC not in out
    result = json.loads(out)
    assert list(result) == ["contract", "blocks", "receipt"]
    receipt = result["receipt"]
    assert receipt["retrieval_mode"] == "hybrid" and receipt["semantic_fallback"] is None
    assert receipt["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert receipt["budget"] == 5 and receipt["used_tokens"] == 5 and receipt["truncated"] is True
    assert receipt["access"] == ["human", "agent"] and receipt["current_scope"] == scope
    assert result["blocks"][0]["record_id"] == ID_A and result["blocks"][0]["token_count"] == 5


def test_search_shows_when_a_sentence_raised_a_hit(sandbox: Sandbox) -> None:
    """A long record that mentions the asked fact in passing is weighed by its closest sentence too,
    and `sbuf search --json` says so in its reasons; a one-sentence record has no such reason."""
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Weekly routine", (
        "I'm trying to plan my week better. Work has been busy and I keep missing the gym in the mornings, so I "
        "want a routine that fits around my meetings. By the way, I finally finished episode 50 of the History of "
        "Rome podcast on my commute yesterday, which took me three months. Can you suggest a schedule that still "
        "leaves time for cooking dinner and some reading in the evenings?"))  # fmt: skip
    put(sandbox.project_root, ID_B, scope, "Podcast tips", "Podcasts are a good way to learn during a commute.")
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "Which podcast episode did I just finish?", "--json")))
    reasons = {hit["record_id"]: hit["match_reasons"] for hit in hits}
    assert any(reason.startswith("vector:sentence_distance=") for reason in reasons[ID_A])
    assert not any(reason.startswith("vector:sentence_distance=") for reason in reasons[ID_B])


def test_without_a_model_retrieval_is_lexical_and_reindex_warns(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Paging", "The on-call engineer is phoned when alerts fire.")
    shutil.rmtree(sandbox.base / "cache" / "stormbuffer" / "models")
    receipt = json.loads(ok(sandbox.sbuf("--project", "context", "on-call engineer", "--json")))["receipt"]
    assert (receipt["retrieval_mode"], receipt["semantic_fallback"]) == ("lexical", "model_unavailable")
    assert receipt["embedding_model"] is None
    hits = json.loads(ok(sandbox.sbuf("--project", "search", "on-call engineer", "--json")))
    assert hits[0]["record_id"] == ID_A and hits[0]["vector_distance"] is None
    result = sandbox.sbuf("--project", "reindex")
    assert result.returncode == 0 and result.stdout == "Reindexed: 1\n"
    assert result.stderr.startswith("warning: semantic index unavailable: the local model is not ready")
    doctor = ok(sandbox.sbuf("--project", "doctor"))
    assert "Semantic retrieval: lexical fallback" in doctor and "0 failure(s), 1 warning(s)" in doctor


def test_a_locked_projection_does_not_stop_search(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Parking", "Visitors park in the north garage.")
    ok(sandbox.sbuf("--project", "sync"))
    with lock_held_elsewhere(sandbox.project_root / "projection.lock"):
        result = json.loads(ok(sandbox.sbuf("--project", "context", "north garage", "--json")))
        assert [block["record_id"] for block in result["blocks"]] == [ID_A]
        assert result["receipt"]["retrieval_mode"] == "hybrid"
        assert failed(sandbox.sbuf("--project", "sync")) == [
            "error: could not sync the index: SQLite projection is busy; retry the operation"
        ]


def test_an_unopenable_projection_fails_cleanly(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Parking", "Visitors park in the north garage.")
    index = sandbox.project_root / "index.sqlite3"
    index.unlink()
    index.mkdir()
    (line,) = failed(sandbox.sbuf("--project", "search", "garage"))
    assert "the SQLite projection could not be opened" in line and str(sandbox.base) not in line


def test_the_reference_store_works_without_init(sandbox: Sandbox) -> None:
    shutil.copytree(REFERENCE_STORE / ".sbuf", sandbox.project_root)
    before = tree_digest(sandbox.project_root)
    ok(sandbox.sbuf("--project", "sync"))
    query = "canonical records survive projection failures"
    hits = json.loads(ok(sandbox.sbuf("--project", "search", query, "--json")))
    assert hits[0]["record_id"] == REFERENCE_RECORD and hits[0]["lexical_match_reason"] == "exact_title"
    blocks = json.loads(ok(sandbox.sbuf("--project", "context", query, "--budget", "80", "--json")))["blocks"]
    assert REFERENCE_RECORD in [block["record_id"] for block in blocks]
    assert (sandbox.project_root / "index.sqlite3").is_file()
    after = tree_digest(sandbox.project_root)
    assert {name: digest for name, digest in after.items() if name in before} == before


def test_init_embeds_the_records_already_there(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Deploy ritual", "Two approvals before production deploys.")
    assert "Already initialized" in ok(sandbox.sbuf("--project", "init"))
    assert "Status: healthy" in ok(sandbox.sbuf("--project", "doctor"))  # vectors current: no warning
    assert counts(ok(sandbox.sbuf("--project", "sync")))["Embedded"] == 0


def test_doctor_and_repair(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Repairable", "The projection can always be rebuilt.")
    ok(sandbox.sbuf("--project", "sync"))
    healthy = ok(sandbox.sbuf("--project", "--color", "always", "doctor"))
    assert f"{ESC}[1m{ESC}[36mSemantic retrieval{ESC}[39m{ESC}[0m: {ESC}[1m{ESC}[32mready" in healthy
    assert "healthy" in healthy

    (sandbox.project_root / "index.sqlite3").write_bytes(b"corrupt" * 512)
    for suffix in ("-wal", "-shm"):
        (sandbox.project_root / f"index.sqlite3{suffix}").unlink(missing_ok=True)
    (sandbox.project_root / "tmp").mkdir()
    (sandbox.project_root / "tmp" / "stale").write_text("leftover")
    (sandbox.project_root / "locks" / "stale.lock").write_text("")
    diagnosis = sandbox.sbuf("--project", "doctor")
    assert diagnosis.returncode == 1 and "failure: the SQLite projection cannot be opened" in diagnosis.stdout
    assert "  Repair: run `sbuf --project reindex`" in diagnosis.stdout

    repaired = ok(sandbox.sbuf("--project", "doctor", "--repair"))
    assert "Repaired: rebuilt the disposable search projection" in repaired
    assert "Repaired: removed stale disposable metadata tmp/stale" in repaired
    assert "Repaired: removed stale disposable metadata locks/stale.lock" in repaired
    assert "Status: healthy" in repaired
    assert not (sandbox.project_root / "tmp" / "stale").exists()
    assert (sandbox.project_root / "locks" / "mutation.lock").exists()
    assert "Repaired:" not in ok(sandbox.sbuf("--project", "doctor", "--repair"))
    assert json.loads(ok(sandbox.sbuf("--project", "search", "rebuilt", "--json")))[0]["record_id"] == ID_A


def test_doctor_reports_a_model_opening_without_its_saved_graph_until_init(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "Fast start", "The saved graph opens twice as fast.")
    ok(sandbox.sbuf("--project", "sync"))
    (manifest,) = (sandbox.base / "cache" / "stormbuffer" / "models").glob("*/manifest.json")
    data = json.loads(manifest.read_text())
    data["optimized"]["runtime"] = "onnxruntime 0.0.1 x86_64"
    manifest.unlink()  # a hard link to the shared cache: replace the file, never edit it in place
    manifest.write_text(json.dumps(data))
    report = ok(sandbox.sbuf("--project", "doctor"))
    assert "the model opens without its saved optimized graph, about twice as slowly" in report
    assert "(the saved graph was made by onnxruntime 0.0.1 x86_64)" in report
    assert "Repair: run `sbuf init`" in report and "Status: healthy" not in report
    ok(sandbox.sbuf("--project", "init"))
    assert "Status: healthy" in ok(sandbox.sbuf("--project", "doctor"))


def test_gc_removes_disposable_files_and_keeps_the_index_and_the_model_unless_asked(sandbox: Sandbox) -> None:
    scope = project_store(sandbox)
    record = put(sandbox.project_root, ID_C, scope, "Kept", "Records are never collected.")
    ok(sandbox.sbuf("--project", "sync"))
    models = sandbox.base / "cache" / "stormbuffer" / "models"
    orphan = record.with_name(f".{record.name}.4242.1700000000000000000.tmp")  # left by a killed write
    orphan.write_text("half a record")
    dry = ok(sandbox.sbuf("--project", "gc", "--dry-run"))
    assert dry.startswith("Reclaimable: ") and f"records/{orphan.name}\t" in dry and "cache/models" not in dry
    assert "index.sqlite3\t" not in dry
    kept = ok(sandbox.sbuf("--project", "gc"))
    assert kept.startswith("Reclaimed: ") and not orphan.exists()
    assert (sandbox.project_root / "index.sqlite3").is_file()  # cleaning never costs a re-embedding
    assert counts(ok(sandbox.sbuf("--project", "sync")))["Embedded"] == 0
    done = ok(sandbox.sbuf("--project", "gc", "--index"))
    assert "index.sqlite3\t" in done
    assert not (sandbox.project_root / "index.sqlite3").exists()
    assert not list(sandbox.project_root.glob("index.sqlite3*"))
    assert record.is_file() and (sandbox.project_root / "store.toml").is_file() and any(models.rglob("*.onnx"))
    with_models = ok(sandbox.sbuf("--project", "gc", "--models"))
    assert "cache/models/" in with_models and not any(models.rglob("*.onnx"))
    assert record.is_file()


def test_watch_keeps_the_index_in_step_until_interrupted(sandbox: Sandbox) -> None:
    import signal
    import sqlite3
    import time

    scope = project_store(sandbox)
    watcher = start_watcher(sandbox)
    try:
        put(sandbox.project_root, ID_A, scope, "Watched", "Indexed by the watcher.")
        index = sandbox.project_root / "index.sqlite3"
        found: list[tuple[str]] = []
        deadline = time.monotonic() + 120  # generous: this waits for the watcher, it does not measure it
        while not found and time.monotonic() < deadline and watcher.poll() is None:
            time.sleep(0.2)
            with sqlite3.connect(index) as conn:
                found = conn.execute("SELECT title FROM records WHERE id = ?", (ID_A,)).fetchall()
        assert found == [("Watched",)]
    finally:
        watcher.send_signal(signal.SIGINT)
        _out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0 and err == ""


def test_ctrl_c_in_the_middle_of_a_sync_ends_watch_quietly(sandbox: Sandbox) -> None:
    """Once watching, interrupts land at several moments while a record keeps changing, so some fall inside a sync."""
    import signal
    import sqlite3
    import time

    scope = project_store(sandbox)
    records = sandbox.project_root / "records"

    def save(title: str) -> None:  # whole files only, as an editor saves them
        staged = put(sandbox.project_root, ID_A, scope, title, f"Body of {title}.", name="staged.md.tmp")
        staged.replace(records / f"{ID_A}.md")

    def indexed_title() -> list[tuple[str]]:
        with sqlite3.connect(sandbox.project_root / "index.sqlite3") as conn:
            return conn.execute("SELECT title FROM records WHERE id = ?", (ID_A,)).fetchall()

    for round_number, delay in enumerate((0.2, 0.5, 0.9, 1.4)):
        save(f"Round {round_number}")
        watcher = start_watcher(sandbox)
        try:
            deadline = time.monotonic() + 120  # generous: this waits for the watcher, it does not measure it
            while indexed_title() != [(f"Round {round_number}",)] and time.monotonic() < deadline:
                time.sleep(0.05)
            started, edit = time.monotonic(), 0
            while time.monotonic() - started < delay:  # keeps every cycle busy until the interrupt
                save(f"Round {round_number} edit {edit}")
                edit += 1
                time.sleep(0.02)
        finally:
            watcher.send_signal(signal.SIGINT)
            out, err = watcher.communicate(timeout=60)
        assert (watcher.returncode, out, err) == (0, "", ""), round_number
    ok(sandbox.sbuf("--project", "doctor"))


def test_ctrl_c_during_a_sync_lets_that_sync_finish(sandbox: Sandbox) -> None:
    import fcntl
    import os
    import signal
    import sqlite3
    import time

    scope = project_store(sandbox)
    put(sandbox.project_root, ID_A, scope, "First", "Indexed before the burst.")
    index = sandbox.project_root / "index.sqlite3"

    def indexed() -> int:
        with sqlite3.connect(index) as conn:
            return int(conn.execute("SELECT count(*) FROM records").fetchone()[0])

    def without_vector() -> int:  # chunks the sync has not embedded yet
        with sqlite3.connect(index) as conn:
            missing = conn.execute("SELECT count(*) FROM chunks AS c LEFT JOIN vectors AS v "
                                   "ON v.embed_hash = c.embed_hash WHERE v.embed_hash IS NULL")  # fmt: skip
            return int(missing.fetchone()[0])

    def syncing() -> bool:  # the watcher holds the projection lock while it syncs
        fd = os.open(sandbox.project_root / "projection.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    watcher = start_watcher(sandbox)
    try:
        deadline = time.monotonic() + 120  # generous: these wait for the watcher, they do not measure it
        while (not index.is_file() or indexed() != 1) and time.monotonic() < deadline:
            time.sleep(0.05)
        staging = sandbox.project_root / "staging"
        for number in range(200):
            record_id = f"01890a5d-ac96-774b-bcce-b302099b{number:04x}"
            body = f"Burst record {number} about deploys, caches and reviews, long enough to embed for a while."
            put(staging, record_id, scope, f"Burst {number}", body)
        (staging / "records").rename(sandbox.project_root / "records" / "burst")  # all 200 at once
        busy = False  # the burst's sync embeds 200 texts; a cycle with nothing to do holds the lock for far less
        while not busy and time.monotonic() < deadline:
            if syncing():
                time.sleep(0.2)
                busy = syncing()
            time.sleep(0.002)
        assert busy, "the watcher never synced the burst"
    finally:
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=120)
    assert (watcher.returncode, out) == (0, "")
    assert all(re.fullmatch(r"Embedding: \d+ texts left", line) for line in err.splitlines()), err
    assert indexed() == 201  # the interrupted cycle finished: every record is projected
    left = without_vector()  # a backlog is embedded a step per cycle: the next sync does the rest
    assert sandbox.sbuf("--project", "sync").returncode == 0
    assert without_vector() == 0 and left <= 200
