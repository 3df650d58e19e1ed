"""`sbuf skill install`: the shipped skills, their policy text, and a safe, idempotent install."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from stormbuffer.cli.skill import _write, shipped_skill
from tests.helpers import run_sbuf, sbuf_env

ROOT = Path(__file__).resolve().parents[2]
SKILLS = ROOT / ".agents" / "skills"
POLICY_TERMS = (
    "stormbuffer-capture-v1",
    "durable_correction",
    "accepted_decision",
    "tentative_discussion",
    "routine_completion",
    "repository_authoritative_knowledge",
    "confirmed_root_cause",
    "necessary_handoff",
    "abstain",
    "propose",
    "update",
    "checkpoint",
    "existing_memory_is_stale",
    "durable_accepted_decision",
    "tentative_or_unsettled",
    "no_capture_event",
    "repository_already_preserves_knowledge",
    "durable_confirmed_root_cause",
    "cross_session_state_is_not_recoverable",
)


def install(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_sbuf(*flags, "skill", "install", "--directory", "skills", cwd=tmp_path, env=sbuf_env(tmp_path))


def test_project_skill_text() -> None:
    text = (SKILLS / "stormbuffer-memory" / "SKILL.md").read_text(encoding="utf-8")
    for phrase in (
        "name: stormbuffer-memory",
        "sbuf --project invoke search",
        "sbuf --project invoke context",
        "Project retrieval can also return global records",
        "possible_overlap",
        "duplicate_of",
        "requires_approval",
        "sbuf --project approve <record-id>",
        "secret_detected",
        "stormbuffer-mcp --stdio --project --allow-candidate-writes",
        "record_id",
        *POLICY_TERMS,
    ):
        assert phrase in text, phrase
    assert "--global" not in text and "conflicts_with" not in text


def test_global_skill_text() -> None:
    text = (SKILLS / "stormbuffer-global-memory" / "SKILL.md").read_text(encoding="utf-8")
    for phrase in (
        "name: stormbuffer-global-memory",
        "sbuf --global invoke search",
        "stormbuffer-mcp --stdio --global",
        "Global retrieval stays within the global store",
        "cross-project preferences",
        *POLICY_TERMS,
    ):
        assert phrase in text, phrase
    assert "--project" not in text and "Project retrieval" not in text


def test_package_ships_the_repository_skills() -> None:
    for name in ("stormbuffer-memory", "stormbuffer-global-memory"):
        assert shipped_skill(name) == (SKILLS / name / "SKILL.md").read_bytes()


def test_install_is_idempotent_and_keeps_different_content(tmp_path: Path) -> None:
    installed = install(tmp_path)
    target = tmp_path / "skills" / "stormbuffer-global-memory" / "SKILL.md"
    assert installed.returncode == 0 and installed.stdout == "Installed skills/stormbuffer-global-memory/SKILL.md\n"
    assert target.read_bytes() == shipped_skill("stormbuffer-global-memory")
    first = target.stat()
    assert install(tmp_path).returncode == 0
    assert (target.stat().st_ino, target.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    target.write_text("my own edits\n", encoding="utf-8")
    refused = install(tmp_path, "--global")
    assert (
        refused.returncode == 1
        and "--force" in refused.stderr
        and "already contains different content" in refused.stderr
    )
    assert target.read_text(encoding="utf-8") == "my own edits\n"
    forced = run_sbuf("skill", "install", "--directory", "skills", "--force", cwd=tmp_path, env=sbuf_env(tmp_path))
    assert forced.returncode == 0 and target.read_bytes() == shipped_skill("stormbuffer-global-memory")
    assert sorted(path.name for path in target.parent.iterdir()) == ["SKILL.md"]  # no temp files left


@pytest.mark.parametrize("flag", ["--project", "--local"])
def test_project_and_local_views_install_the_project_skill(tmp_path: Path, flag: str) -> None:
    assert install(tmp_path, flag).returncode == 0
    target = tmp_path / "skills" / "stormbuffer-memory" / "SKILL.md"
    assert target.read_bytes() == shipped_skill("stormbuffer-memory")
    assert not (tmp_path / ".sbuf").exists() and not (tmp_path / "data").joinpath("stormbuffer").exists()


def test_new_install_never_clobbers_a_racing_file(tmp_path: Path) -> None:
    target = tmp_path / "SKILL.md"
    target.write_bytes(b"written meanwhile by someone else\n")
    with pytest.raises(FileExistsError):
        _write(target, b"shipped skill\n", replace=False)
    assert target.read_bytes() == b"written meanwhile by someone else\n"
    assert os.listdir(tmp_path) == ["SKILL.md"]
    _write(target, b"shipped skill\n", replace=True)
    assert target.read_bytes() == b"shipped skill\n"


def test_help_text(tmp_path: Path) -> None:
    text = run_sbuf("skill", "install", "--help", cwd=tmp_path, env=sbuf_env(tmp_path)).stdout
    for phrase in ("selected scope's memory skill", "--directory <DIRECTORY>", "--force", "--global"):
        assert phrase in text
    missing = run_sbuf("skill", "install", cwd=tmp_path, env=sbuf_env(tmp_path))
    assert missing.returncode == 2 and "--directory" in missing.stderr


def test_wheel_ships_the_skills(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path), str(ROOT)]
    subprocess.run(command, check=True)
    (wheel,) = tmp_path.glob("stormbuffer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("stormbuffer-memory", "stormbuffer-global-memory"):
        assert f"stormbuffer/skills/{name}/SKILL.md" in names
