"""`sbuf invoke` answers the same bytes through a warm daemon as in its own process: every example
of schema/v1, each on a fresh copy of the contract store, once with `STORMBUFFER_NO_DAEMON=1` and
once through one daemon that serves every copy (the environments share a runtime directory, as one
user's shells do). Only values generated per call are masked (receipt ids and times, new ids).

On both engines: on PostgreSQL every copy has a copy of one database seeded with the contract store,
so the one daemon answers each caller from the database its environment names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from stormbuffer.conformance.engines import move_to_postgresql, on_database, record_files
from stormbuffer.conformance.examples import Example
from stormbuffer.core.stores import DATABASE_URL_ENV, DIRECTORY, POSTGRESQL
from stormbuffer.daemon import relay
from stormbuffer.embedding import DEFAULT_VARIANT
from stormbuffer.protocol.invoke import encode
from tests.contract.test_invoke_examples import CONTRACT_STORE, EXAMPLES, is_hybrid, load, mask_generated
from tests.helpers import SBUF, link_tree, sbuf_env

Copy = Callable[..., tuple[Path, dict[str, str]]]
TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
CONTRACT_RECORDS = {path.name for path in (CONTRACT_STORE / ".sbuf" / "records").glob("*.md")}
TIMEOUT = 120.0  # seconds; a guard against a hung process, never a speed assertion


def answer(
    operation: str, view: str, request: object, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SBUF), f"--{view}", "invoke", operation], cwd=cwd, env=env, input=json.dumps(request).encode(),
        capture_output=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip


@pytest.fixture(params=[DIRECTORY, POSTGRESQL])
def copy(request: pytest.FixtureRequest, tmp_path: Path) -> Copy:
    """`copy(base, models, writes=True, **env)`: a fresh copy of the contract store below `base` on the
    engine of the parameter, with `models` as its model cache; its working directory and environment.
    On PostgreSQL a copy for an example that writes gets a database of its own; the copies for the
    others share one (they change no record)."""
    template: str | None = None
    databases: dict[str, str] = {}
    if request.param == POSTGRESQL:
        template = request.getfixturevalue("postgres_url")
        shutil.copytree(CONTRACT_STORE, tmp_path / "template")
        move_to_postgresql(tmp_path / "template" / ".sbuf", {DATABASE_URL_ENV: template})
        copy_database = request.getfixturevalue("postgres_copy")

    def made(base: Path, models: Path, *, writes: bool = True, **env: str) -> tuple[Path, dict[str, str]]:
        shutil.copytree(CONTRACT_STORE, base / "store")
        link_tree(models, base / "cache" / "stormbuffer" / "models")
        if template is not None:
            on_database(base / "store" / ".sbuf")
            if not writes and "reads" not in databases:
                databases["reads"] = copy_database(template)
            env[DATABASE_URL_ENV] = copy_database(template) if writes else databases["reads"]
        return base / "store", sbuf_env(base, **env)

    return made


def test_every_example_gets_the_same_bytes_through_the_daemon(
    tmp_path: Path, model_cache: Callable[[str], Path], copy: Copy
) -> None:
    models = model_cache(DEFAULT_VARIANT) / "models"
    shared_runtime = tmp_path / "run"
    shared_runtime.mkdir(mode=0o700)
    _cwd, starter = copy(tmp_path / "starter", models, XDG_RUNTIME_DIR=str(shared_runtime))
    started = relay.open_door(relay.hello("status", starter), starter, start=True)
    started.close()
    served = 0
    for number, path in enumerate(EXAMPLES):
        example = load(path)
        operation = path.parent.name
        empty = tmp_path / "no-models"  # examples without hybrid retrieval run without the model
        model_dir = models if is_hybrid(example) else empty
        model_dir.mkdir(exist_ok=True)
        writes = Example(operation, path.stem, example["request"], example["response"]).writes
        alone_cwd, alone_env = copy(tmp_path / f"{number}-alone", model_dir, writes=writes, STORMBUFFER_NO_DAEMON="1")
        warm_cwd, warm_env = copy(tmp_path / f"{number}-warm", model_dir, writes=writes,
                                  XDG_RUNTIME_DIR=str(shared_runtime))  # fmt: skip
        alone = answer(operation, example["view"], example["request"], alone_cwd, alone_env)
        warm = answer(operation, example["view"], example["request"], warm_cwd, warm_env)
        where = f"{operation}/{path.stem}"
        assert (warm.returncode, warm.stderr) == (alone.returncode, alone.stderr), where
        assert alone.stdout.endswith(b"\n") and alone.stdout.count(b"\n") == 1, where
        masked = [
            encode(mask_generated(operation, example["request"], json.loads(done.stdout))).encode() + b"\n"
            for done in (alone, warm)
        ]
        assert masked[0] == masked[1], where
        if masked[0] == alone.stdout:  # nothing generated: the very bytes
            assert warm.stdout == alone.stdout, where
        status = relay.ask("status", warm_env)
        assert status is not None and status["served"] > served, f"{where} was not answered by the daemon"
        served = status["served"]
        stored = [record_files(cwd / ".sbuf", env) for cwd, env in ((alone_cwd, alone_env), (warm_cwd, warm_env))]
        assert len(stored[0]) == len(stored[1]) and written(stored[0]) == written(stored[1]), where  # in its store


def written(records: dict[str, bytes]) -> dict[str, bytes]:
    """The contract store's records as they are now, times masked (a write adds records of new ids)."""
    return {name: TIME.sub(b"<time>", data) for name, data in records.items() if name in CONTRACT_RECORDS}
