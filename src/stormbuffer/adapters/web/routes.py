"""The review page's routes: pages read on worker threads, forms that change records through the core.

Only a signed-in person (or a holder of the token) gets past the HTTP app's credential check; the
sign-in page sets the session cookie. On a team server (`sbuf serve --team`) the form takes a team
token and opens a session bound to it (`auth.sessions`), sign-out ends it, and the page shows only
what the token's role and scopes allow. Each route asks `allow` for its operation first (approving
with the candidate's proposers, whom four eyes keep from approving it), and each page shows only the
actions `authorize` would let its caller run. Every page carries a Content-Security-Policy without
inline scripts; every form carries a CSRF token (the server's, on a team server one per session)
as its first field, checked before the rest of the body is parsed, and the body is read through the
API's size and time bounds (the HTTP app's Host and Origin checks apply as well). Record text is
untrusted: templates escape it, and Markdown renders inert.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from stormbuffer.auth import Principal, Refused, authorize, reads_human_records
from stormbuffer.auth.credential import same_token
from stormbuffer.auth.labels import ScopeNames
from stormbuffer.auth.tokens import TeamTokens
from stormbuffer.core.errors import Conflict, InvalidInput, MutationBusy, NotFound, StormbufferError
from stormbuffer.core.ids import parse_record_id
from stormbuffer.core.records import KINDS, STATUSES, Record
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import StorePaths, View, global_store
from stormbuffer.core.timestamps import Timestamp, later_of

from ..http import Credentials, bodies, store_context
from ..http.access import SIGN_IN, allow, guard_write
from ..http.audit import note
from ..http.errors import ApiError
from ..http.records import etag
from . import pages
from .render import markdown, side_by_side, to_second

HERE = Path(__file__).parent
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'; connect-src 'self'"
)
NOTICES = {  # fixed texts for the message after a form: nothing the request carries is echoed
    "approved": "Approved.",
    "rejected": "Rejected and archived.",
    "archived": "Archived.",
    "restored": "Restored.",
    "saved": "Saved.",
    "none": "Nothing was selected.",
}
MAX_FIELDS = 1000  # a bulk decision ticks at most this many candidates
SIGN_OUT = "/sign-out"
DECISIONS = {"approve": "approved", "reject": "rejected", "archive": "archived", "restore": "restored"}


@dataclass(frozen=True)
class Shown:
    """The store a page shows: the server's selected store, or the global store beside it."""

    name: str  # "selected" or "global"
    paths: StorePaths


class Review:
    """The page's state: its templates, the CSRF token of this server process, the script's hash."""

    def __init__(self) -> None:
        self.csrf = secrets.token_urlsafe(32)
        script = (HERE / "static" / "review.js").read_bytes()
        self.script_integrity = "sha384-" + base64.b64encode(hashlib.sha384(script).digest()).decode()
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True)
        )
        self.templates.filters["markdown"] = markdown
        self.templates.filters["second"] = to_second

    # ---- plumbing ---------------------------------------------------------------------------------

    def shown(self, request: Request) -> Shown:
        context = store_context(request)
        if _team(request) is None and request.query_params.get("store") == "global" and context.view is not View.GLOBAL:
            glob = global_store(context.session.dirs)
            if glob.is_initialized():
                return Shown("global", glob)
        return Shown("selected", context.selected)

    def page(self, request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        context = store_context(request)
        shown = values.pop("shown", None) or self.shown(request)
        team = _team(request) is not None
        caller: Principal | None = getattr(request.state, "principal", None)
        dirs = context.session.dirs
        has_global = not team and context.view is not View.GLOBAL and global_store(dirs).is_initialized()
        body = self.templates.get_template(template).render(
            csrf=self.csrf_of(request),
            script_integrity=self.script_integrity,
            shown=shown,
            store_query="?store=global" if shown.name == "global" else "",
            view=context.view.value,
            has_global=has_global,
            team=team,
            caller=caller,
            may=lambda operation, record=None: caller is not None and may(caller, operation, context.scope, record),
            scope_name=_scope_names(shown.paths),
            store_scope=context.scope if caller is not None and may(caller, "get", context.scope) else None,
            notice=NOTICES.get(request.query_params.get("done", "")),
            kinds=KINDS,
            statuses=STATUSES,
            **values,
        )
        response = HTMLResponse(body, status_code=status)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        return response

    def problem(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.page(request, "problem.html", status=status, message=message)

    def csrf_of(self, request: Request) -> str:
        """The CSRF token of the request's forms: the server's, on a team server one per session."""
        session = request.app.state.credentials.session_of(request.scope) if _team(request) else None
        if session is None:
            return self.csrf
        return hmac.new(self.csrf.encode("ascii"), session.encode("utf-8", "replace"), hashlib.sha256).hexdigest()

    async def form(self, request: Request) -> FormData | None:
        """The posted form, or None when its first field is not the request's CSRF token; the body is
        read through the API's bounds (413, 408) and parsed only once the token matched."""
        data = await bodies.read(request)
        first, _, rest = data.partition(b"&")
        if not hmac.compare_digest(first, b"csrf=" + self.csrf_of(request).encode("ascii")):
            return None
        return _parsed(rest)

    def allowed(self, request: Request, operation: str, record: Record | None = None) -> Principal | None:
        """The caller when it may run `operation` here (on `record`: approving asks with its
        proposers), else None (`refused` then answers as `authorize` said)."""
        try:
            return allow(request, operation, pages.proposers(record) if record is not None else ())
        except ApiError as exc:
            request.state.refusal = exc.status
            return None

    def sign_in_page(self, request: Request, status: int, message: str = "") -> HTMLResponse:
        body = self.templates.get_template("sign-in.html").render(message=message, team=_team(request) is not None)
        response = HTMLResponse(body, status_code=status)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["Referrer-Policy"] = "same-origin"  # "no-referrer" would make its form's Origin null
        return response

    def signed_in(self, request: Request, token: str) -> Response:
        """Into the inbox with the session cookie when `token` is the user's (on a team server, an
        active team token: the session is bound to it); the sign-in page otherwise. The cookie is
        HttpOnly, SameSite=Strict, and Secure when the page came over HTTPS."""
        credentials: Credentials = request.app.state.credentials
        request.state.operation = "sign-in"  # for a team server's audit entry
        if credentials.sessions is not None:
            opened = credentials.sessions.open(token)
            if opened is None:
                return self.sign_in_page(request, 401, "That is not an active team token of this server.")
            session, request.state.principal = opened
        elif same_token(token, credentials.token):
            session = credentials.session
        else:
            return self.sign_in_page(request, 401, "That is not the token of this server's user.")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(credentials.cookie_name(_port(request)), session, httponly=True, samesite="strict",
                            path="/", secure=request.url.scheme == "https")  # fmt: skip
        return response

    # ---- signing in -------------------------------------------------------------------------------

    async def sign_in_form(self, request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None and _team(request) is None:  # a team token is only taken from the form
            return self.signed_in(request, token)
        if request.state.principal is not None:  # signed in already
            return RedirectResponse("/", status_code=303)
        return self.sign_in_page(request, 401)

    async def sign_in(self, request: Request) -> Response:
        token = _parsed(await bodies.read(request)).get("token")
        return self.signed_in(request, token if isinstance(token, str) else "")

    async def sign_out(self, request: Request) -> Response:
        """End a team server's session (its token stays valid) and forget the cookie."""
        form = await self.form(request)
        if form is None:
            return self.problem(request, 403, "This form has expired; reload the page and try again.")
        credentials: Credentials = request.app.state.credentials
        request.state.operation = "sign-out"
        session = credentials.session_of(request.scope)
        if credentials.sessions is not None and session is not None:
            credentials.sessions.close(session)
        response = RedirectResponse(SIGN_IN, status_code=303)
        response.delete_cookie(credentials.cookie_name(_port(request)), path="/", httponly=True, samesite="strict",
                               secure=request.url.scheme == "https")  # fmt: skip
        return response

    @staticmethod
    def back(path: str, shown: Shown, done: str) -> RedirectResponse:
        query = {"done": done} | ({"store": "global"} if shown.name == "global" else {})
        return RedirectResponse(f"{path}?{urlencode(query)}", status_code=303)

    async def guarded(self, request: Request, work: Callable[[], Any], *, write: bool) -> Any:
        """Run core work on a worker thread; a core failure becomes the page's answer."""
        context = store_context(request)
        try:
            return await (context.write(work) if write else context.read(work))
        except NotFound:
            return self.problem(request, 404, "That memory was not found in this store.")
        except MutationBusy:
            return self.problem(request, 409, "The store stayed busy; try again in a moment.")
        except Conflict:
            return self.problem(request, 409, "The memory changed while you were working; reload it.")
        except StormbufferError as exc:  # core messages are sanitized: file names only, never a path
            return self.problem(request, 422, str(exc))

    # ---- pages ------------------------------------------------------------------------------------

    def refused(self, request: Request) -> HTMLResponse:
        """The answer to a request `allowed` refused: outside the caller's scopes, as for a memory
        that does not exist."""
        if getattr(request.state, "refusal", 403) == 404:
            return self.problem(request, 404, "That memory was not found in this store.")
        return self.problem(request, 403, "Your credential does not allow this.")

    async def inbox(self, request: Request) -> Response:
        caller = self.allowed(request, "get")
        if caller is None:
            return self.refused(request)
        shown = self.shown(request)
        items = await self.guarded(request, lambda: pages.inbox(shown.paths), write=False)
        if isinstance(items, Response):
            return items
        items = [item for item in items if _readable(caller, item.record)]
        proposer, scope = request.query_params.get("proposer", ""), request.query_params.get("scope", "")
        proposers = sorted({name for item in items for name in item.proposers})
        scopes = sorted({item.record.scope for item in items})
        shown_items = [item for item in items if (not proposer or proposer in item.proposers)
                       and (not scope or item.record.scope == scope)]  # fmt: skip
        note(request, (item.record.id for item in shown_items))
        return self.page(request, "inbox.html", shown=shown, items=shown_items, proposers=proposers, scopes=scopes,
                         proposer=proposer, scope=scope, waiting=len(items))  # fmt: skip

    async def decide(self, request: Request) -> Response:
        form = await self.form(request)
        if form is None:
            return self.problem(request, 403, "This form has expired; reload the page and try again.")
        shown = self.shown(request)
        one = str(form.get("one", ""))
        if one:
            action, _, chosen = one.partition(":")
            ids = [chosen]
        else:
            action, ids = str(form.get("action", "")), [str(value) for value in form.getlist("id")]
        if action in DECISIONS and self.allowed(request, action) is None:
            return self.refused(request)
        if action not in ("approve", "reject"):
            return self.problem(request, 422, "Choose approve or reject.")
        if not ids:
            return self.back("/", shown, "none")
        try:
            ids = [parse_record_id(value) for value in ids]
        except ValueError:
            return self.problem(request, 422, "A selected memory id is not valid.")
        note(request, ids)
        checked = await self.checked(request, shown, ids, action)
        if checked is not None:
            return checked

        def decide_all() -> list[str]:
            repository = Repository(shown.paths)
            decide = repository.approve if action == "approve" else repository.reject
            return [
                f"{result.record_id}: {result.message}" for result in map(decide, ids) if result.outcome != "accepted"
            ]

        refused = await self.guarded(request, decide_all, write=True)
        if isinstance(refused, Response):
            return refused
        if refused:
            return self.problem(request, 409, "Not approved: " + "; ".join(refused))
        return self.back("/", shown, DECISIONS[action])

    async def search(self, request: Request) -> Response:
        caller = self.allowed(request, "search")
        if caller is None:
            return self.refused(request)
        shown = self.shown(request)
        params = request.query_params
        try:
            limit = min(max(int(params.get("limit", "20")), 1), 100)
        except ValueError:
            limit = 20
        filters = pages.SearchFilters(
            query=params.get("q", "")[:2000],
            kind=params.get("kind", "") if params.get("kind", "") in KINDS else "",
            scope=params.get("scope", "")[:200],
            status=params.get("status", "") if params.get("status", "") in (*STATUSES, "any") else "",
            limit=limit,
        )
        session = store_context(request).session
        found = await self.guarded(request, lambda: pages.search(session, shown.paths, filters), write=False)
        if isinstance(found, Response):
            return found
        if not reads_human_records(caller):
            found.blocks[:] = [block for block in found.blocks if block.get("access") != "human"]
        note(request, (str(block["record_id"]) for block in found.blocks), (found.receipt or {}).get("receipt_id"))
        scopes = [store_context(request).scope] if shown.name == "selected" else []
        scopes += [] if _team(request) or store_context(request).view is View.LOCAL else ["global"]
        return self.page(request, "search.html", shown=shown, found=found, search_scopes=list(dict.fromkeys(scopes)))

    async def checked(self, request: Request, shown: Shown, ids: list[str], action: str) -> Response | None:
        """None when the caller may run `action` on every record of `ids`: each exists for it and, to
        approve a candidate (editing one approves it too), none is its own (four eyes); else the
        refusal, before anything changes."""
        caller = request.state.principal

        def records() -> list[Record]:
            repository = Repository(shown.paths)
            return [repository.find(record_id).record for record_id in ids]

        found = await self.guarded(request, records, write=False)
        if isinstance(found, Response):
            return found
        for record in found:
            if not _readable(caller, record):
                return self.problem(request, 404, "That memory was not found in this store.")
            approving = action == "approve" or (action == "edit" and record.status == "candidate")
            if approving and self.allowed(request, "approve", record) is None:
                return self.refused(request)
        return None

    async def record(self, request: Request) -> Response:
        caller = self.allowed(request, "get")
        if caller is None:
            return self.refused(request)
        shown = self.shown(request)
        record_id = self.record_id(request)
        if record_id is None:
            return self.problem(request, 404, "That is not a memory id.")
        found = await self.guarded(request, lambda: pages.record_page(shown.paths, record_id), write=False)
        if isinstance(found, Response):
            return found
        if not _readable(caller, found.record):
            return self.problem(request, 404, "That memory was not found in this store.")
        note(request, [record_id])
        events = await self.guarded(request, lambda: pages.history(shown.paths, record_id), write=False)
        if isinstance(events, Response):
            return events
        return self.page(request, "record.html", shown=shown, page=found, events=events)

    async def lifecycle(self, request: Request) -> Response:
        form = await self.form(request)
        if form is None:
            return self.problem(request, 403, "This form has expired; reload the page and try again.")
        shown, record_id, action = self.shown(request), self.record_id(request), str(form.get("action", ""))
        if record_id is None or action not in DECISIONS:
            return self.problem(request, 422, "Choose approve, reject, archive or restore.")
        if self.allowed(request, action) is None:
            return self.refused(request)
        note(request, [record_id])
        checked = await self.checked(request, shown, [record_id], action)
        if checked is not None:
            return checked

        def change() -> str | None:
            repository = Repository(shown.paths)
            if action in ("approve", "reject"):
                result = (repository.approve if action == "approve" else repository.reject)(record_id)
                return None if result.outcome == "accepted" else result.message
            (repository.archive if action == "archive" else repository.restore)(record_id)
            return None

        refused = await self.guarded(request, change, write=True)
        if isinstance(refused, Response):
            return refused
        if refused:
            return self.problem(request, 409, refused)
        return self.back(f"/records/{record_id}", shown, DECISIONS[action])

    async def edit_form(self, request: Request) -> Response:
        if self.allowed(request, "edit") is None:
            return self.refused(request)
        shown, record_id = self.shown(request), self.record_id(request)
        if record_id is None:
            return self.problem(request, 404, "That is not a memory id.")
        found = await self.guarded(request, lambda: pages.stored(shown.paths, record_id), write=False)
        if isinstance(found, Response):
            return found
        record = found.record
        checked = await self.checked(request, shown, [record_id], "edit")
        if checked is not None:
            return checked
        draft = {"title": record.title, "kind": record.kind, "body": record.body}
        return self.page(
            request, "edit.html", shown=shown, record_id=record_id, status_of=record.status,
            etag=etag(found.data), draft=draft,
        )  # fmt: skip

    async def edit(self, request: Request) -> Response:
        form = await self.form(request)
        if form is None:
            return self.problem(request, 403, "This form has expired; reload the page and try again.")
        caller = self.allowed(request, "edit")
        if caller is None:
            return self.refused(request)
        shown, record_id = self.shown(request), self.record_id(request)
        if record_id is None:
            return self.problem(request, 404, "That is not a memory id.")
        note(request, [record_id])
        checked = await self.checked(request, shown, [record_id], "edit")
        if checked is not None:
            return checked
        draft = {name: str(form.get(name, "")).replace("\r\n", "\n") for name in ("title", "kind", "body")}
        started_from, status_of = str(form.get("etag", "")), str(form.get("status_of", ""))

        def save() -> Response | None:
            repository = Repository(shown.paths)
            current = repository.find(record_id)
            if etag(current.data) != started_from:
                return self.conflict(request, shown, current, draft)
            if draft["kind"] not in KINDS:
                raise InvalidInput("choose a kind: fact, decision, procedure or checkpoint")
            if current.record.status == "candidate":  # approve it, then write the person's version over it
                result = repository.approve(record_id)
                if result.outcome != "accepted":
                    raise InvalidInput(result.message)
                current = repository.find(record_id)
            edited = current.record.replace(
                title=draft["title"],
                kind=draft["kind"],
                body=draft["body"],
                updated_at=later_of(Timestamp.now(), current.record.created_at),
            )
            guard_write(caller, edited)  # a person's edit passes; a token holder's is checked
            repository.replace_if_unchanged(current, edited)
            return None

        def keep_draft(status: int, error: str) -> Response:  # what the person typed is never thrown away
            return self.page(
                request, "edit.html", status=status, shown=shown, record_id=record_id, status_of=status_of,
                etag=started_from, draft=draft, error=error,
            )  # fmt: skip

        try:
            answer = await store_context(request).write(save)
        except NotFound:
            return self.problem(request, 404, "That memory was not found in this store.")
        except MutationBusy:
            return keep_draft(409, "The store stayed busy; your text is kept here, save again in a moment.")
        except Conflict:
            return keep_draft(409, "The memory changed while you were saving; reload it to compare.")
        except StormbufferError as exc:
            return keep_draft(422, str(exc))
        except ApiError as exc:
            return keep_draft(exc.status, exc.message)
        return answer or self.back(f"/records/{record_id}", shown, "saved")

    def conflict(self, request: Request, shown: Shown, current: Any, draft: dict[str, str]) -> Response:
        """Both versions side by side: keep the stored one, or save the person's over it."""
        theirs = current.record
        return self.page(
            request,
            "conflict.html",
            status=409,
            shown=shown,
            record=theirs,
            etag=etag(current.data),
            draft=draft,
            diff=side_by_side(
                f"# {theirs.title}\nkind: {theirs.kind}\n\n{theirs.body}",
                f"# {draft['title']}\nkind: {draft['kind']}\n\n{draft['body']}",
            ),
        )

    async def health(self, request: Request) -> Response:
        caller = self.allowed(request, "get")
        if caller is None:
            return self.refused(request)
        if not reads_human_records(caller):  # its findings name records of every access class
            return self.problem(request, 403, "The store's health is for reviewers.")
        shown = self.shown(request)
        context = store_context(request)
        prefix = "sbuf --global" if shown.name == "global" else f"sbuf --{context.view.value}"
        found = await self.guarded(request, lambda: pages.health(shown.paths, prefix), write=False)
        if isinstance(found, Response):
            return found
        return self.page(request, "health.html", shown=shown, health=found)

    @staticmethod
    def record_id(request: Request) -> str | None:
        try:
            return parse_record_id(str(request.path_params["record_id"]))
        except ValueError:
            return None


def _team(request: Request) -> TeamTokens | None:
    """The team tokens of a team server; None on the loopback server of one user."""
    credentials: Credentials = request.app.state.credentials
    return credentials.team


def _port(request: Request) -> int | None:
    return request.scope["server"][1] if request.scope.get("server") else None


def _readable(caller: Principal, record: Record) -> bool:
    """Whether `record` exists for `caller`: records meant for people only for those who review."""
    return record.access != "human" or reads_human_records(caller)


def may(caller: Principal, operation: str, scope: str, record: Record | None = None) -> bool:
    """Whether the page offers `caller` the action `operation` on the store of `scope` (on `record`:
    a candidate's own proposers are not offered to approve it, nor to edit it, which approves it)."""
    approving = operation == "approve" or (operation == "edit" and record is not None and record.status == "candidate")
    try:
        authorize(caller, operation, scope)
        if approving:
            authorize(caller, "approve", scope, pages.proposers(record) if record is not None else ())
    except Refused:
        return False
    return True


def _scope_names(paths: StorePaths) -> Callable[[str], str]:
    try:
        return ScopeNames(paths)
    except StormbufferError:  # an unreadable store.toml: the page says so elsewhere
        return lambda scope: scope


def _parsed(data: bytes) -> FormData:
    """An `application/x-www-form-urlencoded` body, already bounded by `bodies.read`."""
    try:
        text = data.decode("utf-8")
        pairs: list[tuple[str, str | UploadFile]] = [
            *parse_qsl(text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FIELDS)
        ]
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, "invalid_form", "the form is not valid") from None
    return FormData(pairs)


def routes() -> list[BaseRoute]:
    """The review page's routes, to mount at the root of the local HTTP app."""
    review = Review()
    return [
        Route(SIGN_IN, review.sign_in_form, methods=["GET"]),
        Route(SIGN_IN, review.sign_in, methods=["POST"]),
        Route(SIGN_OUT, review.sign_out, methods=["POST"]),
        Route("/", review.inbox, methods=["GET"]),
        Route("/review/decide", review.decide, methods=["POST"]),
        Route("/search", review.search, methods=["GET"]),
        Route("/health", review.health, methods=["GET"]),
        Route("/records/{record_id}", review.record, methods=["GET"]),
        Route("/records/{record_id}/lifecycle", review.lifecycle, methods=["POST"]),
        Route("/records/{record_id}/edit", review.edit_form, methods=["GET"]),
        Route("/records/{record_id}/edit", review.edit, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
