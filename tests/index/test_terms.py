"""Terms of the lexical index: stemming applied alike to indexed text and queries, stopwords, field weights."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from stormbuffer.index.postings import FIELD_WEIGHTS, STOPWORDS, Tally, query_terms, terms, weighted_terms, words
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import SearchOptions, search
from tests.stores import make_store, write_record

LEXICAL = SearchOptions(mode="lexical")


def test_inflections_share_one_stem() -> None:
    assert terms("deploying deployed deploys deploy") == ["deploy"] * 4
    assert terms("Memories memory") == ["memori", "memori"]
    assert terms("Приветствие über 42 snake_case") == ["приветствие", "über", "42", "snake_cas"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("abcdeéingsy _-.\nÜ1"), max_size=60))
def test_a_query_looks_up_exactly_the_terms_the_same_words_are_indexed_as(text: str) -> None:
    indexed = terms(text)
    assert len(indexed) == len(words(text))
    assert set(query_terms(text)) <= set(indexed)
    for word in words(text):
        assert query_terms(word) == terms(word)  # one word: never dropped, the same term either way


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=80) | st.text(max_size=40))
def test_words_are_the_lowercased_runs_of_word_characters(text: str) -> None:
    """ASCII text takes a split without the regular expression; every text gives what `\\w+` finds."""
    assert words(text) == [word.lower() for word in re.findall(r"\w+", text)]


def test_weighted_terms_count_the_shared_fields_once_with_the_same_result() -> None:
    texts = [f"Title here\nOps / Deploys\nalias\ntag one\nnote.md\nchunk {n} deploys deployed" for n in range(3)]
    texts += ["Title here\nOps", "only one line", "Title here\nOps / Deploys\nalias\ntag one\nnote.md\n"]
    known: dict[str, str] = {}
    shared: dict[str, Tally] = {}
    assert [weighted_terms(text, known, shared) for text in texts] == [weighted_terms(text) for text in texts]
    assert len(shared) == 3


def test_stopwords_leave_a_query_only_while_it_has_other_words() -> None:
    assert query_terms("What did I say about the deploying?") == ["what", "did", "i", "say", "about", "deploy"]
    assert query_terms("Is it in the cache or on the disk?") == ["cach", "disk"]
    assert query_terms("To be or not to be") == ["to", "be", "or", "not"]
    assert {"the", "a", "of", "is"} <= STOPWORDS and not {"i", "my", "you", "what", "can"} & STOPWORDS


def test_pronouns_and_auxiliaries_still_find_an_earlier_request(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    write_record(paths, "Apps", "Can you recommend some meditation apps I can use before bed?")
    write_record(paths, "Evening walk", "The evening walk by the river was cold.")
    write_record(paths, "Evening news", "The news in the evening covered the storm.")
    sync_store(paths)
    hits = search([paths], "Can you suggest some things to do in the evening?", LEXICAL)
    assert hits[0].title == "Apps"


def test_each_field_counts_by_its_weight() -> None:
    title, heading, aliases, tags, file_name, body = FIELD_WEIGHTS
    counts, length = weighted_terms("Deploy notes\nRunbook\nrollout deploy\nops\ndeploy.md\nWe deployed it.\nDeploy!")
    assert counts["deploy"] == title + aliases + file_name + 2 * body
    assert counts["md"] == file_name and counts["rollout"] == aliases and counts["runbook"] == heading
    assert counts["op"] == tags
    assert length == 2 * title + heading + 2 * aliases + tags + 2 * file_name + 4 * body


def test_an_inflected_query_finds_the_record_and_a_title_outweighs_the_body(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    write_record(paths, "Rollback", "The service was deployed twice before the rollback worked.")
    write_record(paths, "Deployments", "How releases reach production: tag, build, deploy.")
    write_record(paths, "Lunch", "Sandwiches on Tuesdays.")
    sync_store(paths)
    hits = search([paths], "deploying", LEXICAL)
    assert [hit.title for hit in hits] == ["Deployments", "Rollback"]
    assert {hit.lexical_match_reason for hit in hits} == {"prefix"}  # "deploy" begins "deployed"
