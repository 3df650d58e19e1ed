"""Installing without a clone: the built wheel, installed with `uv tool install` into a fresh tool
environment, gives a working `sbuf` and `stormbuffer-mcp` that need no network after the install.

Dependencies come from the package index through uv's cache (build/uv-cache, kept between runs);
everything after the install runs with HTTP(S) proxies pointing at a closed loopback port, so any
attempt to reach the network fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import SBUF, sbuf_env

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
TIMEOUT = 300  # seconds: a guard against a hung install, never a speed assertion
OFFLINE = {name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
CLIENT = {"name": "wheel-test", "version": "1"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": CLIENT},
}  # fmt: skip


def run(argv: list[str], env: dict[str, str], cwd: Path, input: str | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, input=input, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL if input is None else None, check=False)  # fmt: skip
    assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    return done.stdout


def test_the_wheel_installs_and_works_offline(tmp_path: Path) -> None:
    env = sbuf_env(tmp_path)
    uv_env = env | {
        "UV_CACHE_DIR": str(ROOT / "build" / "uv-cache"),  # kept between runs, like the npm test tools
        "UV_TOOL_DIR": str(tmp_path / "tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
        "UV_PYTHON_DOWNLOADS": "never",  # the interpreter running the tests
        "UV_NO_CONFIG": "1",
    }
    run([str(UV), "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(ROOT)], uv_env, tmp_path)
    (wheel,) = (tmp_path / "dist").glob("stormbuffer-*.whl")
    run([str(UV), "tool", "install", "--python", sys.executable, str(wheel)], uv_env, tmp_path)

    bin_dir = tmp_path / "bin"
    offline = env | OFFLINE | {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    sbuf, mcp = str(bin_dir / "sbuf"), str(bin_dir / "stormbuffer-mcp")
    assert shutil.which("sbuf", path=offline["PATH"]) == sbuf  # the tool's, not the development one
    assert Path(sbuf).resolve() != SBUF.resolve()
    assert run([sbuf, "--version"], offline, tmp_path) == "sbuf 0.1.0\n"
    run([sbuf, "init"], offline, tmp_path)
    record = run([sbuf, "add", "--title", "Deploys need a green build", "--body", "Run make release once CI is green.",
                  "--access", "agent"], offline, tmp_path).strip()  # fmt: skip
    hits = json.loads(run([sbuf, "search", "--json", "how do I ship a release"], offline, tmp_path))
    assert [hit["record_id"] for hit in hits][:1] == [record]
    assert any(reason.startswith("vector:") for reason in hits[0]["match_reasons"])  # the bundled model answered
    assert "_sbuf_completion" in run([sbuf, "completion", "bash"], offline, tmp_path)
    assert (tmp_path / "tools" / "stormbuffer" / "share" / "man" / "man1" / "sbuf-search.1").is_file()

    reply = run([mcp, "--stdio", "--no-daemon"], offline, tmp_path, input=json.dumps(INITIALIZE) + "\n")
    answer = json.loads(reply.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"]
