"""The man pages and shell completion scripts shipped in the package: current, rendered by `man`, and
completing subcommands in real bash and fish."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

from stormbuffer.cli.main import COMMANDS
from tests.helpers import SBUF, Sandbox
from tests.system import program

ROOT = Path(__file__).resolve().parents[2]
SHARE = Path(str(resources.files("stormbuffer").joinpath("share")))


def test_the_committed_files_match_the_command_definitions() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_manuals.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_man_renders_every_page_without_warnings() -> None:
    man = program("man-db")
    pages = sorted((SHARE / "man").glob("*.1"))
    assert {page.name for page in pages} >= {"sbuf.1"} | {f"sbuf-{name}.1" for name in COMMANDS}
    for page in pages:
        done = subprocess.run([man, "--warnings", "-l", str(page)], capture_output=True, text=True, check=False,
                              env=os.environ | {"MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat"})  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", (page.name, done.stderr)
        assert "NAME" in done.stdout and "SYNOPSIS" in done.stdout, page.name
    search = subprocess.run([man, "-l", str(SHARE / "man" / "sbuf-search.1")], capture_output=True, text=True,
                            env=os.environ | {"MANWIDTH": "80", "MANPAGER": "cat"}, check=True).stdout  # fmt: skip
    assert "sbuf-search - Search indexed memories." in search and "--limit INTEGER" in search


def test_sbuf_completion_prints_the_shipped_script(sandbox: Sandbox) -> None:
    for shell, name in {"bash": "sbuf.bash", "zsh": "sbuf.zsh", "fish": "sbuf.fish", "powershell": "sbuf.ps1"}.items():
        done = sandbox.sbuf("completion", shell)
        assert done.returncode == 0 and done.stdout == (SHARE / "completions" / name).read_text(), shell
    assert "Register-ArgumentCompleter -Native -CommandName sbuf" in sandbox.sbuf("completion", "powershell").stdout
    wrong = sandbox.sbuf("completion", "tcsh")
    assert wrong.returncode == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish', 'powershell'" in wrong.stderr


def _bash_completions(sandbox: Sandbox, *words: str) -> list[str]:
    """What `_sbuf_completion` (loaded from `sbuf completion bash`) offers for `words` in real bash."""
    script = (
        'source <(sbuf completion bash)\n'
        f"COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        '_sbuf_completion sbuf\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )  # fmt: skip
    env = sandbox.env | {"PATH": f"{SBUF.parent}{os.pathsep}{sandbox.env['PATH']}"}
    done = subprocess.run(["bash", "-c", script], cwd=sandbox.cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split()


def test_bash_completes_subcommands_options_and_choices(sandbox: Sandbox) -> None:
    assert _bash_completions(sandbox, "sbuf", "sea") == ["search"]
    assert _bash_completions(sandbox, "sbuf", "re") == ["reindex", "reject", "restore"]
    assert "--limit" in _bash_completions(sandbox, "sbuf", "search", "--")
    assert _bash_completions(sandbox, "sbuf", "completion", "") == ["bash", "zsh", "fish", "powershell"]
    assert _bash_completions(sandbox, "sbuf", "skill", "") == ["install"]


def test_fish_completes_a_subcommand_and_zsh_parses_its_script(sandbox: Sandbox) -> None:
    env = sandbox.env | {"PATH": f"{SBUF.parent}{os.pathsep}{sandbox.env['PATH']}"}
    fish = subprocess.run([program("fish"), "--no-config", "-c",
                           "sbuf completion fish | source; complete -C 'sbuf sea'"],
                          cwd=sandbox.cwd, env=env, capture_output=True, text=True, check=False)  # fmt: skip
    assert fish.returncode == 0, fish.stderr
    assert fish.stdout.splitlines() == ["search\tSearch indexed memories."]
    zsh = subprocess.run([program("zsh"), "-n", str(SHARE / "completions" / "sbuf.zsh")],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert zsh.returncode == 0, zsh.stderr


def test_powershell_candidates_come_from_sbuf(sandbox: Sandbox) -> None:
    """What the PowerShell script's completer reads from `sbuf` (PowerShell itself is not packaged for Debian)."""
    env = sandbox.env | {"_SBUF_COMPLETE": "pwsh_complete", "COMP_WORDS": "sbuf sea", "COMP_CWORD": "1"}
    done = subprocess.run([str(SBUF)], cwd=sandbox.cwd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["plain,search,Search indexed memories."]
