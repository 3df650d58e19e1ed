"""Store destruction in the core: the preview, and the id check made under the lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from stormbuffer.backup.destroy import destroy_store, preview_destruction
from stormbuffer.core.errors import InvalidInput, NotInitialized
from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from tests.helpers import record_markdown, tree_digest

RECORD = "01890a5d-ac96-774b-bcce-b30209900001"


def test_preview_needs_an_initialized_store_and_creates_nothing(tmp_path: Path) -> None:
    paths = resolve_store(View.PROJECT, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    with pytest.raises(NotInitialized):
        preview_destruction(paths)
    assert sorted(tmp_path.iterdir()) == []


def test_a_mismatched_id_leaves_the_store_untouched(tmp_path: Path) -> None:
    paths = resolve_store(View.GLOBAL, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    initialize_store(paths)
    (paths.records / f"{RECORD}.md").write_text(record_markdown(RECORD, "global"))
    (paths.root / "unknown.bin").write_bytes(b"x" * 64)
    summary = preview_destruction(paths)
    assert (summary.store_id, summary.scope, summary.records) == ("global", "global", 1)
    assert summary.store_root_bytes >= summary.canonical_bytes + 64
    before = tree_digest(paths.root)
    with pytest.raises(InvalidInput, match="store id mismatch: expected `0198`, got `global`"):
        destroy_store(paths, "0198")
    assert tree_digest(paths.root) == before
    assert destroy_store(paths, "global") is None
    assert not paths.root.exists()
