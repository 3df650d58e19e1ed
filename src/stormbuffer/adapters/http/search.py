"""`GET /v1/search`: ranked hits over the selected view, hybrid when the model is ready.

Unlike the agent protocol, access is not filtered for those who review (they read `human` records
too; readers and agents of a team do not) and `all=true`
includes candidates, superseded and archived records. The retrieval mode and, for a lexical answer,
the reason are reported in the `Stormbuffer-Retrieval-Mode` and `Stormbuffer-Semantic-Fallback`
headers, so the body stays the reference's array of hits.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from stormbuffer.auth import reads_human_records
from stormbuffer.core.stores import retrieval_stores
from stormbuffer.protocol.fields import DEFAULT_LIMIT, MAX_LIMIT, MAX_QUERY_BYTES
from stormbuffer.protocol.reads import prepare_retrieval

from . import bodies
from .access import allow
from .audit import note
from .context import StoreContext, store_context
from .errors import json_response, validation_error

MODE_HEADER = "Stormbuffer-Retrieval-Mode"
FALLBACK_HEADER = "Stormbuffer-Semantic-Fallback"
DEGRADED_HEADER = "Stormbuffer-Degraded"  # how many invalid record files a search left out


async def search_records(request: Request) -> Response:
    caller = allow(request, "search")
    params = bodies.query_params(request, {"query": True, "limit": False, "all": False})
    query = params["query"]
    if not query.strip():
        raise validation_error("query", "must not be empty")
    if len(query.encode("utf-8")) > MAX_QUERY_BYTES:
        raise validation_error("query", f"must be at most {MAX_QUERY_BYTES} bytes")
    limit = min(max(bodies.integer(params, "limit", DEFAULT_LIMIT), 1), MAX_LIMIT)
    include_all = bodies.boolean(params, "all")
    store = store_context(request)
    access = None if reads_human_records(caller) else ("agent",)
    hits, mode, fallback, invalid = await store.read(_search, store, query, limit, include_all, access)
    note(request, (str(hit["record_id"]) for hit in hits))
    headers = {MODE_HEADER: mode, **({FALLBACK_HEADER: fallback} if fallback else {})}
    if invalid:
        headers[DEGRADED_HEADER] = str(invalid)
    return json_response(hits, headers=headers)


def _search(
    store: StoreContext, query: str, limit: int, include_all: bool, access: tuple[str, ...] | None
) -> tuple[list[dict[str, Any]], str, str | None, int]:
    """The hits, the mode, the semantic fallback reason and how many invalid record files were left out."""
    from stormbuffer.retrieval import SearchOptions
    from stormbuffer.retrieval.search import effective_options, rank

    session = store.session
    stores = retrieval_stores(session.view, session.selected, session.dirs)
    options = effective_options(stores, SearchOptions(limit=limit, include_inactive=include_all, access=access))
    embedder, reason, invalid = prepare_retrieval(session, stores, search=(query, options))
    ranking = rank(stores, query, options, embedder=embedder, fallback=reason)
    hits = [hit.to_json() for hit in ranking.hits[: options.bounded_limit]]
    return hits, ranking.mode, ranking.semantic_fallback, len(invalid)
