"""The read operations: search, context and get.

Reads compose stores: the selected store, plus the initialized global store in the project view
when the scope filter includes `global`. Each composed store's projection is brought up to date
from the Markdown first. An invalid record file does not fail the read: it is left out (never
served) and the context receipt says the store is degraded, naming the file. A busy projection
does not fail it either (the read uses the projection as it is and reports `vector_projection_busy`),
unless there is none yet: then the read waits for the process making it (`retrieval.prepare`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stormbuffer.core.errors import NotFound, RecordError
from stormbuffer.core.repository import Repository
from stormbuffer.core.scopes import GLOBAL
from stormbuffer.core.stores import StorePaths, View, default_scopes, global_store

from . import fields
from .errors import RECORDS_INVALID, ProtocolError
from .session import Session

if TYPE_CHECKING:
    from stormbuffer.index.sync import Embedder
    from stormbuffer.retrieval import SearchOptions

MAX_RECORD_BODY_BYTES = 65536


def composed_stores(session: Session, scopes: list[str]) -> list[StorePaths]:
    """The stores a read uses: the selected one, and in the project view the initialized global store
    when `global` is among the scopes."""
    stores = [session.selected]
    if session.view is View.PROJECT and GLOBAL in scopes:
        glob = global_store(session.dirs)
        if glob.is_initialized():
            stores.append(glob)
    return stores


def prepare_retrieval(
    session: Session,
    stores: list[StorePaths],
    *,
    records_only: bool = False,
    search: tuple[str, SearchOptions] | None = None,
) -> tuple[Embedder | None, str | None, list[dict[str, str]]]:
    """The embedder (or None), the semantic fallback reason and the invalid record files left out
    (`{"store", "path"}`, the path inside the store), with every store ready for retrieval
    (`records_only`: synced, without opening the model). A one-shot process embeds at most a small
    batch (see `ready_for_retrieval`). `search`, the query and options of the search about to be
    made: its query is embedded while the stores are readied."""
    from stormbuffer.retrieval import ready_for_retrieval
    from stormbuffer.retrieval.search import embed_ahead

    open_model = None if records_only else session.embedder.get
    opened = None if search is None else (lambda embedder: embed_ahead(embedder, *search))
    ready = ready_for_retrieval(stores, open_model, session.freshness, bounded=session.freshness is None,
                                opened=opened, lock_wait=session.lock_wait)  # fmt: skip
    invalid = [{"store": paths.kind, "path": f"records/{name}"} for paths, name, _reason in ready.invalid_files]
    return ready.embedder, ready.fallback, invalid


def get(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """One agent-readable record by id, in any lifecycle state."""
    record_id = fields.target_id(request)
    scopes = fields.scope_filter(request, default_scopes(session.view, session.selected))
    access = fields.agent_access(request)
    stores = composed_stores(session, scopes)
    prepare_retrieval(session, stores, records_only=True)  # an invalid file elsewhere does not matter
    denial: Exception = NotFound(record_id)
    for store in stores:
        try:
            record = Repository(store).find(record_id).record
        except NotFound:
            continue
        except RecordError:
            raise ProtocolError("invalid_record", RECORDS_INVALID) from None
        if record.scope not in scopes:
            denial = ProtocolError("scope_denied", "record is outside the selected scope")
        elif record.access not in access:
            denial = ProtocolError("access_denied", "record is not available to this access class")
        elif len(record.body.encode("utf-8")) > MAX_RECORD_BODY_BYTES:
            raise ProtocolError("output_too_large", "record exceeds the bounded protocol output")
        else:
            return record.to_json()
    raise denial


def _retrieval_inputs(request: Mapping[str, Any], session: Session) -> tuple[str, SearchOptions, list[StorePaths]]:
    """Query, options and composed stores of search and context, checked in the protocol's order."""
    from stormbuffer.retrieval import SearchOptions

    query = fields.query(request)
    limit = fields.clamped(request, "limit", fields.DEFAULT_LIMIT, fields.MAX_LIMIT)
    scopes = fields.scope_filter(request, default_scopes(session.view, session.selected))
    access = fields.agent_access(request)
    options = SearchOptions(limit=limit, scopes=tuple(scopes), access=tuple(access))
    return query, options, composed_stores(session, scopes)


def search(request: Mapping[str, Any], session: Session) -> list[dict[str, Any]]:
    """Ranked hits over active agent-readable records (no receipt: fallbacks are not reported)."""
    from stormbuffer.retrieval import search as ranked

    query, options, stores = _retrieval_inputs(request, session)
    embedder, reason, _invalid = prepare_retrieval(session, stores, search=(query, options))
    hits = ranked(stores, query, options, embedder=embedder, fallback=reason)
    return [hit.to_json() for hit in hits]


def context(request: Mapping[str, Any], session: Session) -> dict[str, Any]:
    """Budgeted evidence blocks, the trust contract and a receipt."""
    from stormbuffer.retrieval import ContextOptions
    from stormbuffer.retrieval import context as compile_context

    query, options, stores = _retrieval_inputs(request, session)
    budget = fields.clamped(request, "budget", fields.DEFAULT_BUDGET, fields.MAX_BUDGET)  # clamped, never refused
    embedder, reason, invalid = prepare_retrieval(session, stores, search=(query, options))
    result = compile_context(stores, query, ContextOptions(budget, options), embedder=embedder, fallback=reason)
    answer = result.to_json()
    if invalid:
        answer["receipt"]["degraded"] = {"invalid_files": invalid}
    return answer
