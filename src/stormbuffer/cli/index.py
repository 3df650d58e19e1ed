"""Index and retrieval commands: sync, watch, reindex, doctor, gc, search and context.

Retrieval loads the local embedding model when it is ready and otherwise falls back to lexical
matching (the context receipt says why); it never downloads anything. `reindex` without a usable
model still rebuilds the lexical index: it prints a warning and exits 0.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from ..core.stores import EMBEDDED, StorePaths, retrieval_stores
from .context import current, fail
from .failures import fail_on_invalid_records, failing, warn_degraded
from .main import command
from .output import json_or_text, prints_json
from .records import selected_store
from .scopes import scope_label, scope_names
from .text import one_line

if TYPE_CHECKING:
    from ..index.sync import Embedder, Progress, SyncReport
    from ..retrieval import SearchHit

MIN_WATCH_INTERVAL_MS = 50
PROGRESS_THRESHOLD = 50  # files or texts below which no progress bar is drawn
LINE_EVERY_S = 2.0  # off a terminal, a long sync prints where it is on stderr this often
# A hit found by its vector alone is shown to people only this close to the query (Euclidean distance
# of unit vectors, `sqrt(2 - 2 cos)`: 1.25 is a cosine of about 0.22). Unrelated text lies farther.
VECTOR_ONLY_MAX_DISTANCE = 1.25


def _initialized_store(context: str) -> StorePaths:
    from ..core.stores import record_scope

    paths = selected_store()
    with failing(context):
        record_scope(paths)
    return paths


def _embedder(paths: StorePaths) -> tuple[Embedder | None, str | None]:
    from ..embedding import open_embedder

    return open_embedder(paths.cache_dir)


def _print_counts(report: SyncReport) -> None:
    for name, value in (("Indexed", report.indexed), ("Skipped", report.skipped), ("Removed", report.removed),
                        ("Invalid", len(report.invalid_files)), ("Embedded", report.embedded)):  # fmt: skip
        click.echo(current().out().field(name, str(value)))


# ---- sync, watch, reindex ---------------------------------------------------------------------


@command("sync", help="Reconcile canonical Markdown with the disposable index.")
def sync() -> None:
    from ..index.sync import sync_store

    paths = _initialized_store("could not sync the index")
    embedder, _reason = _embedder(paths)
    with sync_progress() as progress, failing("could not sync the index"):
        report = sync_store(paths, embedder, progress=progress)
    _print_counts(report)
    if report.vector_failure is not None:
        click.echo("warning: the embedding model failed; semantic vectors were not refreshed", err=True)
    fail_on_invalid_records(report.invalid_files)


@command("watch", help="Watch for canonical Markdown changes.")
@click.option("--once", is_flag=True, help="Run one reconciliation cycle and exit.")
@click.option("--interval-ms", type=int, default=500, show_default=True, help="Delay between cycles (at least 50).")
def watch(once: bool, interval_ms: int) -> None:
    """Without --once, syncs until interrupted. Ctrl-C ends it quietly (exit 0): at once between cycles, after
    the running sync during one (a second Ctrl-C stops that sync too; the next sync does the rest)."""
    from ..core.errors import IndexBusy
    from ..index.backlog import STEP
    from ..index.sync import sync_store

    paths = _initialized_store("could not watch the store")
    embedder, _reason = _embedder(paths)
    interval = max(interval_ms, MIN_WATCH_INTERVAL_MS) / 1000
    if once:
        with failing("could not sync the index"):
            report = sync_store(paths, embedder)
        click.echo(current().out().field("Watch cycles", "1"))
        fail_on_invalid_records(report.invalid_files)
        return
    reported: list[tuple[str, str]] = []
    said = 0.0
    with _interrupted_between_cycles() as state:
        while not state.stopping:
            cycle: SyncReport | None
            state.syncing = True
            try:
                with failing("could not sync the index"):
                    try:  # a backlog is embedded a step per cycle, so that record changes are seen meanwhile
                        cycle = sync_store(paths, embedder, embed_limit=STEP)
                    except IndexBusy:  # another process is syncing this store: try again next cycle
                        cycle = None
            finally:
                state.syncing = False
            if cycle is not None and cycle.pending and time.monotonic() - said >= LINE_EVERY_S:
                said = time.monotonic()
                click.echo(f"Embedding: {cycle.pending} texts left", err=True)
            if cycle is not None and cycle.invalid_files != reported:
                for name, reason in cycle.invalid_files:
                    click.echo(f"warning: invalid canonical record {name}: {reason}", err=True)
                reported = cycle.invalid_files
            if not state.stopping and not (cycle is not None and cycle.pending):
                time.sleep(interval)


class _WatchState:
    syncing = False
    stopping = False


@contextmanager
def _interrupted_between_cycles() -> Iterator[_WatchState]:
    """SIGINT raises KeyboardInterrupt only outside a sync; during one it asks the loop to stop after it.
    The interrupt that ends watching is swallowed here."""
    import signal

    state = _WatchState()

    def on_interrupt(_signum: int, _frame: object) -> None:
        if not state.syncing or state.stopping:
            raise KeyboardInterrupt
        state.stopping = True

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield state
    except KeyboardInterrupt:  # Ctrl-C is how watching ends
        pass
    finally:
        signal.signal(signal.SIGINT, previous)


@command("reindex", help="Rebuild the disposable index.")
def reindex() -> None:
    from ..index.sync import reindex_store

    paths = _initialized_store("could not rebuild the index")
    embedder, reason = _embedder(paths)
    with sync_progress() as progress, failing("could not rebuild the index"):
        report = reindex_store(paths, embedder, progress=progress)
    out = current().out()
    click.echo(out.field("Reindexed", str(report.indexed)))
    if embedder is not None and report.vector_failure is None:
        click.echo(out.field("Semantic index", f"rebuilt ({embedder.model_version})"))
    else:
        why = "the embedding model failed" if embedder is not None else f"the local model is not ready ({reason})"
        click.echo(f"warning: semantic index unavailable: {why}; the lexical index was rebuilt; "
                   "run `sbuf init`, then `sbuf reindex`", err=True)  # fmt: skip
    fail_on_invalid_records(report.invalid_files)


@contextmanager
def sync_progress() -> Iterator[Progress | None]:
    """Progress bars on a terminal's stderr with records, chunks and embeddings per second; elsewhere a
    line on stderr at most every `LINE_EVERY_S` seconds while the work goes on."""
    if not sys.stderr.isatty():
        with _progress_lines() as update:
            yield update
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    started = time.monotonic()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as bars:
        tasks: dict[str, TaskID] = {}

        def update(phase: str, done: int, total: int, report: SyncReport) -> None:
            if total < PROGRESS_THRESHOLD:
                return
            elapsed = max(time.monotonic() - started, 1e-6)
            rate = {
                "scanning": f"{done / elapsed:,.0f} files/s",
                "indexing": f"{report.indexed / elapsed:,.0f} records/s, {report.chunks / elapsed:,.0f} chunks/s",
                "embedding": f"{report.embedded / elapsed:,.0f} embeddings/s",
            }[phase]
            if phase not in tasks:
                tasks[phase] = bars.add_task(phase.capitalize(), total=total, rate="")
            bars.update(tasks[phase], completed=done, total=total, rate=rate)

        yield update


@contextmanager
def _progress_lines() -> Iterator[Progress]:
    """`Progress` for a pipe or a log: every `LINE_EVERY_S` seconds while the work runs, once a phase
    has started, a line on stderr with its latest count (a quick sync prints nothing)."""
    import threading

    started = time.monotonic()
    latest: list[str] = []
    done = threading.Event()

    def update(phase: str, count: int, total: int, _report: SyncReport) -> None:
        latest[:] = [f"{phase.capitalize()}: {count}/{total}"]

    def tick() -> None:
        while not done.wait(LINE_EVERY_S):
            if latest:
                click.echo(f"{latest[0]} ({time.monotonic() - started:.0f} s)", err=True)

    ticker = threading.Thread(target=tick, name="stormbuffer-progress-lines", daemon=True)
    ticker.start()
    try:
        yield update
    finally:
        done.set()
        ticker.join()


# ---- doctor, gc ---------------------------------------------------------------------------------


@command("doctor", help="Diagnose canonical data and projections.")
@click.option("--repair", is_flag=True, help="Repair only disposable state with one unambiguous recovery path.")
def doctor(repair: bool) -> None:
    from ..index.doctor import doctor_store, repair_store

    paths = selected_store()
    out = current().out()
    repaired: list[str] = []
    with failing("could not diagnose the store"):
        if repair:
            result = repair_store(paths)
            diagnosis, repaired = result.diagnosis, result.repaired
        else:
            diagnosis = doctor_store(paths)
    click.echo(out.field("Store", paths.kind))
    if diagnosis.database is not None:
        where = "the embedded PostgreSQL" if diagnosis.database == EMBEDDED else diagnosis.database
        click.echo(out.field("Index", f"postgresql (database named by {where})"))
    else:
        click.echo(out.field("Index", out.path(str(diagnosis.index_path))))
    ready = out.success("ready") if diagnosis.semantic_model_ready else out.warning("lexical fallback")
    click.echo(out.field("Semantic retrieval", ready))
    for action in repaired:
        click.echo(f"{out.success('Repaired')}: {one_line(action)}")
    if not diagnosis.issues:
        click.echo(out.field("Status", out.success("healthy")))
        return
    summary = f"{diagnosis.failures} failure(s), {diagnosis.warnings} warning(s)"
    click.echo(out.field("Status", out.failure(summary) if diagnosis.failures else out.warning(summary)))
    click.echo()
    for issue in diagnosis.issues:
        severity = out.failure(issue.severity) if issue.severity == "failure" else out.warning(issue.severity)
        click.echo(f"{severity}: {one_line(issue.message)}")
        click.echo(f"  {out.label('Repair')}: {issue.repair}")
    if diagnosis.failures:
        raise click.exceptions.Exit(1)


@command("gc", help="Remove disposable lock, temporary and unused vector data (--index: the projection too).")
@click.option("--dry-run", is_flag=True, help="List what would be removed without removing it.")
@click.option("--index", "include_index", is_flag=True,
              help="Also remove the search projection and its vectors: the next search rebuilds them and "
              "embeds every record again.")  # fmt: skip
@click.option("--models", "include_models", is_flag=True,
              help="Also remove the embedding model cache, which every store on this machine shares.")  # fmt: skip
def gc(dry_run: bool, include_index: bool, include_models: bool) -> None:
    from ..index.gc import gc_store

    paths = selected_store()
    with failing("could not collect disposable data"):
        report = gc_store(paths, dry_run=dry_run, include_index=include_index, include_models=include_models)
    out = current().out()
    if dry_run:
        click.echo(out.field("Reclaimable", f"{len(report.candidates)} files, {report.reclaimed_bytes} bytes"))
    else:
        click.echo(out.field("Reclaimed", f"{report.removed} files, {report.reclaimed_bytes} bytes"))
    for label, size in report.candidates:
        click.echo(f"{out.path(label)}\t{size} bytes")
    if report.rebuilt is not None:
        click.echo(out.field("Projection", f"rebuilt from {report.rebuilt.indexed} records "
                             f"({report.rebuilt.chunks} chunks; their vectors wait for the daemon or "
                             f"`sbuf {current().scope_flag} sync`)"))  # fmt: skip
    if report.database is not None:
        vacuumed = report.database
        what = "would vacuum" if dry_run else f"vacuumed, {vacuumed.reclaimed_bytes} bytes given back"
        click.echo(out.field("Database", f"projection tables {what} ({vacuumed.dead_rows} dead row versions; "
                             f"{vacuumed.bytes_after} bytes now)"))  # fmt: skip


# ---- search, context ----------------------------------------------------------------------------


def _checked_query(query: str) -> None:
    """An empty query is refused in the HTTP API's words."""
    if not query.strip():
        fail("invalid query: must not be empty")


def _prepared(context: str) -> tuple[list[StorePaths], Embedder | None, str | None]:
    """The view's stores synced (with vectors when the model is ready, with progress bars on a
    terminal) and the semantic fallback reason; an invalid record file is left out, with a warning on
    stderr."""
    from ..retrieval import ready_for_retrieval

    cli = current()
    paths = _initialized_store(context)
    with failing(context):
        stores = retrieval_stores(cli.view, paths, cli.dirs())
    with sync_progress() as progress, failing(context):
        ready = ready_for_retrieval(stores, lambda: _embedder(paths), progress=progress, lock_wait=cli.write_wait())
    warn_degraded(
        [(f"records/{name}" if store == paths else f"records/{name} (global store)", why)
         for store, name, why in ready.invalid_files]
    )  # fmt: skip
    if ready.fallback == "vector_projection_incomplete":
        click.echo("note: some passages are still waiting for vectors and are found by their words only "
                   f"(`sbuf {cli.scope_flag} sync` embeds them)", err=True)  # fmt: skip
    return stores, ready.embedder, ready.fallback


@command("search", help="Search indexed memories.")
@click.argument("query")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Maximum number of results to return (at most 100 are).")  # fmt: skip
@click.option("--all", "include_all", is_flag=True, help="Include candidate, superseded, and archived records.")
@click.option("--json", "as_json", is_flag=True, help="Emit a JSON array instead of human-readable result cards.")
def search(query: str, limit: int, include_all: bool, as_json: bool) -> None:
    from ..retrieval import SearchOptions
    from ..retrieval import search as run_search

    cli = current()
    cli.machine_mode = as_json
    _checked_query(query)
    stores, embedder, fallback = _prepared("could not search memories")
    options = SearchOptions(limit=limit, include_inactive=include_all)
    with failing("could not search memories"):
        hits = run_search(stores, query, options, embedder=embedder, fallback=fallback)
    if as_json:
        click.echo(json.dumps([hit.to_json(with_path=True) for hit in hits], indent=2, ensure_ascii=False))
        return
    out = cli.out()
    shown = [hit for hit in hits if _relevant(hit)]
    names = scope_names(stores)
    cards = []
    for hit in shown:
        source = hit.sources[0]["reference"] if hit.sources else ""
        cards.append("\n".join([
            out.success(one_line(hit.title)),
            f"  {out.field('ID', hit.record_id)}",
            f"  {out.field('Kind', hit.kind)}  {out.field('Scope', scope_label(hit.scope, names))}",
            f"  {one_line(hit.excerpt)}",
            f"  {out.field('Source', one_line(source))}",
            f"  {out.field('Path', out.path(one_line(hit.path)))}",
            f"  {out.field('Score', f'{hit.score:.4f} ({one_line(hit.lexical_match_reason)})')}",
        ]))  # fmt: skip
    if cards:
        click.echo("\n\n".join(cards))
    hidden = len(hits) - len(shown)
    if not cards:
        click.echo(f"No memories match {one_line(query)!r}", err=True)
    if hidden:
        click.echo(f"{hidden} weak semantic match(es) not shown (--json lists every hit)", err=True)


def _relevant(hit: SearchHit) -> bool:
    """Whether a hit belongs in the human view: it matched a term, or its meaning is close enough."""
    if any(reason.startswith("lexical:") for reason in hit.match_reasons):
        return True
    return hit.vector_distance is not None and hit.vector_distance <= VECTOR_ONLY_MAX_DISTANCE


@command("context", help="Compile bounded context from indexed memories.")
@click.argument("query")
@click.option("--budget", type=click.IntRange(min=1), default=512, show_default=True,
              help="Maximum whitespace-delimited tokens in the evidence blocks (at most 4096 are).")  # fmt: skip
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="Maximum number of blocks (at most 100 are).")  # fmt: skip
@click.option("--all", "include_all", is_flag=True, help="Include candidate, superseded, and archived records.")
@json_or_text
def context(query: str, budget: int, limit: int, include_all: bool, output: str | None) -> None:
    """The JSON context (contract, blocks, receipt) when stdout is not a terminal, evidence as text on one."""
    from ..retrieval import ContextOptions, SearchOptions
    from ..retrieval import context as compile_context

    cli = current()
    cli.machine_mode = as_json = prints_json(output)
    _checked_query(query)
    stores, embedder, fallback = _prepared("could not compile context")
    options = ContextOptions(budget=budget, search=SearchOptions(limit=limit, include_inactive=include_all))
    with failing("could not compile context"):
        result = compile_context(stores, query, options, embedder=embedder, fallback=fallback)
    compiled = result.to_json()
    if as_json:
        click.echo(json.dumps(compiled, indent=2, ensure_ascii=False))
        return
    out = cli.out()
    names = scope_names(stores)
    for block in compiled["blocks"]:
        source = block["sources"][0]["reference"] if block["sources"] else ""
        click.echo(out.success(one_line(block["title"])))
        click.echo(f"  {out.field('ID', block['record_id'])}  {out.field('Kind', block['kind'])}  "
                   f"{out.field('Scope', scope_label(block['scope'], names))}")  # fmt: skip
        click.echo(f"  {out.field('Source', one_line(source))}")
        for line in block["text"].splitlines():
            click.echo(f"  | {one_line(line)}")
        click.echo()
    receipt = compiled["receipt"]
    if not compiled["blocks"]:
        click.echo(f"No memories match {one_line(query)!r}", err=True)
    omitted = f", {receipt['omitted_results']} omitted" if receipt["omitted_results"] else ""
    click.echo(out.field("Receipt", f"{receipt['receipt_id']} ({receipt['retrieval_mode']}, "
                         f"{receipt['used_tokens']}/{receipt['budget']} tokens{omitted})"))  # fmt: skip
