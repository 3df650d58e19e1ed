"""A user's own questions scored against their store: which records each question expects, where
the first of them ranked, and what ranked above it.

A questions file is JSON: an array of objects, or one object per line (JSON Lines), each
`{"query": "…", "expected": ["<record id>", …]}` (`expected` may also be one id).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .metrics import first_rank, mean, recall_at, reciprocal_rank

if TYPE_CHECKING:
    from ..core.stores import StorePaths
    from ..index.sync import Embedder
    from ..retrieval import SearchHit

DEPTH = 100  # ranks looked at per question (the search limit's maximum)


class QuestionsError(ValueError):
    """A questions file that cannot be read; the message names the entry."""


@dataclass(frozen=True)
class Question:
    query: str
    expected: tuple[str, ...]


def read_questions(text: str) -> list[Question]:
    """The questions of a JSON array or JSON Lines text; QuestionsError names the first bad entry."""
    stripped = text.strip()
    if not stripped:
        raise QuestionsError("the file holds no questions")
    if stripped.startswith("["):
        try:
            entries = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise QuestionsError(f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
        located = [(f"entry {number}", entry) for number, entry in enumerate(entries, 1)]
    else:
        located = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    located.append((f"line {number}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise QuestionsError(f"line {number}: not valid JSON ({exc.msg})") from None
    return [_question(where, entry) for where, entry in located]


def _question(where: str, entry: Any) -> Question:
    if not isinstance(entry, dict) or set(entry) - {"query", "expected"}:
        raise QuestionsError(f'{where}: expected an object with "query" and "expected" only')
    query, expected = entry.get("query"), entry.get("expected")
    if not isinstance(query, str) or not query.strip():
        raise QuestionsError(f'{where}: "query" must be a non-empty string')
    if isinstance(expected, str):
        expected = [expected]
    if not isinstance(expected, list) or not expected or not all(isinstance(i, str) and i for i in expected):
        raise QuestionsError(f'{where}: "expected" must be a record id or a non-empty list of record ids')
    return Question(query, tuple(item.strip().lower() for item in expected))


def ranked_records(stores: list[StorePaths], query: str, mode: str, embedder: Embedder | None,
                   fallback: str | None = None) -> list[SearchHit]:  # fmt: skip
    """The first hit of each distinct record for `query`, best first, at most DEPTH."""
    from ..retrieval import SearchOptions, search

    hits = search(stores, query, SearchOptions(limit=DEPTH, mode=mode), embedder=embedder, fallback=fallback)
    first: dict[str, SearchHit] = {}
    for hit in hits:
        first.setdefault(hit.record_id, hit)
    return list(first.values())


def score_question(hits: list[SearchHit], expected: tuple[str, ...], k: int) -> dict[str, Any]:
    """One question's rank, reciprocal rank and recall@k, and the records ranked above the first
    expected one (at most `k`; the first `k` when none was found)."""
    ranked = [hit.record_id for hit in hits]
    rank = first_rank(ranked, expected)
    above = hits[: min(k, rank - 1) if rank else k]
    return {
        "expected": list(expected),
        "rank": rank,
        "reciprocal_rank": round(reciprocal_rank(ranked, expected), 4),
        "recall_at_k": round(recall_at(ranked, expected, k), 4),
        "above": [{"id": hit.record_id, "title": hit.title, "score": round(hit.score, 4)} for hit in above],
    }


def evaluate_questions(stores: list[StorePaths], questions: list[Question], known: set[str], *, k: int,
                       mode: str, embedder: Embedder | None, fallback: str | None,
                       progress: Callable[[int], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The report for `questions` against `stores`; `known` holds the ids of the active records there,
    so that an expected id that is not one of them is named (it can never be found). `progress(done)`
    is called after each question."""
    results = []
    for done, question in enumerate(questions, 1):
        hits = ranked_records(stores, question.query, mode, embedder, fallback)
        scored = score_question(hits, question.expected, k)
        scored["not_in_store"] = [item for item in question.expected if item not in known]
        results.append({"query": question.query, **scored})
        if progress is not None:
            progress(done)
    return {
        "mode": mode if embedder is not None or mode == "lexical" else f"lexical (fallback: {fallback})",
        "k": k,
        "questions": len(results),
        "recall_at_k": mean([result["recall_at_k"] for result in results]),
        "mean_reciprocal_rank": mean([result["reciprocal_rank"] for result in results]),
        "found_at_k": sum(1 for result in results if result["rank"] and result["rank"] <= k),
        "results": results,
    }
