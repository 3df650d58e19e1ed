"""Real stores in temporary directories, and records written to them as canonical Markdown."""

from __future__ import annotations

import os
import time
from pathlib import Path

from stormbuffer.core.codec import render_markdown
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.core.timestamps import Timestamp

AN_HOUR_NS = 3600 * 1_000_000_000


def make_store(base: Path, view: View = View.PROJECT, cache: Path | None = None) -> StorePaths:
    """An initialized store below `base` (project stores in `base/project/.sbuf`)."""
    project = base / "project"
    project.mkdir(parents=True, exist_ok=True)
    paths = resolve_store(view, project, PlatformDirs(base / "data", cache or base / "cache"))
    initialize_store(paths)
    return paths


def write_record(
    paths: StorePaths,
    title: str,
    body: str,
    *,
    record_id: str | None = None,
    kind: str = "fact",
    status: str = "active",
    access: str = "agent",
    tags: tuple[str, ...] = (),
    aliases: tuple[str, ...] = (),
    file_name: str | None = None,
    scope: str | None = None,
    settled: bool = True,
) -> Record:
    """Write a record file; `settled` backdates its mtime by an hour, like a file nobody touched lately."""
    now = Timestamp.parse("2026-08-05T20:09:00Z")
    record = Record(
        id=record_id or new_record_id(), title=title, kind=kind, scope=scope or record_scope(paths), status=status,
        access=access, created_at=now, updated_at=now, tags=tags, aliases=aliases,
        sources=(Source("document", f"notes/{title[:20]}", "human", revision="rev-1"),), body=body,
    )  # fmt: skip
    path = paths.records / (file_name or f"{record.id}.md")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(record), encoding="utf-8")
    if settled:
        settle(path)
    return record


def settle(path: Path) -> None:
    """Backdate a file's mtime by an hour (files written just before a sync are hashed again next time)."""
    mtime = time.time_ns() - AN_HOUR_NS
    os.utime(path, ns=(mtime, mtime))


def canonical_bytes(paths: StorePaths) -> dict[str, bytes]:
    return {p.relative_to(paths.root).as_posix(): p.read_bytes() for p in sorted(paths.records.rglob("*.md"))} | {
        "store.toml": paths.config_file.read_bytes()
    }


def write_many(paths: StorePaths, count: int) -> None:
    """`count` settled records of every kind, written straight to the records directory with the codec
    (a cheap way to a big store). Titles are `Base record <n>`; ids are fixed by the number."""
    scope = record_scope(paths)
    now = Timestamp.parse("2026-08-05T20:09:00Z")
    kinds = ("fact", "decision", "procedure", "checkpoint")
    paths.records.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        record = Record(
            id=f"01900000-0000-7000-8000-{number:012x}", title=f"Base record {number}", kind=kinds[number % 4],
            scope=scope, status="active" if number % 7 else "candidate", access="agent", created_at=now,
            updated_at=now, sources=(Source("document", f"notes/base-{number}", "human"),),
            body=f"Base record number {number} says something about topic {number % 97}.\n",
        )  # fmt: skip
        path = paths.records / f"{record.id}.md"
        path.write_text(render_markdown(record), encoding="utf-8")
        settle(path)
