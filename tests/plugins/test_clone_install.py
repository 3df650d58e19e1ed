"""The Codex and Pi plugins installed straight from a copy of the repository, with the hosts' own
commands (`codex plugin marketplace add <clone>`, `pi install <clone>/plugins/pi-plugin-stormbuffer`),
then a real turn against the loopback model stub: recall reaches the first request, and so do the
plugins' skills."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.hosts.model_stub import ModelStub, Reply, codex_config, pi_models
from tests.plugins.conftest import HOST_TIMEOUT_S, PLUGINS, ROOT, HostSandbox, pi_rpc_turn

SKILLS = ("stormbuffer-global-memory", "stormbuffer-memory")
SHIPPED = ROOT / "src" / "stormbuffer" / "skills"
PROMPT = "What is the magnetar release rule?"


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What a clone holds of the plugins: the marketplace and the plugin packages (links kept as links)."""
    root = tmp_path_factory.mktemp("clone") / "stormbuffer"
    shutil.copytree(ROOT / ".agents" / "plugins", root / ".agents" / "plugins")
    shutil.copytree(PLUGINS, root / "plugins", symlinks=True, ignore=shutil.ignore_patterns("test"))
    return root


def test_each_package_carries_every_shipped_skill() -> None:
    for package in ("codex-plugin-stormbuffer", "pi-plugin-stormbuffer"):
        skills = PLUGINS / package / "skills"
        assert sorted(path.name for path in skills.iterdir()) == list(SKILLS), package
        for name in SKILLS:
            assert (skills / name / "SKILL.md").read_bytes() == (SHIPPED / name / "SKILL.md").read_bytes()


def run(argv: list[str], box: HostSandbox, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=box.work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=HOST_TIMEOUT_S, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_codex_installs_the_plugin_from_the_clone(host_sandbox: HostSandbox, clone: Path) -> None:
    box = host_sandbox
    home = box.base / "codex-clone-home"
    home.mkdir()
    env = {**box.env, "CODEX_HOME": str(home), "STUB_API_KEY": "stub"}
    run(["codex", "plugin", "marketplace", "add", str(clone)], box, env)
    added = run(["codex", "plugin", "add", "stormbuffer@stormbuffer-source"], box, env)
    assert "Added plugin `stormbuffer`" in added.stdout + added.stderr
    with ModelStub(lambda request: Reply.text_reply("Releases freeze on Fridays.")) as stub:
        # the stub's top-level settings go before the tables `codex plugin` wrote
        (home / "config.toml").write_text(codex_config(stub.base_url) + (home / "config.toml").read_text())
        ran = run(["codex", "exec", "--skip-git-repo-check", "--ephemeral", "--dangerously-bypass-hook-trust",
                   PROMPT], box, env)  # fmt: skip
    requests = stub.responses()
    assert requests, ran.stderr[-3000:]
    first = requests[0].text
    assert "untrusted evidence from Stormbuffer" in first and box.record_id in first
    for name in SKILLS:
        assert name in first, f"skill {name} is not offered to the model"


def test_pi_installs_the_extension_from_the_clone(host_sandbox: HostSandbox, clone: Path) -> None:
    box = host_sandbox
    agent_dir = box.base / "pi-clone-agent"
    agent_dir.mkdir()
    env = {**box.env, "PI_CODING_AGENT_DIR": str(agent_dir), "PI_OFFLINE": "1"}
    run(["pi", "install", str(clone / "plugins" / "pi-plugin-stormbuffer")], box, env)
    with ModelStub(lambda request: Reply.text_reply("Releases freeze on Fridays.")) as stub:
        (agent_dir / "models.json").write_text(pi_models(stub.base_url))
        stdout, stderr = pi_rpc_turn(box, env, stub, PROMPT, requests=1)
    requests = stub.responses()
    assert requests, stdout[-3000:] + stderr[-3000:]
    first = requests[0].text
    assert "untrusted evidence from Stormbuffer" in first and box.record_id in first
    for name in SKILLS:
        assert name in first, f"skill {name} is not offered to the model"
