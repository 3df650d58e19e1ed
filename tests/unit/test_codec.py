"""The canonical record codec: fixtures, malformed input and round-trip properties."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stormbuffer.core.codec import parse_markdown, render_markdown, toml_string
from stormbuffer.core.errors import RecordError
from stormbuffer.core.records import ACCESS_CLASSES, KINDS, SOURCE_KINDS, STATUSES, Record, Source
from stormbuffer.core.timestamps import Timestamp

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records"
VALID = sorted((FIXTURES / "valid").glob("*.md"))
MALFORMED = sorted((FIXTURES / "malformed").glob("*.md"))


def test_fixture_sets_cover_every_kind_and_defect() -> None:
    kinds = {parse_markdown(path.read_bytes(), path.name).kind for path in VALID}
    assert kinds == set(KINDS)
    assert len(MALFORMED) >= 12


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture_round_trips(path: Path) -> None:
    record = parse_markdown(path.read_bytes(), path.name)
    rendered = render_markdown(record)
    assert parse_markdown(rendered) == record
    assert render_markdown(parse_markdown(rendered)) == rendered


@pytest.mark.parametrize("path", [p for p in VALID if p.name.startswith("canonical-")], ids=lambda p: p.name)
def test_canonical_fixture_re_renders_to_identical_bytes(path: Path) -> None:
    assert render_markdown(parse_markdown(path.read_bytes())).encode() == path.read_bytes()


def test_decision_fixture_keeps_offsets_sources_and_body() -> None:
    record = parse_markdown((FIXTURES / "valid" / "decision.md").read_bytes())
    first, second = record.sources
    assert first.observed_at is not None and first.observed_at.render() == "2026-08-05T20:08:00-05:00"
    assert (first.revision, first.content_hash) == ("session-revision-7", "blake3:4d8f1c")
    assert second.revision == "git:9f2c11a" and second.observed_at is None and second.content_hash is None
    assert "唯一の書き込み境界" in record.aliases
    assert "```rust\n" in record.body and "record.validate()?" in record.body
    assert "唯一の書き込み境界" in render_markdown(record)


EXPECTED_ERRORS = {
    "missing-title.md": "missing field `title`",
    "unknown-field.md": "unknown field `importance`",
    "incompatible-version.md": "unsupported",
    "invalid-status.md": "field `status` is invalid: must be one of",
    "bad-toml.md": "frontmatter TOML is invalid",
    "bad-kind.md": "field `kind` is invalid",
    "updated-before-created.md": "must not precede created_at",
    "duplicate-supersedes.md": "must not contain duplicates",
    "self-supersedes.md": "must not contain the record id",
    "control-title.md": "must not contain control characters",
    "empty-body.md": "must contain non-whitespace text",
    "no-sources.md": "must contain at least one source",
    "nil-id.md": "nil UUID",
    "unquoted-datetime.md": "must be a string",
    "no-closing-delimiter.md": "missing the closing TOML delimiter",
    "no-blank-line.md": "followed by a blank line",
    "bom.md": "opening delimiter",
    "bad-timestamp.md": "RFC 3339",
    "unknown-source-field.md": "unknown field `url`",
}


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.name)
def test_malformed_fixture_names_the_file_not_the_directory(path: Path) -> None:
    with pytest.raises(RecordError) as caught:
        parse_markdown(path.read_bytes(), path.name)
    message = str(caught.value)
    assert path.name in message
    assert str(path.parent) not in message
    assert EXPECTED_ERRORS[path.name] in message


def test_non_utf8_record_is_rejected() -> None:
    data = (FIXTURES / "valid" / "fact.md").read_bytes().replace(b"readable", b"read\xffable")
    with pytest.raises(RecordError, match="not valid UTF-8"):
        parse_markdown(data, "fact.md")


def test_reference_store_records_parse() -> None:
    records = sorted((FIXTURES.parent / "reference-store" / ".sbuf" / "records").glob("*.md"))
    assert len(records) == 12
    for path in records:
        assert parse_markdown(path.read_bytes(), path.name).id == path.stem


def test_toml_strings_match_the_canonical_writer() -> None:
    assert toml_string('say "hi"') == '"say \\"hi\\""'
    assert toml_string("C:\\path") == "'C:\\path'"
    assert toml_string("it's C:\\x") == "'''it's C:\\x'''"
    assert toml_string("é ü 唯一") == '"é ü 唯一"'


# ---- properties -------------------------------------------------------------------------

_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\u2028\u2029"),
    min_size=1,
    max_size=40,
).filter(lambda s: s == s.strip() and s.strip() != "")


@st.composite
def timestamps(draw: st.DrawFn) -> Timestamp:
    year = draw(st.integers(1970, 2200))
    month, day = draw(st.integers(1, 12)), draw(st.integers(1, 28))
    hour, minute, second = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    nanos = draw(st.sampled_from([0, 500_000_000, 123_456_789, 1, 643_453_000]))
    offset = draw(st.sampled_from([0, -300, 330, 60, -720]))
    fraction = "" if nanos == 0 else "." + f"{nanos:09d}".rstrip("0")
    zone = "Z" if offset == 0 else f"{'-' if offset < 0 else '+'}{abs(offset) // 60:02d}:{abs(offset) % 60:02d}"
    return Timestamp.parse(f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{fraction}{zone}")


@st.composite
def records(draw: st.DrawFn) -> Record:
    record_id = str(draw(st.uuids(allow_nil=False)))
    created = draw(timestamps())
    updated = draw(timestamps().filter(lambda t: created <= t))
    sources = draw(
        st.lists(
            st.builds(
                Source,
                kind=st.sampled_from(SOURCE_KINDS),
                reference=_text,
                actor=_text,
                observed_at=st.none() | timestamps(),
                revision=st.none() | _text,
                content_hash=st.none() | _text,
            ),
            min_size=1,
            max_size=3,
        )
    )
    supersedes = draw(st.lists(st.uuids(allow_nil=False).map(str), max_size=3, unique=True))
    body = draw(st.text(max_size=200).filter(lambda s: s.strip() != "" and "\x00" not in s and "\r" not in s))
    return Record(
        id=record_id,
        title=draw(_text),
        kind=draw(st.sampled_from(KINDS)),
        scope=draw(st.sampled_from(["global", "project:alpha", "project:019fd5d7-6e0c-7d93-b9fe-54b02f7f11e9"])),
        status=draw(st.sampled_from(STATUSES)),
        access=draw(st.sampled_from(ACCESS_CLASSES)),
        created_at=created,
        updated_at=updated,
        tags=tuple(draw(st.lists(_text, max_size=3))),
        aliases=tuple(draw(st.lists(_text, max_size=3))),
        supersedes=tuple(s for s in supersedes if s != record_id),
        sources=tuple(sources),
        body=body,
    )


@given(records())
def test_parse_render_round_trip(record: Record) -> None:
    rendered = render_markdown(record)
    parsed = parse_markdown(rendered.encode())
    assert parsed == record
    assert parsed.created_at.render() == record.created_at.render()
    assert [s.observed_at and s.observed_at.render() for s in parsed.sources] == [
        s.observed_at and s.observed_at.render() for s in record.sources
    ]
    assert parsed.body == record.body


@given(records())
def test_canonical_text_re_renders_identically(record: Record) -> None:
    rendered = render_markdown(record)
    assert render_markdown(parse_markdown(rendered)) == rendered


@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes_the_parser(text: str) -> None:
    try:
        parse_markdown(text.encode("utf-8", "surrogatepass"), "x.md")
    except RecordError as exc:
        assert "x.md" in str(exc)
