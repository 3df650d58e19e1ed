"""Rank metrics over one query's ranked distinct record ids and the ids it expects."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def first_rank(ranked: Sequence[str], expected: Collection[str]) -> int | None:
    """The 1-based rank of the first expected record, or None when none was ranked."""
    return next((rank for rank, item in enumerate(ranked, 1) if item in expected), None)


def reciprocal_rank(ranked: Sequence[str], expected: Collection[str]) -> float:
    rank = first_rank(ranked, expected)
    return 1.0 / rank if rank else 0.0


def recall_at(ranked: Sequence[str], expected: Collection[str], k: int) -> float:
    """The share of the expected records among the first `k`."""
    return len(set(expected) & set(ranked[:k])) / len(expected) if expected else 0.0


def mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0
