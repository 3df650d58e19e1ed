"""The version-1 contract as named checks, each of which passes or fails with a one-line reason.

Checks are grouped by door: `invoke.*` run `sbuf invoke`, `mcp.*` run `stormbuffer-mcp`, `http.*` post
to `/v1/invoke/{operation}`, `mcp-http.*` speak MCP over Streamable HTTP to a running team server
with a token (only what holds in any store and for any role), and `equivalence.*` compare a door with `sbuf invoke`
(`equivalence.<example>` MCP, `equivalence.http.<example>` HTTP). HTTP checks that need to know the
store run only when the kit starts the server itself (the `http-serve` door).
`*.example.<operation>/<case>` run one `schema/v1` example; the aggregate checks (`envelopes`,
`transport`, `structured-content`, `sanitized`, `bounds.output`) judge every answer the run received
through their door, after a few probes of their own, so they run last.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from stormbuffer.core.ids import is_canonical_uuid
from stormbuffer.core.secrets import contains_secret
from stormbuffer.core.timestamps import Timestamp

from . import messages
from .doors import (
    HTTP,
    HTTP_SERVE,
    INVOKE,
    MCP,
    MCP_HTTP,
    SERVE_TIMEOUT_S,
    TOOLS,
    Call,
    HttpDoor,
    InvokeDoor,
    McpSession,
    Recorder,
    Served,
)
from .examples import Example, difference, examples, mask_generated, mask_semantic
from .store import GLOBAL_RECORD_ID, PROJECT_SCOPE, Place, ThrowawayStore, record_markdown

MAX_INVOKE_INPUT = 262144
MAX_INVOKE_OUTPUT = 262144  # the line, newline included
MAX_MCP_ENVELOPE = 122880
MAX_HTTP_BODY = MAX_INVOKE_OUTPUT - 1  # the line, without its newline
FOREIGN = "attacker.example"
ACTIVE_ID = "0194d2a1-1111-7a01-8a01-000000000001"
MISSING_ID = "0194d2a1-0000-7a00-8a00-000000000000"
TOKEN = "ghp_" + "Q7w8E9r0T1y2U3i4O5p6A7s8"
SOURCE = {"kind": "conversation", "reference": "conformance:probe", "actor": "agent"}
CANARY = "/srv/sbuf-conformance-canary"
OVERSIZED, OVERSIZED_ID = 5, "0194d2a1-8888-7a08-8a08-00000000000"
OVERSIZED_RECALL = {"query": "oversized note", "limit": 5, "budget": 10}
INVOKE_TOO_LARGE = "response exceeds the bounded protocol output"
MCP_TOO_LARGE = "response exceeds the bounded MCP tool output"
RECORD_TOO_LARGE = "record exceeds the bounded protocol output"
TEMPLATES = {"stormbuffer://record/{id}", "stormbuffer://scope/{scope}/records", "stormbuffer://candidate/{id}"}
WORKERS = 4  # invoke processes at a time while fetching example answers
# MCP write examples run in one session in this order (each sees the store the ones before left).
WRITE_ORDER = ("update", "remember", "archive")


class Failed(Exception):
    """A check failed; the message is its one-line reason."""


@dataclass(frozen=True)
class Check:
    id: str
    doors: frozenset[str]
    summary: str
    run: Callable[[Run], None]
    aggregate: bool = False


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise Failed(reason)


def mcp_sendable(example: Example) -> bool:
    """Examples an MCP tool can send: a tool's operation, and nothing only the command line checks."""
    request = example.request
    code = example.response.get("error", {}).get("code")
    return (
        example.operation in TOOLS
        and isinstance(request, dict)
        and request.get("version") == 1
        and "operation" not in request
        and code not in ("invalid_json", "input_too_large")
    )


def lexical_recall(example: Example) -> bool:
    """A successful lexical `context` example. The MCP adapter prepares the model itself, so its recall
    is hybrid: such examples hold for `sbuf invoke` only (MCP is compared with a hybrid invoke)."""
    return example.operation == "context" and example.response["ok"] is True and not example.hybrid


def arguments(example: Example) -> dict[str, Any]:
    return {key: value for key, value in example.request.items() if key != "version"}


class Run:
    """One run against the doors given: the throwaway store, the record of calls, and caches."""

    def __init__(
        self,
        store: ThrowawayStore,
        invoke: list[str] | None,
        mcp: list[str] | None,
        selected: Iterable[str] = (),
        *,
        http: str | None = None,
        http_serve: list[str] | None = None,
        mcp_http: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self.mcp_http = mcp_http  # the URL of a running server's `/mcp`, and a team token for it
        self.http_url = http
        self.http_serve = http_serve
        self._servers: list[Served] = []
        self._serve_failed = False
        self._http_doors: list[HttpDoor] = []
        self.selected = frozenset(selected)  # check ids whose example answers are fetched together
        self.recorder = Recorder()
        self.invoke = InvokeDoor(invoke, self.recorder) if invoke else None
        self.mcp_command = mcp
        self._answers: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._sessions: list[McpSession] = []
        self._probed: set[str] = set()
        self._local = threading.local()
        self._prefetched = self._mcp_done = False

    def close(self) -> None:
        closables: list[McpSession | HttpDoor | Served] = [*self._sessions, *self._http_doors, *self._servers]
        for closable in closables:
            try:
                closable.close()
            except Exception:  # a broken server must not hide the report
                pass

    # ---- places and sessions, made on first use ----------------------------------------------

    @property
    def reads(self) -> Place:
        """Shared by the calls of this thread that must not change the store."""
        return self._shared(models=False)

    def _shared(self, *, models: bool) -> Place:
        """Each thread has its own: a read syncs the disposable index under a lock that a concurrent
        read would find busy."""
        key = "hybrid" if models else "reads"
        if getattr(self._local, key, None) is None:
            setattr(self._local, key, self.store.place(models=models))
        place: Place = getattr(self._local, key)
        return place

    @cached_property
    def scoped(self) -> Place:
        """The contract store plus an initialized global store with one record (and the model, if any)."""
        return self.store.place(global_store=True, models=self.store.model_cache() is not None)

    def session(self, place: Place, writes: str) -> McpSession:
        assert self.mcp_command is not None
        session = McpSession.stdio(self.mcp_command, self.recorder, place, writes)
        self._sessions.append(session)
        return session

    @cached_property
    def remote(self) -> McpSession:
        """The session with the running server's `/mcp`."""
        assert self.mcp_http is not None
        session = McpSession.remote(*self.mcp_http, self.recorder)
        self._sessions.append(session)
        return session

    @cached_property
    def read_only(self) -> McpSession:
        """A session without a write grant on the scoped place."""
        return self.session(self.scoped, "none")

    def serve(self, place: Place) -> HttpDoor:
        """The HTTP door of a server the kit starts in `place`; after one that never listened, every
        later start fails at once."""
        assert self.http_serve is not None
        expect(not self._serve_failed, "an earlier server did not accept connections on its port")
        try:
            served = Served(self.http_serve, place)
        except RuntimeError:
            self._serve_failed = True  # one wait of SERVE_TIMEOUT_S per run, not one per check
            raise
        self._servers.append(served)
        return self._door(served.url, place.env)

    def _door(self, url: str, env: Mapping[str, str] | None = None) -> HttpDoor:
        door = HttpDoor(url, self.recorder, env)
        self._http_doors.append(door)
        return door

    @cached_property
    def http(self) -> HttpDoor:
        """The HTTP door of calls that must not change the store: the server given, or one the kit
        starts in a place of its own."""
        if self.http_url is not None:
            return self._door(self.http_url)
        return self.serve(self.store.place())

    @cached_property
    def http_hybrid(self) -> HttpDoor:
        self._require_model()
        return self.serve(self.store.place(models=True))

    def caller(self, door: str, place: Place | None = None) -> Callable[..., Call]:
        """`call(operation, request=None, *, raw=None)` through `door`, in `place` (a server started
        there for HTTP) or, without one, where calls must not change the store."""
        if door == HTTP:
            return self.http.call if place is None else self.serve(place).call
        assert self.invoke is not None
        invoke, where = self.invoke, place
        return lambda operation, request=None, *, raw=None: invoke.call(where or self.reads, operation, request,
                                                                          raw=raw)  # fmt: skip

    # ---- example answers ----------------------------------------------------------------------

    def invoke_answer(self, example: Example, *, models: bool = False) -> dict[str, Any] | None:
        """`sbuf invoke`'s answer; with `models` (for a comparison with MCP) the model is present."""
        key = (INVOKE + "+model" if models and not example.hybrid else INVOKE, example.name)
        if not self._prefetched:
            self._prefetched = True
            self._prefetch()
        if key not in self._answers:
            assert self.invoke is not None
            place = self._place_for(example, fresh=example.writes, models=models)
            self._answers[key] = self.invoke.call(place, example.operation, example.request).envelope
        return self._answers[key]

    def http_answer(self, example: Example) -> dict[str, Any] | None:
        """The server's answer: reads on one server, hybrid ones on another with the model, each
        successful write on a server of its own."""
        key = (HTTP, example.name)
        if not self._prefetched:
            self._prefetched = True
            self._prefetch()
        if key not in self._answers:
            if example.writes:
                door = self.serve(self.store.place())
            else:
                door = self.http_hybrid if example.hybrid else self.http
            self._answers[key] = door.call(example.operation, example.request).envelope
        return self._answers[key]

    def mcp_answer(self, example: Example) -> dict[str, Any] | None:
        if (MCP, example.name) not in self._answers:
            self._mcp_examples()
        return self._answers.get((MCP, example.name))

    def _prefetch(self) -> None:
        """The invoke answers the selected checks need, fetched by a few processes at a time."""
        wanted: list[tuple[Example, str]] = []
        for example in examples():
            compared = f"equivalence.{example.name}" in self.selected
            over_http = f"equivalence.http.{example.name}" in self.selected
            if compared or over_http or f"invoke.example.{example.name}" in self.selected:
                wanted.append((example, INVOKE))
            if compared and example.operation == "context":
                wanted.append((example, INVOKE + "+model"))
            if over_http or f"http.example.{example.name}" in self.selected:
                wanted.append((example, HTTP))

        def fetch(job: tuple[Example, str]) -> None:
            with suppress(Failed, RuntimeError):  # the check reports it when it asks again
                if job[1] == HTTP:
                    self.http_answer(job[0])
                else:
                    self.invoke_answer(job[0], models=job[1] != INVOKE)

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(fetch, wanted))

    def _place_for(self, example: Example, *, fresh: bool, models: bool = False) -> Place:
        models = models or example.hybrid
        if models:
            self._require_model()
        return self.store.place(models=models) if fresh else self._shared(models=models)

    def _require_model(self) -> None:
        if self.store.model_cache() is None:
            raise Failed("a hybrid example needs a prepared embedding model; run `sbuf init` first")

    def _mcp_examples(self) -> None:
        """Every example MCP can send, in one session with the model present: reads and failures
        first on an unchanged store, then the MCP probes (none writes), then the writes in
        `WRITE_ORDER`."""
        if self._mcp_done:
            return
        self._mcp_done = True
        chosen = [example for example in examples() if mcp_sendable(example)]
        writes = sorted((ex for ex in chosen if ex.writes), key=lambda example: WRITE_ORDER.index(example.operation))
        session = self.session(self.mcp_place(), "all")
        for example in [ex for ex in chosen if not ex.writes]:
            self._answers[(MCP, example.name)] = session.call(TOOLS[example.operation], arguments(example)).envelope
        session.call("memory_recall", {"query": "release lockfile"})
        session.call("memory_get", {"id": MISSING_ID})
        session.call("memory_get", {"id": ACTIVE_ID, "profile_path": CANARY})
        session.call("memory_remember", remember(f"token {TOKEN}", version=False))
        for example in writes:
            self._answers[(MCP, example.name)] = session.call(TOOLS[example.operation], arguments(example)).envelope

    def mcp_place(self) -> Place:
        """A fresh place for an MCP session; the model is linked in when there is one, since the
        adapter would otherwise prepare it for its first recall."""
        return self.store.place(models=self.store.model_cache() is not None)

    def probe(self, door: str) -> None:
        """The probes of a door: a few answers every aggregate check sees, whatever else was selected."""
        if door == MCP:
            self._mcp_examples()
            return
        if door in self._probed:
            return
        self._probed.add(door)
        if door == MCP_HTTP:
            probes = [("memory_recall", {"query": "release lockfile"}), ("memory_get", {"id": MISSING_ID}),
                      ("memory_get", {"id": ACTIVE_ID, "profile_path": CANARY}),
                      ("memory_remember", remember(f"token {TOKEN}", version=False))]  # fmt: skip
            for tool, arguments in probes:
                self.remote.call(tool, arguments)
            return
        call = self.caller(door)
        call("search", {"version": 1, "query": "release lockfile"})
        call("context", {"version": 1, "query": "release lockfile"})
        call("get", {"version": 1, "id": MISSING_ID})
        call("search", {"version": 1, "query": "x", "profile_path": CANARY})
        # refused by the secret guard; over HTTP it reaches the server's own store, where it writes nothing
        (call if door == HTTP else self.caller(door, self.store.place()))("remember", remember(f"token {TOKEN}"))

    def answers(self, door: str) -> list[Call]:
        self.probe(door)
        return self.recorder.of(door)


def remember(body: str, *, version: bool = True) -> dict[str, Any]:
    request = {"title": "Conformance probe", "kind": "fact", "body": body, "source": SOURCE}
    return {"version": 1, **request} if version else request


# ---- example checks ---------------------------------------------------------------------------


def judge(example: Example, envelope: dict[str, Any] | None) -> None:
    expect(envelope is not None, "no envelope came back")
    try:
        actual = mask_generated(example.operation, example.request, envelope)
    except ValueError as exc:
        raise Failed(str(exc)) from None
    expected = mask_generated(example.operation, example.request, example.response)
    if example.hybrid:
        expected, actual = mask_semantic(expected), mask_semantic(actual)
    found = difference(expected, actual, extra=True)
    expect(found is None, str(found))


def invoke_example(example: Example) -> Callable[[Run], None]:
    return lambda run: judge(example, run.invoke_answer(example))


def mcp_example(example: Example) -> Callable[[Run], None]:
    return lambda run: judge(example, run.mcp_answer(example))


def http_example(example: Example) -> Callable[[Run], None]:
    return lambda run: judge(example, run.http_answer(example))


def equivalent(example: Example, door: str = MCP) -> Callable[[Run], None]:
    """The answer through `door` (MCP, or HTTP) equals `sbuf invoke`'s; MCP recall is always hybrid."""

    def check(run: Run) -> None:
        if door == MCP:
            left, right = run.invoke_answer(example, models=example.operation == "context"), run.mcp_answer(example)
        else:
            left, right = run.invoke_answer(example), run.http_answer(example)
        expect(left is not None and right is not None, "a door gave no envelope")
        try:
            masked = [mask_generated(example.operation, example.request, answer) for answer in (left, right)]
        except ValueError as exc:
            raise Failed(str(exc)) from None
        if example.hybrid or example.operation == "context":
            masked = [mask_semantic(answer) for answer in masked]
        found = difference(masked[0], masked[1])
        expect(found is None, f"invoke and {'MCP' if door == MCP else 'HTTP'} differ: {found}")

    return check


# ---- behaviours (reference-protocol §15) and bounds through `sbuf invoke` and HTTP -----------------


def _code(call: Call) -> str | None:
    envelope = call.envelope or {}
    return envelope.get("error", {}).get("code") if envelope.get("ok") is False else ("ok" if envelope else None)


def expect_code(call: Call, code: str) -> None:
    expect(_code(call) == code, f"{call.operation}: expected {code}, got {_code(call)}")


Behaviour = Callable[[Run, str], None]  # a check of `run` through the door named


def invalid_json(run: Run, door: str) -> None:
    expect_code(run.caller(door)("search", raw=b"{not-json"), "invalid_json")


def unknown_operation(run: Run, door: str) -> None:
    call = run.caller(door)("frobnicate", {"version": 1})
    expect_code(call, "unknown_operation")
    expect((call.envelope or {}).get("operation") == "frobnicate", "the envelope does not repeat the operation")


def path_denied(run: Run, door: str) -> None:
    call = run.caller(door)("search", {"version": 1, "query": "x", "path": CANARY})
    expect_code(call, "path_denied")
    expect(CANARY not in call.text, "the answer echoes the path")


def fresh_receipts(run: Run, door: str) -> None:
    send = run.caller(door)
    expect_fresh_receipts([send("context", {"version": 1, "query": "release"}) for _ in range(2)])


def expect_fresh_receipts(calls: list[Call]) -> None:
    """Two identical recalls differ in their receipt id and time only."""
    ids, receipts = [], []
    for call in calls:
        expect_code(call, "ok")
        receipt = dict((call.envelope or {})["result"]["receipt"])
        ids.append(receipt.pop("receipt_id", None))
        expect(is_canonical_uuid(ids[-1]), "receipt_id is not a UUID")
        try:
            Timestamp.parse(receipt.pop("retrieved_at", None))
        except Exception:
            raise Failed("retrieved_at is not an RFC 3339 timestamp") from None
        receipts.append(receipt)
    expect(ids[0] != ids[1], "two calls share a receipt_id")
    expect(receipts[0] == receipts[1], "two identical calls differ beyond receipt_id and retrieved_at")


def secret_guard(run: Run, door: str) -> None:
    place = run.store.place()
    before = place.record_files()
    send = run.caller(door, place)
    for operation, request in (
        ("remember", remember(f"Deploy with {TOKEN} today.")),
        ("update", {"version": 1, "id": ACTIVE_ID, "body": f"Authorization: Bearer {TOKEN}", "source": SOURCE}),
    ):
        call = send(operation, request)
        expect_code(call, "secret_detected")
        expect(TOKEN not in call.text, f"{operation}: the answer echoes the secret")
        expect(place.record_files() == before, f"{operation}: a record file was written")


def recall_scopes(recall: Callable[[dict[str, Any]], Call]) -> None:
    """A scope filter narrows recall: each filter returns only its own scope's blocks."""
    both = set()
    for scope in ("global", PROJECT_SCOPE):
        call = recall({"query": "release", "scope": scope})
        expect_code(call, "ok")
        blocks = (call.envelope or {})["result"]["blocks"]
        scopes = {block["scope"] for block in blocks}
        expect(bool(blocks), f"scope {scope}: no block, though a record of that scope matches")
        expect(scopes == {scope}, f"scope filter {scope} returned blocks of {sorted(scopes)}")
        both |= {block["record_id"] for block in blocks}
    expect(GLOBAL_RECORD_ID in both, "the global record was not recalled")


def recall_scope(run: Run, door: str) -> None:
    send = run.caller(door, run.scoped)
    recall_scopes(lambda request: send("context", {"version": 1, **request}))


def oversized(place: Place) -> Place:
    """Five records whose bodies are one word of 66000 bytes: each is past the 65536 bytes `get`
    returns, and five blocks of one token each are past every output bound."""
    place.write_records({
        f"{OVERSIZED_ID}{n}.md": record_markdown(f"{OVERSIZED_ID}{n}", PROJECT_SCOPE, f"Oversized note {n}",
                                                 "z" * 66000).encode()
        for n in range(OVERSIZED)
    })  # fmt: skip
    return place


def expect_too_large(call: Call, message: str) -> None:
    expect_code(call, "output_too_large")
    found = (call.envelope or {}).get("error", {}).get("message")
    expect(found == message, f"{call.operation}: message is {found!r}")


def output_limit(run: Run, door: str) -> None:
    send = run.caller(door, oversized(run.store.place()))
    expect_too_large(send("context", {"version": 1, **OVERSIZED_RECALL}), INVOKE_TOO_LARGE)
    expect_too_large(send("get", {"version": 1, "id": f"{OVERSIZED_ID}0"}), RECORD_TOO_LARGE)


def mcp_output_limit(run: Run) -> None:
    session = run.session(oversized(run.mcp_place()), "none")
    expect_too_large(session.call("memory_recall", OVERSIZED_RECALL), MCP_TOO_LARGE)
    expect_too_large(session.call("memory_get", {"id": f"{OVERSIZED_ID}0"}), RECORD_TOO_LARGE)


def too_large_input() -> bytes:
    return b'{"version":1,"query":"' + b"x" * MAX_INVOKE_INPUT + b'"}'


def input_bound(run: Run) -> None:
    assert run.invoke is not None
    expect_code(run.invoke.call(run.reads, "search", raw=too_large_input()), "input_too_large")


# ---- what only HTTP has: refusals before any operation -------------------------------------------


def expect_refusal(run: Run, status: int, code: str, headers: dict[str, str], data: bytes | None = None) -> None:
    found, body = run.http.refusal(headers, data)
    error = body.get("error") if isinstance(body, dict) else None
    got = error.get("code") if isinstance(error, dict) else None
    expect((found, got) == (status, code), f"expected {status} {code}, got {found} {got}")


def http_input_bound(run: Run) -> None:
    expect_refusal(run, 413, "payload_too_large", {}, too_large_input())


def foreign_host(run: Run) -> None:
    expect_refusal(run, 403, "host_not_allowed", {"Host": FOREIGN})


def foreign_origin(run: Run) -> None:
    expect_refusal(run, 403, "origin_not_allowed", {"Origin": f"http://{FOREIGN}"})


# ---- MCP listings and write grants -----------------------------------------------------------------


def mcp_initialize(run: Run) -> None:
    initialized = run.read_only.client.initialized
    expect(initialized.server_info.name == "stormbuffer-mcp", f"serverInfo.name is {initialized.server_info.name!r}")
    expect("project store" in (initialized.instructions or ""), "the instructions do not name the project store")


def mcp_tools(run: Run) -> None:
    listed_tools(run.read_only)


def listed_tools(session: McpSession) -> None:
    from stormbuffer.protocol import schemas

    wanted = schemas.load("mcp-tools")["$defs"]
    tools = session.client.tools()
    names = [tool.name for tool in tools]
    expect(sorted(names) == sorted(wanted), f"tools are {names}, expected {sorted(wanted)}")
    expect(names == sorted(names), "tools are not listed in name order")
    for tool in tools:
        definition = wanted[tool.name]
        mcp = definition["x-mcp"]
        expect(tool.description == mcp["description"], f"{tool.name}: description differs")
        hints = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
        hints.pop("title", None)
        expect(hints == mcp["annotations"], f"{tool.name}: annotations are {hints}")
        schema = tool.input_schema
        expect(schema.get("required") == definition["required"], f"{tool.name}: required is {schema.get('required')}")
        expect(schema.get("additionalProperties") is False, f"{tool.name}: additional properties are allowed")
        expect(set(schema.get("properties", {})) == set(definition["properties"]), f"{tool.name}: properties differ")


def mcp_resources(run: Run) -> None:
    listed_resources(run.read_only)


def listed_resources(session: McpSession) -> None:
    client = session.client
    templates = {template.uri_template for template in client.resource_templates()}
    expect(templates == TEMPLATES, f"resource templates are {sorted(templates)}")
    expect(client.resources() == [], "resources/list is not empty")


def mcp_read_only(run: Run) -> None:
    session = run.read_only
    before = run.scoped.record_files()
    for tool, args in (
        ("memory_remember", remember("Deploys happen after the release check.", version=False)),
        ("memory_update", {"id": ACTIVE_ID, "body": "Release builds may resolve versions.", "source": SOURCE}),
        ("memory_forget", {"id": ACTIVE_ID}),
    ):
        call = session.call(tool, args)
        expect_code(call, "permission_denied")
        message = (call.envelope or {}).get("error", {}).get("message")
        expect(message == messages.WRITES_DISABLED, f"{tool}: message is {message!r}")
        expect(run.scoped.record_files() == before, f"{tool}: a record file was written without a write grant")


def mcp_candidate_writes(run: Run) -> None:
    """With `--allow-candidate-writes`, remember and update make candidates; forget is refused."""
    place = run.mcp_place()
    session = run.session(place, "candidates")
    target = f"{ACTIVE_ID}.md"
    before = place.record_files()[target]
    for tool, args in (
        ("memory_remember", remember("Deploys happen after the release check.", version=False)),
        ("memory_update", {"id": ACTIVE_ID, "body": "Release builds may resolve versions.", "source": SOURCE}),
    ):
        call = session.call(tool, args)
        expect_code(call, "ok")
        outcome = (call.envelope or {})["result"].get("outcome")
        expect(outcome == "requires_approval", f"{tool}: outcome {outcome!r}, expected requires_approval")
    call = session.call("memory_forget", {"id": ACTIVE_ID})
    expect_code(call, "permission_denied")
    message = (call.envelope or {}).get("error", {}).get("message")
    expect(message == messages.CANDIDATES_ONLY, f"memory_forget: message is {message!r}")
    expect(place.record_files()[target] == before, "memory_forget changed the record without the grant")


def mcp_recall_scope(run: Run) -> None:
    session = run.read_only
    recall_scopes(lambda arguments: session.call("memory_recall", arguments))


# ---- MCP over Streamable HTTP of a running team server ---------------------------------------------


def remote_unauthorized(run: Run) -> None:
    """Without a token `/mcp` is 401, its `WWW-Authenticate` naming the RFC 9728 metadata, served."""
    import httpx2

    assert run.mcp_http is not None
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                             "clientInfo": {"name": "sbuf-conformance", "version": "1"}}}  # fmt: skip
    with httpx2.Client(timeout=SERVE_TIMEOUT_S, trust_env=False) as http:
        refused = http.post(run.mcp_http[0], json=initialize, headers={"Accept": "application/json, text/event-stream"})
        expect(refused.status_code == 401, f"without a token: status {refused.status_code}, expected 401")
        challenge = refused.headers.get("www-authenticate", "")
        found = re.match(r'Bearer resource_metadata="([^"]+)"', challenge)
        expect(found is not None, 'the 401 has no WWW-Authenticate: Bearer resource_metadata="…"')
        assert found is not None
        metadata = http.get(found.group(1))
    expect(metadata.status_code == 200, f"the resource metadata: status {metadata.status_code}")
    try:
        document = metadata.json()
    except ValueError:
        document = None
    expect(isinstance(document, dict) and isinstance(document.get("resource"), str),
           "the resource metadata is not a JSON object naming its resource")  # fmt: skip


def remote_initialize(run: Run) -> None:
    initialized = run.remote.client.initialized
    expect(initialized.server_info.name == "stormbuffer-mcp", f"serverInfo.name is {initialized.server_info.name!r}")
    expect("untrusted evidence" in (initialized.instructions or ""), "the instructions do not call memory untrusted")


def remote_missing(run: Run) -> None:
    expect_code(run.remote.call("memory_get", {"id": MISSING_ID}), "not_found")


def remote_receipts(run: Run) -> None:
    expect_fresh_receipts([run.remote.call("memory_recall", {"query": "release"}) for _ in range(2)])


def remote_secret_guard(run: Run) -> None:
    """A secret in a write is refused (by the guard, or before it for a role that may not write)."""
    call = run.remote.call("memory_remember", remember(f"Deploy with {TOKEN} today.", version=False))
    expect(_code(call) in ("secret_detected", "permission_denied"), f"expected secret_detected, got {_code(call)}")
    expect(TOKEN not in call.text, "the answer echoes the secret")


# ---- aggregate checks over every answer of a door ----------------------------------------------------


def each_answer(door: str, problem: Callable[[Run, Call], str | None]) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        calls = run.answers(door)
        found = [(call, text) for call in calls if (text := problem(run, call))]
        if found:
            call, text = found[0]
            raise Failed(f"{call.operation}: {text} ({len(found)} of {len(calls)} answers)")

    return check


def envelope_problem(_run: Run, call: Call) -> str | None:
    from stormbuffer.protocol.invoke import validate_envelope

    if call.envelope is None:
        return "no envelope"
    problems = validate_envelope(call.envelope)
    if problems:
        return problems[0]
    if call.envelope["operation"] != call.operation:
        return f"operation is {call.envelope['operation']!r}"
    return None


def recorded_problem(_run: Run, call: Call) -> str | None:
    """The first transport rule the answer broke (as the door recorded it)."""
    return call.problems[0] if call.problems else None


def sanitization_problem(run: Run, call: Call) -> str | None:
    if str(run.store.root) in call.text:
        return "the answer contains a host path"
    if "Traceback (most recent call last)" in call.text or 'File "' in call.text:
        return "the answer contains a traceback"
    envelope = call.envelope or {}
    if envelope.get("ok") is not False:
        return None
    error = envelope.get("error") or {}
    code, message = str(error.get("code")), str(error.get("message"))
    if any(secret in call.text for secret in secrets(call.request)):
        return "the answer echoes a secret from the request"
    if contains_secret(message):
        return "the message contains credential-like material"
    if not messages.is_fixed(code, message):
        return f"{code}: {message[:60]!r} is not a fixed message"
    return None


def secrets(request: Any) -> Iterator[str]:
    """Credential-like words anywhere in a request."""
    if isinstance(request, dict):
        for value in request.values():
            yield from secrets(value)
    elif isinstance(request, list):
        for item in request:
            yield from secrets(item)
    elif isinstance(request, str):
        yield from (word for word in request.split() if len(word) >= 8 and contains_secret(word))


def size_problem(limit: int) -> Callable[[Run, Call], str | None]:
    def problem(_run: Run, call: Call) -> str | None:
        size = len(call.text.encode("utf-8"))
        return f"an answer of {size} bytes exceeds {limit}" if size > limit else None

    return problem


# ---- the catalogue ----------------------------------------------------------------------------------


# (id after the door, summary, check, whether it needs to know the store)
BEHAVIOURS: list[tuple[str, str, Behaviour, bool]] = [
    ("behaviour.invalid-json", "text that is not JSON is invalid_json", invalid_json, False),
    ("behaviour.unknown-operation", "an unknown operation is named back", unknown_operation, False),
    ("behaviour.path-denied", "a `path` key is path_denied, its value not echoed", path_denied, False),
    ("behaviour.receipt", "identical recalls differ only in receipt id, time", fresh_receipts, False),
    ("behaviour.secret-guard", "secrets are refused and nothing is written", secret_guard, True),
    ("behaviour.scope-filter", "a scope filter narrows recall", recall_scope, True),
    ("bounds.output-limit", "answers past a bound are output_too_large", output_limit, True),
]


# Per door: the id and summary of its transport check, and its output bound (bytes, summary).
AGGREGATES: list[tuple[str, tuple[str, str], tuple[int, str]]] = [
    (INVOKE, ("transport", "one line on stdout, nothing on stderr, exit status 0 iff ok"),
     (MAX_INVOKE_OUTPUT, "every answer line is at most 262144 bytes")),
    (MCP, ("structured-content", "content[0].text is structuredContent; isError iff not ok"),
     (MAX_MCP_ENVELOPE, "every tool envelope is at most 122880 bytes")),
    (HTTP, ("transport", "a JSON body; status 200 iff ok, else the status of the error code"),
     (MAX_HTTP_BODY, "every answer body is at most 262143 bytes")),
    (MCP_HTTP, ("structured-content", "content[0].text is structuredContent; isError iff not ok"),
     (MAX_MCP_ENVELOPE, "every tool envelope is at most 122880 bytes")),
]  # fmt: skip


def through(behaviour: Behaviour, door: str) -> Callable[[Run], None]:
    return lambda run: behaviour(run, door)


def catalogue() -> list[Check]:
    """Every check, in the order a run makes them (aggregate checks last)."""
    both = frozenset({INVOKE, MCP})
    invoke, mcp = frozenset({INVOKE}), frozenset({MCP})
    http, served = frozenset({HTTP}), frozenset({HTTP, HTTP_SERVE})
    found = [Check(f"invoke.example.{ex.name}", invoke, f"`sbuf invoke {ex.operation}`: {ex.case}", invoke_example(ex))
             for ex in examples()]  # fmt: skip
    found += [Check(f"invoke.{name}", invoke, summary, through(behaviour, INVOKE))
              for name, summary, behaviour, _ in BEHAVIOURS]  # fmt: skip
    found += [
        Check("invoke.bounds.input", invoke, "more than 262144 bytes of input is input_too_large", input_bound),
        Check("mcp.initialize", mcp, "server name and instructions", mcp_initialize),
        Check("mcp.tools", mcp, "exactly the five tools, with their annotations and arguments", mcp_tools),
        Check("mcp.resources", mcp, "no resources and the three resource templates", mcp_resources),
        Check("mcp.read-only", mcp, "without a write grant every write tool is refused", mcp_read_only),
        Check("mcp.candidate-writes", mcp, "candidates may be written, records not archived", mcp_candidate_writes),
        Check("mcp.recall-scope", mcp, "a scope filter narrows memory_recall", mcp_recall_scope),
        Check("mcp.bounds.output-limit", mcp, "answers past a bound are output_too_large", mcp_output_limit),
    ]
    sendable = [example for example in examples() if mcp_sendable(example)]
    found += [Check(f"mcp.example.{ex.name}", mcp, f"`{TOOLS[ex.operation]}`: {ex.case}", mcp_example(ex))
              for ex in sendable if not lexical_recall(ex)]  # fmt: skip
    found += [Check(f"equivalence.{ex.name}", both, "invoke and MCP give the same envelope", equivalent(ex))
              for ex in sendable]  # fmt: skip
    found += [Check(f"http.example.{ex.name}", served, f"`POST /v1/invoke/{ex.operation}`: {ex.case}",
                    http_example(ex)) for ex in examples()]  # fmt: skip
    found += [Check(f"http.{name}", served if known else http, summary, through(behaviour, HTTP))
              for name, summary, behaviour, known in BEHAVIOURS]  # fmt: skip
    found += [
        Check("http.bounds.input", http, "a body over 262144 bytes is 413 payload_too_large", http_input_bound),
        Check("http.host", http, "a foreign Host is 403 host_not_allowed", foreign_host),
        Check("http.origin", http, "a foreign Origin is 403 origin_not_allowed", foreign_origin),
    ]
    remote = frozenset({MCP_HTTP})
    found += [
        Check("mcp-http.unauthorized", remote, "no token: 401 naming the served RFC 9728 metadata",
              remote_unauthorized),
        Check("mcp-http.initialize", remote, "server name and instructions", remote_initialize),
        Check("mcp-http.tools", remote, "exactly the five tools, with their annotations and arguments",
              lambda run: listed_tools(run.remote)),
        Check("mcp-http.resources", remote, "no resources and the three resource templates",
              lambda run: listed_resources(run.remote)),
        Check("mcp-http.not-found", remote, "a missing record is not_found", remote_missing),
        Check("mcp-http.behaviour.receipt", remote, "identical recalls differ only in receipt id, time",
              remote_receipts),
        Check("mcp-http.behaviour.secret-guard", remote, "a secret is refused and not echoed", remote_secret_guard),
    ]  # fmt: skip
    found += [Check(f"equivalence.http.{ex.name}", served | invoke, "invoke and HTTP give the same envelope",
                    equivalent(ex, HTTP)) for ex in examples()]  # fmt: skip
    for door, transport, limit in AGGREGATES:
        doors, run_on = frozenset({door}), (lambda problem, door=door: each_answer(door, problem))
        found += [
            Check(f"{door}.envelopes", doors, "every envelope is valid against its schemas",
                  run_on(envelope_problem), aggregate=True),
            Check(f"{door}.{transport[0]}", doors, transport[1], run_on(recorded_problem), aggregate=True),
            Check(f"{door}.sanitized", doors, "no host path, traceback or echoed secret; fixed messages",
                  run_on(sanitization_problem), aggregate=True),
            Check(f"{door}.bounds.output", doors, limit[1], run_on(size_problem(limit[0])), aggregate=True),
        ]  # fmt: skip
    return found
