"""Fixtures for protocol tests: the contract store copied into a private sandbox, in-process sessions."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.embedding import DEFAULT_VARIANT
from stormbuffer.protocol.invoke import handle, validate_envelope
from stormbuffer.protocol.session import NoEmbedder, Session
from tests.helpers import invoke, link_tree, sbuf_env

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_STORE = ROOT / "tests" / "fixtures" / "contract-store"
PROJECT_SCOPE = "project:0194d2a0-5c3e-7b41-9f2a-6c8d1e4b7a30"
LOCKFILE_ID = "0194d2a1-1111-7a01-8a01-000000000001"  # active, agent
BACKUP_ID = "0194d2a1-2222-7a02-8a02-000000000002"  # active, agent, two sources
SIGNING_ID = "0194d2a1-3333-7a03-8a03-000000000003"  # active, human
CANDIDATE_ID = "0194d2a1-4444-7a04-8a04-000000000004"  # candidate, agent


@dataclass
class Store:
    """A copy of the contract store: `cwd` holds `.sbuf/`; `env` has private home, data and cache dirs."""

    base: Path
    cwd: Path
    env: dict[str, str]

    @property
    def records(self) -> Path:
        return self.cwd / ".sbuf" / "records"

    @property
    def global_root(self) -> Path:
        return self.base / "data" / "stormbuffer"

    def invoke(
        self, operation: str, request: object, *, view: str = "project", raw: bytes | None = None
    ) -> dict[str, Any]:
        return invoke(operation, request, cwd=self.cwd, env=self.env, view=view, raw=raw)

    def session(self, view: View = View.PROJECT, embedder: Any = None) -> Session:
        dirs = PlatformDirs(self.base / "data", self.base / "cache")
        return Session(view, resolve_store(view, self.cwd, dirs), dirs, embedder or NoEmbedder("model_unavailable"))

    def handle(self, operation: str, request: bytes | Mapping[str, Any], **session: Any) -> dict[str, Any]:
        """`handle` in this process; the envelope is checked against schema/v1 like every other."""
        envelope = handle(operation, request, self.session(**session))
        assert validate_envelope(envelope) == [], envelope
        return envelope

    def sbuf_markdown_files(self) -> list[Path]:
        return sorted(self.records.glob("*.md"))


def make_store(base: Path) -> Store:
    shutil.copytree(CONTRACT_STORE, base / "store")
    return Store(base, base / "store", sbuf_env(base))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """The contract store without the semantic model (retrieval is lexical, `model_unavailable`)."""
    return make_store(tmp_path)


@pytest.fixture
def model_store(tmp_path: Path, model_cache: Callable[[str], Path]) -> Store:
    """The contract store with the real embedding model (acquired once per run) in its cache."""
    box = make_store(tmp_path)
    link_tree(model_cache(DEFAULT_VARIANT) / "models", tmp_path / "cache" / "stormbuffer" / "models")
    return box
