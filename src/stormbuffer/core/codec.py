"""Canonical Markdown: `+++` TOML frontmatter, a blank line, then the body byte for byte.

Parsing is strict (unknown keys, wrong types and format versions other than 1 are rejected) and
rendering is canonical: the 13 keys in fixed order, short arrays inline, longer arrays one item
per line, each source as a `[[sources]]` table. Errors name the record only by `context`
(normally the file name), never by directory.
"""

from __future__ import annotations

import tomllib
from typing import Any

from .errors import RecordError
from .ids import parse_record_id
from .records import (
    ACCESS_CLASSES,
    ACCESS_REASON,
    FORMAT_VERSION,
    KIND_REASON,
    KINDS,
    SOURCE_KIND_REASON,
    SOURCE_KINDS,
    STATUS_REASON,
    STATUSES,
    Record,
    Source,
    validate,
)
from .scopes import parse_scope
from .timestamps import Timestamp

RECORD_KEYS = (
    "format_version", "id", "title", "kind", "scope", "status", "access",
    "created_at", "updated_at", "tags", "aliases", "supersedes", "sources",
)  # fmt: skip
SOURCE_KEYS = ("kind", "reference", "actor", "observed_at", "revision", "content_hash")
_SOURCE_REQUIRED = ("kind", "reference", "actor")


def split_markdown(text: str) -> tuple[str, str]:
    """Return (frontmatter, body) or raise ValueError with the reason. Works on offsets into `text`:
    a large record's body is copied once, by the slice that returns it."""
    if text.startswith("+++\n"):
        start = 4
    elif text.startswith("+++\r\n"):
        start = 5
    else:
        raise ValueError("record must begin with a TOML opening delimiter (`+++`)")
    position = start
    while True:
        newline = text.find("\n", position)
        if newline < 0:
            raise ValueError("record is missing the closing TOML delimiter (`+++`)")
        line_start = newline + 1
        for ending in ("+++\n", "+++\r\n"):
            if text.startswith(ending, line_start):
                frontmatter = text[start:newline].removesuffix("\r")
                after = line_start + len(ending)
                if text.startswith("\n", after):
                    return frontmatter, text[after + 1 :]
                if text.startswith("\r\n", after):
                    return frontmatter, text[after + 2 :]
                raise ValueError("the closing delimiter must be followed by a blank line")
        position = line_start


def parse_markdown(data: str | bytes, context: str = "record") -> Record:
    """Parse canonical Markdown into a validated Record."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(context, "record is not valid UTF-8") from None
    try:
        frontmatter, body = split_markdown(data)
    except ValueError as exc:
        raise RecordError(context, f"Markdown is invalid: {exc}") from None
    try:
        table = tomllib.loads(frontmatter)
    except tomllib.TOMLDecodeError as exc:
        raise RecordError(context, f"frontmatter TOML is invalid: {exc}") from None
    record = _record_from_table(table, body, context)
    validate(record, context)
    return record


def _record_from_table(table: dict[str, Any], body: str, context: str) -> Record:
    def toml_error(detail: str) -> RecordError:
        return RecordError(context, f"frontmatter TOML is invalid: {detail}")

    _check_keys(table, RECORD_KEYS, RECORD_KEYS, toml_error)
    version = table["format_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise toml_error("field `format_version` must be an integer")
    strings = ("id", "title", "kind", "scope", "status", "access", "created_at", "updated_at")
    for key in strings:
        if not isinstance(table[key], str):
            raise toml_error(f"field `{key}` must be a string")
    for key in ("tags", "aliases", "supersedes"):
        if not isinstance(table[key], list) or not all(isinstance(item, str) for item in table[key]):
            raise toml_error(f"field `{key}` must be an array of strings")
    if not isinstance(table["sources"], list) or not all(isinstance(s, dict) for s in table["sources"]):
        raise toml_error("field `sources` must be an array of tables")
    if version != FORMAT_VERSION:
        raise RecordError(context, f"frontmatter format version {version} is unsupported; expected 1")

    def field(name: str, parse: Any, value: Any) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise RecordError(context, f"field `{name}` is invalid: {exc}") from None

    record_id = field("id", parse_record_id, table["id"])
    kind = field("kind", lambda v: _enum(v, KINDS, KIND_REASON), table["kind"])
    scope = field("scope", parse_scope, table["scope"])
    status = field("status", lambda v: _enum(v, STATUSES, STATUS_REASON), table["status"])
    access = field("access", lambda v: _enum(v, ACCESS_CLASSES, ACCESS_REASON), table["access"])
    created_at = field("created_at", Timestamp.parse, table["created_at"])
    updated_at = field("updated_at", Timestamp.parse, table["updated_at"])
    supersedes = tuple(field(f"supersedes[{i}]", parse_record_id, value) for i, value in enumerate(table["supersedes"]))
    sources = []
    for index, raw in enumerate(table["sources"]):
        _check_keys(raw, SOURCE_KEYS, _SOURCE_REQUIRED, toml_error)
        for key, value in raw.items():
            if not isinstance(value, str):
                raise toml_error(f"field `sources[{index}].{key}` must be a string")
        observed = raw.get("observed_at")
        sources.append(
            Source(
                kind=field(f"sources[{index}].kind", lambda v: _enum(v, SOURCE_KINDS, SOURCE_KIND_REASON), raw["kind"]),
                reference=raw["reference"],
                actor=raw["actor"],
                observed_at=None
                if observed is None
                else field(f"sources[{index}].observed_at", Timestamp.parse, observed),
                revision=raw.get("revision"),
                content_hash=raw.get("content_hash"),
            )
        )
    return Record(
        id=record_id,
        title=table["title"],
        kind=kind,
        scope=scope,
        status=status,
        access=access,
        created_at=created_at,
        updated_at=updated_at,
        tags=tuple(table["tags"]),
        aliases=tuple(table["aliases"]),
        supersedes=supersedes,
        sources=tuple(sources),
        body=body,
    )


def _check_keys(table: dict[str, Any], allowed: tuple[str, ...], required: tuple[str, ...], error: Any) -> None:
    for key in table:
        if key not in allowed:
            expected = ", ".join(f"`{name}`" for name in allowed)
            raise error(f"unknown field `{key}`, expected one of {expected}")
    for key in required:
        if key not in table:
            raise error(f"missing field `{key}`")


def _enum(value: str, allowed: tuple[str, ...], reason: str) -> str:
    if value not in allowed:
        raise ValueError(reason)
    return value


def render_markdown(record: Record, context: str = "record") -> str:
    """Validate, then render the canonical file text."""
    validate(record, context)
    lines = [
        f"format_version = {FORMAT_VERSION}",
        f"id = {toml_string(record.id)}",
        f"title = {toml_string(record.title)}",
        f"kind = {toml_string(record.kind)}",
        f"scope = {toml_string(record.scope)}",
        f"status = {toml_string(record.status)}",
        f"access = {toml_string(record.access)}",
        f"created_at = {toml_string(record.created_at.render())}",
        f"updated_at = {toml_string(record.updated_at.render())}",
        f"tags = {_array(record.tags)}",
        f"aliases = {_array(record.aliases)}",
        f"supersedes = {_array(record.supersedes)}",
    ]
    for source in record.sources:
        lines += ["", "[[sources]]"]
        for key in SOURCE_KEYS:
            value = getattr(source, key)
            if isinstance(value, Timestamp):
                value = value.render()
            if value is not None:
                lines.append(f"{key} = {toml_string(value)}")
    return "+++\n" + "\n".join(lines) + "\n+++\n\n" + record.body


def _array(items: tuple[str, ...]) -> str:
    if len(items) <= 1:
        return "[" + "".join(toml_string(item) for item in items) + "]"
    return "[\n" + "".join(f"    {toml_string(item)},\n" for item in items) + "]"


_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def toml_string(value: str) -> str:
    """Render a TOML string the way the canonical writer does.

    Strings with a backslash and no awkward quotes use literal style ('…' or '''…'''); every
    other string is a basic string with escapes.
    """
    literal_ok = "\\" in value and not any(ord(ch) < 0x20 and ch != "\t" or ord(ch) == 0x7F for ch in value)
    if literal_ok and "'''" not in value and not value.endswith("'") and "\n" not in value:
        return f"'''{value}'''" if "'" in value else f"'{value}'"
    out = []
    for ch in value:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
