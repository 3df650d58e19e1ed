"""The export archive codec: exact encoding, strict decoding, hostile input and secret findings."""

from __future__ import annotations

import io
import json

import pytest

from stormbuffer.backup.archive import (
    MAX_ARCHIVE_BYTES,
    Archive,
    ArchiveRecord,
    decode_archive,
    encode_archive,
    is_safe_archive_path,
    read_archive,
    secret_findings,
)
from stormbuffer.backup.errors import ArchiveInvalid
from stormbuffer.core.codec import parse_markdown
from tests.helpers import record_markdown

FIRST = "01890a5d-ac96-774b-bcce-b302099a8057"
SECOND = "01890a5d-ac96-774b-bcce-b302099a8058"


def entry(record_id: str = FIRST, path: str | None = None, **fields: object) -> dict[str, str]:
    return {
        "path": f"records/{record_id}.md" if path is None else path,
        "markdown": record_markdown(record_id, "global", **fields),
    }


def document(*records: dict[str, str], **header: object) -> bytes:
    body = {"format_version": 1, "source_scope": "global", "records": list(records), **header}
    return json.dumps(body).encode()


def test_encoding_is_pretty_json_with_a_trailing_newline_and_exact_markdown() -> None:
    text = record_markdown(FIRST, "global", title="Crème brûlée", body="Line one\r\nline two\n")
    archive = Archive("global", (ArchiveRecord(f"records/{FIRST}.md", text, parse_markdown(text)),))
    data = encode_archive(archive)
    assert data.endswith(b"}\n") and data.startswith(b'{\n  "format_version": 1,\n  "source_scope": "global",\n')
    assert "Crème brûlée".encode() in data  # non-ASCII written raw, as the reference does
    decoded = decode_archive(data)
    assert decoded.records[0].markdown == text
    assert decoded.records[0].data == text.encode()


def test_an_empty_archive_decodes() -> None:
    assert decode_archive(document()).records == ()


def test_nested_archive_paths_are_safe() -> None:
    assert decode_archive(document(entry(path=f"records/archive/{FIRST}.md"))).records[0].record.id == FIRST


@pytest.mark.parametrize(
    "path",
    [
        f"records/../{FIRST}.md",
        f"/records/{FIRST}.md",
        f"/etc/{FIRST}.md",
        f"records\\{FIRST}.md",
        f"records//{FIRST}.md",
        f"records/./{FIRST}.md",
        f"{FIRST}.md",
        f"notes/{FIRST}.md",
        f"records/{FIRST}.txt",
        "records/.md",
        "records/",
        f"records/a\nb/{FIRST}.md",
        "",
    ],
)
def test_unsafe_paths_are_rejected(path: str) -> None:
    assert not is_safe_archive_path(path)
    with pytest.raises(ArchiveInvalid, match="archive record 1 has an unsafe path"):
        decode_archive(document(entry(path=path)))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "invalid JSON"),
        (b'{"format_version": 1, "source_scope": "global", "records": [', "invalid JSON"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        (b"[]", "must be a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid JSON"),
        (b'{"format_version": NaN, "source_scope": "global", "records": []}', "not a JSON value"),
        (b'{"format_version": 1' + b"0" * 5000 + b', "source_scope": "global", "records": []}', "out of range"),
        (document(format_version=2), "export format version 2 is unsupported; expected 1"),
        (document(format_version="1"), "`format_version` must be an integer"),
        (document(format_version=True), "`format_version` must be an integer"),
        (document(source_scope="project:has space"), "`source_scope` is invalid"),
        (document(source_scope=7), "`source_scope` must be a string"),
        (document(records={}), "`records` must be an array"),
        (document(extra=1), "unknown field `extra` in the archive header"),
        (json.dumps({"format_version": 1, "records": []}).encode(), "missing field `source_scope`"),
        (document({"path": f"records/{FIRST}.md"}), "missing field `markdown` in archive record 1"),
        (document({**entry(), "id": FIRST}), "unknown field `id` in archive record 1"),
        (document({**entry(), "\u202e$(rm -rf)": 1}), "unknown field with an unprintable name"),
        (document({"path": 1, "markdown": "x"}), "must have text `path` and `markdown`"),
        (document(["not an object"]), "archive record 1 must be a JSON object"),
        (b'{"format_version": 1, "format_version": 1, "source_scope": "global", "records": []}', "more than once"),
        (document(entry(), entry(path=f"records/x/{FIRST}.md")), "archive record 2 repeats record id " + FIRST),
        (document(entry(), {**entry(SECOND), "path": f"records/{FIRST}.md"}), "repeats the path"),
        (document({"path": f"records/{FIRST}.md", "markdown": "no frontmatter"}), "archive record 1 is invalid"),
        (document(entry(SECOND, title=" padded")), "archive record 1 is invalid: field `title` is invalid"),
    ],
)
def test_hostile_or_malformed_archives_are_rejected(data: bytes, message: str) -> None:
    with pytest.raises(ArchiveInvalid) as caught:
        decode_archive(data)
    assert message in str(caught.value)
    assert str(caught.value).startswith("export archive is invalid: ")


def test_a_lone_surrogate_is_rejected_not_crashing() -> None:
    data = (
        b'{"format_version": 1, "source_scope": "global", "records": [{"path": "records/a.md", "markdown": "\\ud800"}]}'
    )
    with pytest.raises(ArchiveInvalid, match="must have text"):
        decode_archive(data)


def test_unsupported_inference_is_rejected_as_provenance() -> None:
    text = record_markdown(FIRST, "global").replace('actor = "human"', 'actor = "Inference"')
    with pytest.raises(ArchiveInvalid, match="unsupported inference"):
        decode_archive(document({"path": f"records/{FIRST}.md", "markdown": text}))


def test_size_limit_applies_to_reading_decoding_and_encoding() -> None:
    oversized = b" " * (MAX_ARCHIVE_BYTES + 1)
    with pytest.raises(ArchiveInvalid, match="exceeds the 16777216 byte limit"):
        read_archive(io.BytesIO(oversized))
    with pytest.raises(ArchiveInvalid, match="byte limit"):
        decode_archive(oversized)
    exact = b" " * MAX_ARCHIVE_BYTES
    assert read_archive(io.BytesIO(exact)) == exact
    body = "x" * (MAX_ARCHIVE_BYTES // 2) + "\n"
    text = record_markdown(FIRST, "global", body=body)
    big = ArchiveRecord(f"records/{FIRST}.md", text, parse_markdown(text))
    other = record_markdown(SECOND, "global", body=body)
    with pytest.raises(ArchiveInvalid, match="byte limit"):
        encode_archive(Archive("global", (big, ArchiveRecord(f"records/{SECOND}.md", other, parse_markdown(other)))))


def test_secret_findings_name_records_and_fields_never_values() -> None:
    token = "ghp_0123456789abcdefghijklmnop"
    leaky = parse_markdown(record_markdown(FIRST, "global", title="Deploy", body=f"use {token} to push\n"))
    clean = parse_markdown(record_markdown(SECOND, "global"))
    findings = secret_findings([leaky, clean])
    assert findings == [(FIRST, ["body"])]
    assert token not in repr(findings)


def test_progress_reports_each_verified_record() -> None:
    seen: list[tuple[int, int]] = []
    decode_archive(document(entry(), entry(SECOND)), lambda done, total: seen.append((done, total)))
    assert seen == [(1, 2), (2, 2)]
