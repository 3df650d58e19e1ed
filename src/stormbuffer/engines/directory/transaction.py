"""The directory engine's unit of work: lookups through a catalog, files read when touched, and
writes only over the bytes that were read.

The catalog is the projection (`index.catalog`) brought up to date by its stat-based check, or,
when it cannot be used, every file parsed (`Scanned`). Writes go through a temp file + fsync +
rename, and only over the bytes the check read (compare-and-swap), so an edit made meanwhile by
someone who takes no lock survives and the write fails with Conflict. Supersession changes two
files through the journal (`core.journal`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

from ...core import journal
from ...core.atomic import read_or_none, remove_durably, replace_atomic_if
from ...core.codec import parse_markdown, render_markdown
from ...core.errors import Conflict, NotFound, RecordError, ScopeDenied, StoreIntegrityError, UnsafeWrite
from ...core.records import Record, RecordSummary, normalize
from ...core.stores import StorePaths
from ..base import MATCHING, StoredRecord

SNIFF_BYTES = 1 << 20  # how much of an invalid file is looked at for the ids and titles it may hold
_TITLE_LINE = re.compile(r"^\s*title\s*=\s*(.*?)\s*$", re.MULTILINE)

Change = tuple[Path, Record | None, bytes | None]  # a file, and the record and bytes now in it (None: removed)


class Catalog(Protocol):
    """What a write or a review looks up: `index.catalog` answers from the projection, `Scanned`
    from every file."""

    invalid_files: list[tuple[str, str]]  # (store-relative path, reason)

    def path_of(self, record_id: str) -> Path | None: ...

    def title_matches(self, scope: str, kind: str, title: str) -> list[Path]: ...

    def summaries(self) -> list[RecordSummary]: ...

    def review_paths(self) -> list[Path]: ...

    def written(self, changes: list[Change]) -> None: ...

    def close(self) -> None: ...


class Scanned:
    """A catalog made by parsing every record file, for when the projection cannot be used."""

    def __init__(self, stored: list[StoredRecord]) -> None:
        self.invalid_files: list[tuple[str, str]] = []
        self._stored = stored
        self._by_id = {item.record.id: item.path for item in stored}

    def path_of(self, record_id: str) -> Path | None:
        return self._by_id.get(record_id)

    def title_matches(self, scope: str, kind: str, title: str) -> list[Path]:
        key = normalize(title)
        return [item.path for item in self._stored
                if item.record.status in MATCHING and (item.record.scope, item.record.kind) == (scope, kind)
                and normalize(item.record.title) == key]  # fmt: skip

    def review_paths(self) -> list[Path]:
        keys = {(r.scope, r.kind, normalize(r.title)) for r in (item.record for item in self._stored)
                if r.status == "candidate"}  # fmt: skip
        return [item.path for item in self._stored
                if item.record.status in MATCHING
                and (item.record.scope, item.record.kind, normalize(item.record.title)) in keys]  # fmt: skip

    def summaries(self) -> list[RecordSummary]:
        items = sorted(self._stored, key=lambda item: item.record.id)
        return [RecordSummary(r.id, r.title, r.kind, r.scope, r.status) for r in (item.record for item in items)]

    def written(self, changes: list[Change]) -> None:
        pass

    def close(self) -> None:
        pass


class DirectoryTransaction:
    """The `RecordTransaction` of a directory store; `changes` lists what was written, for the catalog."""

    def __init__(self, paths: StorePaths, scope: str, catalog: Catalog) -> None:
        self.paths = paths
        self.scope = scope
        self.catalog = catalog
        self.changes: list[Change] = []

    # -- checks ----------------------------------------------------------------------------

    def get(self, record_id: str, *, guarded: bool = True, known: StoredRecord | None = None) -> StoredRecord:
        for path in (self.paths.records / f"{record_id}.md", self.catalog.path_of(record_id)):
            item = self._read(path, known) if path is not None else None
            if item is not None and item.record.id == record_id:
                if item.record.scope != self.scope:
                    raise ScopeDenied(record_id)
                return item
        if guarded:
            self.guard(ids=[record_id])
        raise NotFound(record_id)

    def unused(self, record_id: str) -> None:
        if self.catalog.path_of(record_id) is not None:
            raise StoreIntegrityError(f"record {record_id} already exists")
        if (self.paths.records / f"{record_id}.md").exists():
            raise StoreIntegrityError("record destination already exists")

    def title_matches(self, scope: str, kind: str, title: str) -> Iterator[StoredRecord]:
        for path in self.catalog.title_matches(scope, kind, title):
            item = self._read(path)
            if item is not None:
                yield item

    def guard(self, ids: Sequence[str] = (), titles: Sequence[str] = ()) -> None:
        """UnsafeWrite naming the first invalid record file that may hold one of these ids (named in
        its file name or text) or titles (on a `title =` line, or no such line can be read at all)."""
        wanted_ids = [record_id.lower() for record_id in ids]
        wanted_titles = {normalize(title) for title in titles}
        for name, _reason in self.catalog.invalid_files:
            try:
                with open(self.paths.root / name, "rb") as handle:
                    text = handle.read(SNIFF_BYTES).decode("utf-8", "replace")
            except OSError:
                text = ""
            haystack = f"{name}\n{text}".lower()
            if any(record_id in haystack for record_id in wanted_ids):
                raise UnsafeWrite(name)
            if wanted_titles:
                found = {normalize(value.strip("\"'")) for value in _TITLE_LINE.findall(text)}
                if not found or found & wanted_titles:
                    raise UnsafeWrite(name)

    def _read(self, path: Path, known: StoredRecord | None = None) -> StoredRecord | None:
        """The record in `path` now (None when there is no such file); an invalid file is UnsafeWrite.
        `known`: returned unparsed when `path` still holds its bytes (a large record is parsed once)."""
        data = read_or_none(path) if path.is_file() and not path.is_symlink() else None
        if data is None:
            return None
        if known is not None and known.path == path and known.data == data:
            return known
        try:
            return StoredRecord(parse_markdown(data, path.name), path, data)
        except RecordError:
            raise UnsafeWrite(path.relative_to(self.paths.root).as_posix()) from None

    # -- writes ----------------------------------------------------------------------------

    def create(self, record: Record) -> None:
        path = self.paths.records / f"{record.id}.md"
        data = render_markdown(record).encode()
        if not replace_atomic_if(path, None, data):
            raise StoreIntegrityError("record destination already exists")
        self.changes.append((path, record, data))

    def replace(self, item: StoredRecord, record: Record) -> None:
        data = render_markdown(record).encode()
        if not replace_atomic_if(item.path, item.data, data):
            raise Conflict("record changed while it was being written")
        self.changes.append((item.path, record, data))

    def remove(self, item: StoredRecord) -> None:
        if read_or_none(item.path) != item.data:
            raise Conflict("record changed while it was being written")
        remove_durably(item.path)
        self.changes.append((item.path, None, None))

    def supersede(self, old: StoredRecord, old_after: Record, new: Record, new_before: StoredRecord | None) -> None:
        """The journaled two-file change: `old` superseded, `new` written to its own file (over `new_before`)."""
        new_path = new_before.path if new_before is not None else self.paths.records / f"{new.id}.md"
        change = journal.Supersession(
            old_path=old.path,
            old_before=old.data,
            old_after=render_markdown(old_after).encode(),
            new_path=new_path,
            new_before=new_before.data if new_before is not None else None,
            new_after=render_markdown(new).encode(),
        )
        journal.commit(self.paths, change)
        self.changes += [(old.path, old_after, change.old_after), (new_path, new, change.new_after)]
