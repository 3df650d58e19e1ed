"""Retrieval evaluation: the checked-in corpus (`sbuf evaluate`) and a user's own questions
against their store (`sbuf evaluate --queries FILE`), scored by recall@k and MRR."""

from .metrics import first_rank, mean, recall_at, reciprocal_rank

__all__ = ["first_rank", "mean", "recall_at", "reciprocal_rank"]
