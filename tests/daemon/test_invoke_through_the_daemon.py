"""`sbuf invoke` answers the same bytes through a warm daemon as in its own process: every example
of schema/v1, each on a fresh copy of the contract store, once with `STORMBUFFER_NO_DAEMON=1` and
once through one daemon that serves every copy (the environments share a runtime directory, as one
user's shells do). Only values generated per call are masked (receipt ids and times, new ids)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from stormbuffer.daemon import relay
from stormbuffer.embedding import DEFAULT_VARIANT
from stormbuffer.protocol.invoke import encode
from tests.contract.test_invoke_examples import CONTRACT_STORE, EXAMPLES, is_hybrid, load, mask_generated
from tests.helpers import SBUF, link_tree, sbuf_env

TIMEOUT = 120.0  # seconds; a guard against a hung process, never a speed assertion


def answer(
    operation: str, view: str, request: object, cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(SBUF), f"--{view}", "invoke", operation], cwd=cwd, env=env, input=json.dumps(request).encode(),
        capture_output=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip


def copy(base: Path, models: Path, **env: str) -> tuple[Path, dict[str, str]]:
    shutil.copytree(CONTRACT_STORE, base / "store")
    link_tree(models, base / "cache" / "stormbuffer" / "models")
    return base / "store", sbuf_env(base, **env)


def test_every_example_gets_the_same_bytes_through_the_daemon(
    tmp_path: Path, model_cache: Callable[[str], Path]
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
        alone_cwd, alone_env = copy(tmp_path / f"{number}-alone", model_dir, STORMBUFFER_NO_DAEMON="1")
        warm_cwd, warm_env = copy(tmp_path / f"{number}-warm", model_dir, XDG_RUNTIME_DIR=str(shared_runtime))
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
