"""Finding records: lexical (BM25), semantic (exact vector search) and hybrid (score fusion),
and compiling bounded, cited context with a receipt."""

from .context import ContextOptions, ContextResult, context
from .hits import SearchHit, SearchOptions
from .prepare import Readiness, ready_for_retrieval
from .search import search

__all__ = [
    "ContextOptions", "ContextResult", "Readiness", "SearchHit", "SearchOptions",
    "context", "ready_for_retrieval", "search",
]  # fmt: skip
