"""Human commands for the selected store: create and inspect it, and move records through their lifecycle."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import Any

import click

from ..core import usage
from ..core.ids import new_record_id, parse_record_id
from ..core.records import KIND_REASON, KINDS, STATUSES, Record, Source, normalize
from ..core.repository import Repository, must_be
from ..core.stores import StorePaths, initialize_store, read_config
from ..core.timestamps import Timestamp, later_of
from . import warm
from .context import current, fail
from .editor import edit_text, review_draft
from .failures import fail_on_invalid_records, failing, warn_degraded
from .main import command
from .team_database import database_line
from .text import one_line

HUMAN_SOURCE = Source("conversation", "stormbuffer:cli", "human")
PROPOSE_SOURCE = Source("conversation", "stormbuffer:cli/propose", "agent")
DEFAULT_TITLE = "Untitled memory"
DEFAULT_BODY = "Write the memory here."
NO_RECORDS = "No memories in this store"
NO_ACTIVE_RECORDS = "No active memories in this store (--all includes candidates, superseded and archived ones)"
NO_EDITOR_DRAFT = "Without $VISUAL or $EDITOR, a draft given --body is stored as it is."
NO_EDITOR_REPLACEMENT = "Without $VISUAL or $EDITOR, a replacement given --title, --kind or --body is stored as it is."

# ---- shared helpers --------------------------------------------------------------------------


def selected_store() -> StorePaths:
    with failing("could not resolve store"):
        return current().store()


def selected_repository() -> Repository:
    """The selected store's repository; a write waits for a busy store as `--lock-wait` or the environment say."""
    with failing("could not resolve store"):
        return current().repository()


ID_PART = re.compile(r"[0-9a-f-]+")
MIN_ID_PART = 4  # hex digits
FULL_ID_DIGITS = 32
SHOWN_MATCHES = 5


def record_id_argument(text: str) -> str:
    """The id a person typed: a whole id, or a unique prefix or suffix of one in the selected store.

    Ids made in the same minute share their first 8 hex digits, so the end of an id is often the part
    that tells two apart.
    """
    try:
        return parse_record_id(text)
    except ValueError as exc:
        reason = str(exc)
    part = text.lower()
    digits = len(part.replace("-", ""))
    if not ID_PART.fullmatch(part) or not MIN_ID_PART <= digits < FULL_ID_DIGITS:
        fail(f"invalid ID `{one_line(text)}`: {reason} (or a unique prefix or suffix of a memory's id, "
             f"at least {MIN_ID_PART} hex digits)")  # fmt: skip
    with failing(f"could not look up ID `{part}`"):
        ids = sorted(record.id for record in selected_repository().listing()[0])
    matches = [record_id for record_id in ids if record_id.startswith(part) or record_id.endswith(part)]
    if not matches:
        fail(f"ID `{part}`: no memory's id starts or ends with it")
    if len(matches) > 1:
        shown = ", ".join(matches[:SHOWN_MATCHES]) + (", ..." if len(matches) > SHOWN_MATCHES else "")
        fail(f"ID `{part}` matches {len(matches)} memories ({shown}); type more of it")
    return matches[0]


def _repository(context: str) -> Repository:
    """The selected store's repository; fails with `<context>: store is not initialized` first."""
    repository = selected_repository()
    with failing(context):
        _ = repository.scope
    return repository


def _checked_kind(kind: str, message: str) -> str:
    if kind not in KINDS:
        fail(f"{message}: {KIND_REASON}")
    return kind


def _new_draft(
    scope: str, title: str | None, kind: str | None, body: str | None, status: str, access: str, source: Source
) -> Record:
    now = Timestamp.now()
    return Record(
        id=new_record_id(),
        title=DEFAULT_TITLE if title is None else title,
        kind="fact" if kind is None else _checked_kind(kind, "invalid memory kind"),
        scope=scope,
        status=status,
        access=access,
        created_at=now,
        updated_at=now,
        sources=(source,),
        body=DEFAULT_BODY if body is None else body,
    )


def _draft_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """`--title`, `--kind` and `--body`: the starting point of a draft."""
    function = click.option("--body", help="Initial body, editable in the editor.")(function)
    function = click.option("--kind", help="Initial kind: fact, decision, procedure, or checkpoint.")(function)
    return click.option("--title", help="Initial title, editable in the editor.")(function)


# ---- store ------------------------------------------------------------------------------------


@command("init", help="Initialize a global or project store without changing existing metadata.")
@click.option(
    "--shared",
    is_flag=True,
    help="Make a project store shareable by tracking its configuration and canonical Markdown.",
)
@click.option(
    "--engine",
    type=click.Choice(["directory", "postgresql"]),
    help="Where a new store keeps its records: files under records/ (default), or PostgreSQL: the "
    "database in STORMBUFFER_DATABASE_URL, else the embedded server (`sbuf team db`).",
)
def init(shared: bool, engine: str | None) -> None:
    cli = current()
    paths = selected_store()
    with failing("could not initialize store"):
        created = initialize_store(paths, shared=shared, engine=engine)
    out = cli.out()
    action = out.success("Initialized" if created else "Already initialized")
    suffix = " (shared)" if shared else ""
    click.echo(f"{action} {cli.view.value} store at {out.path(str(paths.root))}{suffix}")
    if (line := database_line(paths)) is not None:
        click.echo(line)
    _prepare_retrieval(paths)
    click.echo(out.field("Embedding model", "ready"))


def _prepare_retrieval(paths: StorePaths) -> None:
    """Acquire the embedding model, then sync the search index with it, so that hybrid retrieval works
    offline from the first query. Without the model the index is still built (lexical) before failing."""
    from ..embedding import EmbedderInitError, ModelUnavailable, acquire_model, load_embedder
    from ..index.sync import sync_store
    from .index import sync_progress

    embedder, problem = None, None
    try:
        acquire_model(paths.cache_dir)
        embedder = load_embedder(paths.cache_dir)
    except (ModelUnavailable, EmbedderInitError) as exc:
        problem = str(exc)
    with sync_progress() as progress, failing("could not initialize the search index"):
        report = sync_store(paths, embedder=embedder, progress=progress)
    fail_on_invalid_records(report.invalid_files)
    if problem is not None:
        fail(f"store initialized, but the verified local embedding model is unavailable: {problem}")


@command("root", help="Print the resolved store root, whether or not it is initialized.")
def root() -> None:
    click.echo(str(selected_store().root))


@command("status", help="Inspect the resolved store and report its initialization state.")
@click.option("--json", "as_json", is_flag=True, help="Emit one JSON object instead of human-readable lines.")
def status(as_json: bool) -> None:
    cli = current()
    cli.machine_mode = as_json
    paths = selected_store()
    with failing("could not inspect store"):
        report = _inspect(paths)
    if as_json:
        click.echo(json.dumps(report, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
        return
    out = cli.out()
    lines = [
        ("View", report["view"]),
        ("Scope", report["scope"]),
        ("Root", out.path(report["root"])),
        ("State", out.success("initialized") if report["initialized"] else out.warning("not initialized")),
    ]
    if report["initialized"]:
        lines.append(("Visibility", report["visibility"]))
    if report["project_id"] is not None:
        lines += [("Project ID", report["project_id"]), ("Project name", one_line(report["project_name"]))]
    lifecycle, disk = report["lifecycle"], report["disk_usage"]
    lines += [
        ("Records", str(report["record_count"])),
        ("Candidates", str(lifecycle["candidate"])),
        ("Active", str(lifecycle["active"])),
        ("Superseded", str(lifecycle["superseded"])),
        ("Archived", str(lifecycle["archived"])),
        ("Canonical disk", f"{disk['canonical_bytes']} bytes"),
        ("Disposable disk", f"{disk['disposable_bytes']} bytes"),
        (
            "Reclaimable disk",
            f"{disk['reclaimable_bytes']} bytes" + (" (`sbuf gc` gives it back)" if disk["reclaimable_bytes"] else ""),
        ),
        ("Index version", "unavailable" if report["index_version"] is None else str(report["index_version"])),
        ("Embedding version", report["embedding_version"] or "unavailable"),
    ]
    if "engine" in report:  # a PostgreSQL store: its projection moves with every write
        projection = report["projection"]
        where = report["database_url_env"] or "the embedded PostgreSQL"
        lines += [
            ("Engine", f"{report['engine']} (database named by {where})"),
            (
                "Projection",
                f"{projection['records']} records, {projection['chunks']} chunks, {projection['vectors']} vectors",
            ),  # fmt: skip
        ]
    else:
        lines.append(("Last sync", _to_the_second(report["last_successful_sync"]) or "never"))
    lines += [
        (
            "Vectors",
            f"{report['vectors_pending']} texts waiting to be embedded (the daemon, `sbuf sync` or "
            "`sbuf watch` embeds them)"
            if report["vectors_pending"]
            else "complete",
        ),
    ]
    for name, value in lines:
        click.echo(out.field(name, value))
    for name in report.get("invalid_files", []):
        shown = f"{one_line(name)} (left out; repair it, then run `sbuf {cli.scope_flag} sync`)"
        click.echo(out.field("Invalid file", out.warning(shown)))


def _to_the_second(stamp: str | None) -> str | None:
    """An RFC 3339 time without its fraction of a second, for people."""
    return None if stamp is None else re.sub(r"\.\d+(?=Z|[+-]\d\d:\d\d$)", "", stamp)


def _inspect(paths: StorePaths) -> dict[str, Any]:
    """The status report in its JSON form."""
    cli = current()
    config = read_config(paths) if paths.is_initialized() else None
    lifecycle = dict.fromkeys(STATUSES, 0)
    invalid: list[tuple[str, str]] = []
    if config is not None:
        records, invalid = Repository(paths).listing()
        for record in records:
            lifecycle[record.status] += 1
    from ..index.gc import reclaimable_bytes
    from ..index.projection import describe

    index = describe(paths)
    report = {
        "disk_usage": {
            "canonical_bytes": usage.canonical_bytes(paths),
            "disposable_bytes": usage.disposable_bytes(paths),
            "reclaimable_bytes": reclaimable_bytes(paths) if config is not None else 0,
        },
        "embedding_version": index["embedding_version"],
        "index_version": index["index_version"],
        "initialized": config is not None,
        "last_successful_sync": index["last_sync"],
        "lifecycle": lifecycle,
        "project_id": config.project_id if config else None,
        "project_name": config.project_name if config else None,
        "record_count": sum(lifecycle.values()),
        "root": str(paths.root),
        "scope": cli.view.value,
        "vectors_pending": index["vectors_pending"],
        "view": cli.view.description,
        "visibility": config.visibility if config else None,
    }
    if invalid:  # only a degraded store has the key
        report["invalid_files"] = [name for name, _reason in invalid]
    if config is not None and config.database is not None:
        report.update(_in_database(config.database, config.record_scope, report["disk_usage"]))
    return report


def _in_database(database: str, scope: str, disk: dict[str, int]) -> dict[str, Any]:
    """What `status` reports of a PostgreSQL store beside the directory's files: the engine, the name of the
    variable that holds the URL (None for the embedded server), the projection's rows and the records' bytes."""
    from ..core.stores import EMBEDDED
    from ..engines.postgresql.upkeep import counts
    from ..index.projection import PROTOCOL_INDEX_VERSION

    found = counts(database, scope)
    model = json.loads(found.vector_model) if found.vector_model else None
    disk["canonical_bytes"] += found.record_bytes
    return {
        "engine": "postgresql",
        "database_url_env": None if database == EMBEDDED else database,
        "projection": found.to_json(),
        "index_version": PROTOCOL_INDEX_VERSION,
        "embedding_version": model["model_version"] if model else None,
        "last_successful_sync": None,
        "vectors_pending": found.waiting,
    }


# ---- writing records ----------------------------------------------------------------------------


ACCESS_AUDIENCE = {
    "human": "people only: coding agents cannot recall it (add it with --access agent to share it)",
    "agent": "people and coding agents (MCP recall, `sbuf invoke`)",
}


@command(
    "add",
    help="Add a human-authored memory. By default only people see it (access human); "
    "--access agent lets coding agents recall it too. Prints the new id; stderr says who can see it.",
    epilog=NO_EDITOR_DRAFT,
)
@_draft_options
@click.option(
    "--access",
    type=click.Choice(["human", "agent"]),
    default="human",
    show_default=True,
    help="Who can read the memory: human (people only) or agent (people and coding agents).",
)
def add(title: str | None, kind: str | None, body: str | None, access: str) -> None:
    repository = _repository("could not add record")
    draft = _new_draft(repository.scope, title, kind, body, "active", access, HUMAN_SOURCE)
    with failing("could not add record"):
        record = review_draft(draft, current().env, lambda made: warm.add(repository, made), complete=body is not None)
    click.echo(record.id)
    click.echo(f"Visible to {ACCESS_AUDIENCE[record.access]}", err=True)
    twin = _active_twin(repository.paths, record)
    if twin is not None:
        _warn_overlap(record.id, twin, "is identical to")


def _active_twin(paths: StorePaths, record: Record) -> str | None:
    """The id of another active memory with the same scope, kind, title and body (whitespace and ASCII
    case aside), found through the projection the write just updated; None when it cannot be read."""
    import sqlite3

    from ..core.codec import parse_markdown
    from ..core.errors import StormbufferError
    from ..index import projection

    title, body = normalize(record.title), None  # the body is normalized only when a title matches
    try:
        index = projection.existing_index_path(paths)
        if index is None:
            return None
        with projection.reading(index) as conn:
            rows = conn.execute(
                "SELECT id, path FROM records WHERE title_key = ? AND kind = ? AND scope = ? AND status = 'active' "
                "AND id != ? ORDER BY id", (title, record.kind, record.scope, record.id),
            ).fetchall()  # fmt: skip
        for other_id, path in rows:
            body = normalize(record.body) if body is None else body
            if normalize(parse_markdown((paths.root / path).read_bytes()).body) == body:
                return str(other_id)
    except (StormbufferError, OSError, sqlite3.Error):  # only a warning is lost
        return None
    return None


def _warn_overlap(record_id: str, other_id: str, relation: str) -> None:
    """Two active memories where one may do: say so, and how to keep only one."""
    flag = current().scope_flag
    click.echo(f"warning: {record_id} {relation} active memory {other_id}; both are now active. To keep one, "
               f"replace the other: `sbuf {flag} supersede {other_id}` (or `sbuf {flag} archive {record_id}`)",
               err=True)  # fmt: skip


@command("propose", help="Propose an agent memory candidate for review.", epilog=NO_EDITOR_DRAFT)
@_draft_options
def propose(title: str | None, kind: str | None, body: str | None) -> None:
    repository = _repository("could not propose record")
    draft = _new_draft(repository.scope, title, kind, body, "candidate", "agent", PROPOSE_SOURCE)
    with failing("could not propose record"):
        result = review_draft(
            draft, current().env, lambda record: repository.propose(record, "agent"), complete=body is not None
        )
    click.echo(f"{result.record_id}\t{result.outcome}")
    if result.outcome == "invalid":
        fail(result.message)


@command("approve", help="Approve a candidate memory.")
@click.argument("record_id", metavar="ID")
def approve(record_id: str) -> None:
    _decide(record_id, approve=True)


@command("reject", help="Reject a candidate memory by archiving it.")
@click.argument("record_id", metavar="ID")
def reject(record_id: str) -> None:
    _decide(record_id, approve=False)


def _decide(text: str, *, approve: bool) -> None:
    """Prints `<id>\t<outcome>\t<status>`; a rejection's outcome reads `rejected`. Approving a candidate
    that may overlap an active memory warns, naming it."""
    record_id = record_id_argument(text)
    repository = selected_repository()
    overlap = None
    with failing("could not update candidate"):
        if approve:
            overlap = _overlap_of(repository, record_id)
            result = repository.approve(record_id)
        else:
            result = repository.reject(record_id)
    outcome = "rejected" if not approve and result.outcome == "accepted" else result.outcome
    click.echo(f"{result.record_id}\t{outcome}\t{result.status or ''}")
    if overlap is not None and result.status == "active":
        _warn_overlap(record_id, overlap, "may overlap")


def _overlap_of(repository: Repository, record_id: str) -> str | None:
    """The active memory a candidate may overlap (same scope, kind and title), as `inbox` shows it."""
    from ..core import review

    stored, _invalid = repository.review_records()
    for candidate in review.candidates(stored, Timestamp.now()):
        if candidate.stored.record.id == record_id and candidate.overlap_id is not None:
            status = next(item.record.status for item in stored if item.record.id == candidate.overlap_id)
            return candidate.overlap_id if status == "active" else None
    return None


@command("edit", help="Edit a memory.")
@click.argument("record_id", metavar="ID")
def edit(record_id: str) -> None:
    record_id = record_id_argument(record_id)
    repository = selected_repository()
    with failing("could not find record"):
        stored = repository.find(record_id)
    with failing("could not save edited record"):
        must_be(stored.record, "active")

        def save(edited: Record) -> Record | None:
            if edited == stored.record:  # nothing changed: nothing is written, `updated_at` stays
                return None
            edited = edited.replace(updated_at=later_of(Timestamp.now(), edited.created_at))
            return repository.replace_if_unchanged(stored, edited)

        saved = edit_text(stored.data, current().env, save)
    click.echo(record_id)
    if saved is None:
        click.echo("No changes: nothing was written", err=True)


@command("supersede", help="Supersede a memory with a new active record.", epilog=NO_EDITOR_REPLACEMENT)
@click.argument("record_id", metavar="ID")
@_draft_options
def supersede(record_id: str, title: str | None, kind: str | None, body: str | None) -> None:
    old_id = record_id_argument(record_id)
    repository = selected_repository()
    with failing("could not find record to supersede"):
        old = repository.find(old_id).record
    now = Timestamp.now()
    draft = old.replace(
        id=new_record_id(),
        title=old.title if title is None else title,
        kind=old.kind if kind is None else _checked_kind(kind, "invalid replacement kind"),
        status="active",
        created_at=now,
        updated_at=now,
        supersedes=(old_id,),
        body=old.body if body is None else body,
    )
    given = any(value is not None for value in (title, kind, body))
    with failing("could not supersede record"):
        replacement = review_draft(
            draft, current().env, lambda record: repository.supersede(old_id, record), complete=given
        )
    click.echo(replacement.id)


@command("archive", help="Archive a memory.")
@click.argument("record_id", metavar="ID")
def archive(record_id: str) -> None:
    _change_lifecycle(record_id, restore=False)


@command("restore", help="Restore an archived memory.")
@click.argument("record_id", metavar="ID")
def restore(record_id: str) -> None:
    _change_lifecycle(record_id, restore=True)


def _change_lifecycle(text: str, *, restore: bool) -> None:
    record_id = record_id_argument(text)
    repository = selected_repository()
    with failing("could not change record lifecycle"):
        record = repository.restore(record_id) if restore else repository.archive(record_id)
    click.echo(f"{record.id}\t{record.status}")


@command("forget", help="Permanently delete a memory only with explicit --destroy.")
@click.argument("record_id", metavar="ID")
@click.option("--destroy", is_flag=True, help="Acknowledge that the memory is deleted permanently.")
@click.option("--yes", is_flag=True, help="Skip the confirmation prompt (requires --destroy).")
def forget(record_id: str, destroy: bool, yes: bool) -> None:
    if yes and not destroy:
        raise click.UsageError("the argument '--yes' requires '--destroy'")
    if not destroy:
        fail("forget requires --destroy for permanent deletion (and --yes when not run at a terminal)")
    record_id = record_id_argument(record_id)
    repository = selected_repository()
    with failing("could not permanently delete record"):
        stored = repository.find(record_id)
    if not yes:
        _confirm_deletion(stored.record)
    with failing("could not permanently delete record"):
        repository.forget(record_id, stored)
    click.echo(f"Forgot {record_id}")


def _confirm_deletion(record: Record) -> None:
    if not all(stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr)):
        fail("noninteractive deletion requires --yes")
    click.echo(f"Permanently delete {one_line(record.title)} ({record.id})? [y/N] ", err=True, nl=False)
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        fail("deletion cancelled")


# ---- reading records ------------------------------------------------------------------------------


@command("show", help="Show one memory.")
@click.argument("record_id", metavar="ID")
def show(record_id: str) -> None:
    record_id = record_id_argument(record_id)
    repository = selected_repository()
    with failing("could not read record"):
        data = repository.find(record_id).data
    sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
    sys.stdout.buffer.flush()


@command("list", help="List memories.")
@click.option("--all", "include_all", is_flag=True, help="Include inactive records.")
@click.option("--json", "as_json", is_flag=True,
              help="Emit a JSON array of {id, title, kind, scope, status} instead of tab-separated lines.")  # fmt: skip
def list_records(include_all: bool, as_json: bool) -> None:
    current().machine_mode = as_json
    repository = selected_repository()
    with failing("could not list records"):
        summaries, invalid = warm.listing(repository)
    warn_degraded(invalid)
    records = [record for record in summaries if include_all or record.status == "active"]
    if as_json:
        click.echo(json.dumps([record._asdict() for record in records], ensure_ascii=False))
        return
    if records:  # one write: a line at a time costs more than reading the projection
        click.echo("\n".join(f"{r.id}\t{r.status}\t{r.kind}\t{r.scope}\t{one_line(r.title)}" for r in records))
    if not records:
        click.echo(NO_RECORDS if include_all else NO_ACTIVE_RECORDS, err=True)
