"""`/v1/records…`: browse, create and edit records, and move them through their lifecycle.

Each route asks `allow` first: listing and reading are `get` (records meant for people, `access =
"human"`, only for those who review: to others they do not exist), creating is `add`, replacing is
`edit`, and each lifecycle action is itself; approving asks again with the candidate's authors, whom
four eyes keep from approving it. Creation goes through the proposal path with the
activation of a reviewer (the record is active unless it may overlap another; duplicates are
refused), edits are compare-and-swap on the file's bytes, guarded by the record's ETag. A record a
program writes (a bearer token, not a person) passes the secret guard first.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from stormbuffer.auth import Principal, reads_human_records
from stormbuffer.core.errors import Conflict, NotFound
from stormbuffer.core.ids import new_record_id
from stormbuffer.core.records import Record, Source
from stormbuffer.core.repository import ProposalResult, Repository, StoredRecord
from stormbuffer.core.timestamps import Timestamp, later_of
from stormbuffer.protocol import fields
from stormbuffer.protocol.errors import ProtocolError

from . import bodies
from .access import allow, author, guard_write, stamped
from .audit import note
from .context import store_context
from .errors import NO_STORE, PRECONDITION_REQUIRED, REVISION_CONFLICT, ApiError, json_response, validation_error

# Proposal outcome → status of POST /v1/records.
CREATED_STATUS = {"accepted": 201, "possible_overlap": 201, "duplicate_of": 409, "invalid": 422}


def etag(data: bytes) -> str:
    """The strong validator of a record: BLAKE3 of its canonical Markdown bytes, quoted."""
    from blake3 import blake3

    return f'"{blake3(data).hexdigest()}"'


def record_response(stored: StoredRecord) -> Response:
    """The record with its ETag, never cached."""
    return json_response(stored.record.to_json(), headers={"ETag": etag(stored.data), **NO_STORE})


async def list_records(request: Request) -> Response:
    caller = allow(request, "get")
    params = bodies.query_params(request, {"all": False})
    include_all = bodies.boolean(params, "all")
    store = store_context(request)
    records = await store.read(lambda: store.repository().records(include_inactive=include_all))
    if not reads_human_records(caller):
        records = [record for record in records if record.access != "human"]
    note(request, (record.id for record in records))
    return json_response([record.to_json() for record in records])


async def create_record(request: Request) -> Response:
    caller = allow(request, "add")
    value = await bodies.record_input(request)
    store = store_context(request)
    now = Timestamp.now()
    record = stamped(_record(value, new_record_id(), store.scope, now, now), author(request))
    guard_write(caller, record)
    result: ProposalResult = await store.write(store.repository().propose, record, "human")
    note(request, [result.record_id])
    headers = (
        {"Location": f"/v1/records/{result.record_id}"} if result.outcome in ("accepted", "possible_overlap") else {}
    )
    return json_response(result.to_json(), CREATED_STATUS[result.outcome], headers)


async def get_record(request: Request) -> Response:
    caller = allow(request, "get")
    record_id = bodies.record_id(request.path_params["id"])
    store = store_context(request)
    stored = await store.read(store.repository().find, record_id)
    if stored.record.access == "human" and not reads_human_records(caller):
        raise NotFound(record_id)  # answered as if it did not exist
    return record_response(stored)


async def replace_record(request: Request) -> Response:
    caller = allow(request, "edit")
    value = await bodies.record_input(request)
    record_id = bodies.record_id(request.path_params["id"])
    expected = request.headers.get("if-match", "").strip()
    if expected in ("", "*"):
        raise ApiError(428, "precondition_required", PRECONDITION_REQUIRED)
    store = store_context(request)
    return await store.write(_replace, store.repository(), record_id, expected, value, caller, author(request))


def _replace(
    repository: Repository, record_id: str, expected: str, value: dict[str, Any], caller: Principal, name: str | None
) -> Response:
    current = repository.find(record_id)
    if etag(current.data) != expected:
        raise _stale(current.data)
    old = current.record
    now = Timestamp.now()
    replacement = stamped(_record(value, old.id, old.scope, old.created_at, later_of(now, old.created_at)), name)
    guard_write(caller, replacement)
    try:
        written = repository.replace_if_unchanged(current, replacement)
    except Conflict:
        try:
            latest = repository.find(record_id).data
        except Exception:  # gone or unreadable meanwhile: the conflict is still the answer
            raise ApiError(412, "revision_conflict", REVISION_CONFLICT) from None
        raise _stale(latest) from None
    return record_response(repository.find(written.id))


def _stale(data: bytes) -> ApiError:
    return ApiError(412, "revision_conflict", REVISION_CONFLICT, {"ETag": etag(data), **NO_STORE})


def _record(value: dict[str, Any], record_id: str, scope: str, created: Timestamp, updated: Timestamp) -> Record:
    """The record a validated `RecordInput` describes, always active."""
    return Record(
        id=record_id,
        title=value["title"],
        kind=value["kind"],
        scope=scope,
        status="active",
        access=value["access"],
        created_at=created,
        updated_at=updated,
        tags=tuple(value.get("tags", ())),
        aliases=tuple(value.get("aliases", ())),
        supersedes=tuple(bodies.record_id(item) for item in value.get("supersedes", ())),
        sources=_sources(value["sources"]),
        body=value["body"],
    )


def _sources(values: list[dict[str, Any]]) -> tuple[Source, ...]:
    try:
        return tuple(fields.source(value) for value in values)
    except ProtocolError:  # a field over its byte bound (the schema counts characters)
        raise validation_error("sources", "is too long") from None


# Lifecycle actions: those answered with the proposal result, and those answered with the record.
DECISIONS = {"approve": Repository.approve, "reject": Repository.reject}
TRANSITIONS = {"archive": Repository.archive, "restore": Repository.restore}
LIFECYCLE_ACTIONS = (*DECISIONS, *TRANSITIONS)


async def change_lifecycle(request: Request) -> Response:
    """`POST /v1/records/{id}/<action>` for each action of `LIFECYCLE_ACTIONS`."""
    action = request.url.path.rsplit("/", 1)[1]
    allow(request, action)
    record_id = bodies.record_id(request.path_params["id"])
    store = store_context(request)
    repository = store.repository()
    if action == "approve":  # four eyes: the candidate's authors may not approve it
        candidate = await store.read(repository.find, record_id)
        allow(request, action, {source.actor for source in candidate.record.sources})
    if action in DECISIONS:
        result: ProposalResult = await store.write(DECISIONS[action], repository, record_id)
        return json_response(result.to_json())

    def change() -> StoredRecord:
        TRANSITIONS[action](repository, record_id)
        return repository.find(record_id)

    return record_response(await store.write(change))
