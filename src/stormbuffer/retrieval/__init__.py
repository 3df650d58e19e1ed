"""Finding records: lexical (BM25), semantic (exact vector search) and hybrid (score fusion),
and compiling bounded, cited context with a receipt."""

from .context import ContextOptions, ContextResult, context
from .hits import SearchHit, SearchOptions
from .prepare import Preparation, prepare_stores
from .search import search

__all__ = [
    "ContextOptions", "ContextResult", "Preparation", "SearchHit", "SearchOptions",
    "context", "prepare_stores", "search",
]  # fmt: skip
