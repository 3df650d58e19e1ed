"""The portable export archive: JSON holding the exact text of every canonical record file.

    {"format_version": 1, "source_scope": "global",
     "records": [{"path": "records/<id>.md", "markdown": "<exact file text>"}]}

Written pretty-printed (2-space indent) with a trailing newline, records sorted by path, at most
16 MiB. Decoding is strict: a wrong format version, unknown or missing keys, wrong types, unsafe
paths, invalid records, unsupported inference as provenance and repeated ids or paths are all
rejected before anything is imported. `path` is metadata only; imports never write to it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO

from ..core.codec import parse_markdown
from ..core.errors import RecordError
from ..core.records import Record, searchable_fields, validate_provenance
from ..core.scopes import parse_scope
from ..core.secrets import find_secret_fields
from .errors import ArchiveInvalid

FORMAT_VERSION = 1
MAX_ARCHIVE_BYTES = 16 * 1024 * 1024
_HEADER_KEYS = ("format_version", "source_scope", "records")
_RECORD_KEYS = ("path", "markdown")
_PRINTABLE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class ArchiveRecord:
    path: str  # store-relative, `/`-separated, as the source store kept the file
    markdown: str  # the file's exact text
    record: Record

    @property
    def data(self) -> bytes:
        return self.markdown.encode("utf-8")


@dataclass(frozen=True)
class Archive:
    source_scope: str
    records: tuple[ArchiveRecord, ...]


def encode_archive(archive: Archive) -> bytes:
    """The archive file's bytes; refuses an archive over the size limit."""
    document = {
        "format_version": FORMAT_VERSION,
        "source_scope": archive.source_scope,
        "records": [{"path": item.path, "markdown": item.markdown} for item in archive.records],
    }
    data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ArchiveInvalid(f"archive exceeds the {MAX_ARCHIVE_BYTES} byte limit")
    return data


def read_archive(stream: BinaryIO) -> bytes:
    """Read an archive from a file or stdin, stopping one byte past the size limit."""
    data = stream.read(MAX_ARCHIVE_BYTES + 1)
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ArchiveInvalid(f"archive exceeds the {MAX_ARCHIVE_BYTES} byte limit")
    return data


def decode_archive(data: bytes, progress: Callable[[int, int], None] | None = None) -> Archive:
    """Parse and verify an archive; raise ArchiveInvalid naming the first problem.

    `progress(done, total)` is called after each record is verified.
    """
    if len(data) > MAX_ARCHIVE_BYTES:
        raise ArchiveInvalid(f"archive exceeds the {MAX_ARCHIVE_BYTES} byte limit")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveInvalid("archive is not valid UTF-8") from None
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ArchiveInvalid(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ArchiveInvalid("invalid JSON: nested too deeply") from None
    except ValueError:  # e.g. an integer beyond Python's digit limit
        raise ArchiveInvalid("invalid JSON: a number is out of range") from None
    source_scope, raw_records = _header(document)
    records: list[ArchiveRecord] = []
    seen_ids: set[str] = set()
    seen_paths: set[str] = set()
    for number, raw in enumerate(raw_records, 1):
        item = _record(number, raw)
        if item.path in seen_paths:
            raise ArchiveInvalid(f"archive record {number} repeats the path of an earlier record")
        if item.record.id in seen_ids:
            raise ArchiveInvalid(f"archive record {number} repeats record id {item.record.id}")
        seen_paths.add(item.path)
        seen_ids.add(item.record.id)
        records.append(item)
        if progress is not None:
            progress(number, len(raw_records))
    return Archive(source_scope, tuple(records))


def is_safe_archive_path(path: str) -> bool:
    """`records/…/<name>.md` with only normal components: no `..`, `.`, empty parts, absolute paths or backslashes."""
    parts = path.split("/")
    return (
        len(parts) >= 2
        and parts[0] == "records"
        and all(part not in ("", ".", "..") for part in parts)
        and parts[-1].endswith(".md")
        and len(parts[-1]) > len(".md")
        and "\\" not in path
        and not any(unicodedata.category(ch) in ("Cc", "Cs") for ch in path)
    )


def secret_findings(records: Iterable[Record]) -> list[tuple[str, list[str]]]:
    """(record id, field names) for every record with credential-like material; never the values."""
    findings = []
    for record in records:
        fields = find_secret_fields(searchable_fields(record))
        if fields:
            findings.append((record.id, fields))
    return findings


def _header(document: Any) -> tuple[str, list[Any]]:
    if not isinstance(document, dict):
        raise ArchiveInvalid("the archive must be a JSON object")
    _check_keys(document, _HEADER_KEYS, "the archive header")
    version = document["format_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise ArchiveInvalid("field `format_version` must be an integer")
    if version != FORMAT_VERSION:
        shown = str(version) if abs(version) < 10**9 else "(out of range)"
        raise ArchiveInvalid(f"export format version {shown} is unsupported; expected {FORMAT_VERSION}")
    source_scope = document["source_scope"]
    if not _is_text(source_scope):
        raise ArchiveInvalid("field `source_scope` must be a string")
    try:
        parse_scope(source_scope)
    except ValueError as exc:
        raise ArchiveInvalid(f"field `source_scope` is invalid: {exc}") from None
    if not isinstance(document["records"], list):
        raise ArchiveInvalid("field `records` must be an array")
    return source_scope, document["records"]


def _record(number: int, raw: Any) -> ArchiveRecord:
    where = f"archive record {number}"
    if not isinstance(raw, dict):
        raise ArchiveInvalid(f"{where} must be a JSON object")
    _check_keys(raw, _RECORD_KEYS, where)
    path, markdown = raw["path"], raw["markdown"]
    if not _is_text(path) or not _is_text(markdown):
        raise ArchiveInvalid(f"{where} must have text `path` and `markdown` fields")
    if not is_safe_archive_path(path):
        raise ArchiveInvalid(f"{where} has an unsafe path")
    try:
        record = parse_markdown(markdown, "<export>")
        validate_provenance(record, "<export>")
    except RecordError as exc:
        raise ArchiveInvalid(f"{where} is invalid: {exc.detail}") from None
    return ArchiveRecord(path, markdown, record)


def _check_keys(table: dict[str, Any], expected: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in expected:
            raise ArchiveInvalid(f"unknown field {_describe(key)} in {where}")
    for key in expected:
        if key not in table:
            raise ArchiveInvalid(f"missing field `{key}` in {where}")


def _describe(key: str) -> str:
    """A key from the archive, quoted only when it is short and plain (hostile input is not echoed)."""
    return f"`{key}`" if _PRINTABLE_KEY.fullmatch(key) else "with an unprintable name"


def _is_text(value: Any) -> bool:
    """A string that is valid Unicode (JSON can smuggle in lone surrogates)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for key, value in pairs:
        if key in table:
            raise ArchiveInvalid(f"field {_describe(key)} appears more than once")
        table[key] = value
    return table


def _reject_constant(name: str) -> Any:
    raise ArchiveInvalid(f"invalid JSON: `{name}` is not a JSON value")
