"""`sbuf import` killed with SIGKILL at random moments: the store is as it was, or fully imported."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, resolve_store
from tests.helpers import SBUF, Sandbox, record_markdown

RECORDS = 200
ROUNDS = 12
STORED = "01890a5d-ac96-774b-bcce-000000000001"  # stored, and overwritten by the archive


def record_id(n: int) -> str:
    return f"01890a5d-ac96-774b-bcce-{n:012x}"


def md_files(paths: StorePaths) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in paths.records.glob("*.md")}


def reset(paths: StorePaths, state: dict[str, bytes]) -> None:
    shutil.rmtree(paths.records)
    paths.records.mkdir()
    for name, data in state.items():
        (paths.records / name).write_bytes(data)
    paths.import_journal.unlink(missing_ok=True)


def wait_for(condition: object, process: subprocess.Popen[bytes], limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not condition() and process.poll() is None:  # type: ignore[operator]
        assert time.monotonic() < deadline, "import neither progressed nor finished"


def test_a_killed_import_leaves_the_store_as_it_was_or_fully_imported(tmp_path: Path) -> None:
    box = Sandbox.create(tmp_path)
    paths = resolve_store(View.GLOBAL, box.cwd, PlatformDirs(box.base / "data", box.base / "cache"))
    initialize_store(paths)
    (paths.records / f"{STORED}.md").write_text(record_markdown(STORED, "global", body="Stored body.\n"))
    (paths.records / "keep.md").write_text(record_markdown(record_id(RECORDS + 1), "global", title="Untouched"))
    texts = {
        record_id(n): record_markdown(record_id(n), "global", title=f"Note {n}", body=f"Imported body {n}.\n" * 30)
        for n in range(1, RECORDS + 1)
    }
    archive = box.base / "large.json"
    records = [{"path": f"records/{key}.md", "markdown": text} for key, text in sorted(texts.items())]
    archive.write_text(json.dumps({"format_version": 1, "source_scope": "global", "records": records}, indent=2))
    before = md_files(paths)
    after = {**before, **{f"{key}.md": text.encode() for key, text in texts.items()}}
    command = [str(SBUF), "import", str(archive), "--on-id", "overwrite"]

    started = time.monotonic()
    subprocess.run(command, env=box.env, cwd=box.cwd, check=True, capture_output=True)
    duration = time.monotonic() - started
    assert md_files(paths) == after

    rng = random.Random(702)
    outcomes: Counter[str] = Counter()
    for round_number in range(ROUNDS):
        reset(paths, before)
        process = subprocess.Popen(command, env=box.env, cwd=box.cwd, stdout=subprocess.DEVNULL)
        if round_number % 2:  # a random moment anywhere in the run
            time.sleep(rng.uniform(0, duration))
        else:  # a random moment after the commit point, while files are being renamed into place
            wait_for(paths.import_journal.exists, process)
            time.sleep(rng.choice([0, 0, 0.0005, 0.001, 0.002]))
        process.send_signal(signal.SIGKILL)
        process.wait()
        journal_left = paths.import_journal.exists()
        on_disk = md_files(paths)
        if not journal_left:
            assert on_disk in (before, after), f"round {round_number}: partial import without a journal"
        # Any later read finishes an interrupted import before it looks at the records.
        listed = subprocess.run([str(SBUF), "list", "--all"], env=box.env, cwd=box.cwd, capture_output=True)
        assert listed.returncode == 0, listed.stderr
        recovered = md_files(paths)
        assert recovered in (before, after), f"round {round_number}: partial import after recovery"
        assert not paths.import_journal.exists()
        if journal_left:
            assert recovered == after
        outcomes["rolled forward" if journal_left else "complete" if recovered == after else "untouched"] += 1
        if journal_left and on_disk not in (before, after):
            outcomes["killed mid-rename"] += 1
    assert outcomes["untouched"] and outcomes["rolled forward"], outcomes
