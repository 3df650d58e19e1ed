"""Read-only review of the selected store: the candidate inbox and the health audit."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from ..core import review
from ..core.records import KIND_REASON, KINDS, SOURCE_KIND_REASON, SOURCE_KINDS
from ..core.repository import Repository, StoredRecord
from ..core.scopes import parse_scope
from ..core.timestamps import Timestamp
from .context import current, fail
from .failures import failing, warn_degraded
from .main import command
from .records import selected_store
from .scopes import scope_label, scope_names
from .text import one_line

MAX_DAYS = 36_500  # a century: larger ages are a typing mistake, not a policy


def _read_store(context: str, *, candidates_only: bool = False) -> list[StoredRecord]:
    """Every valid record of the selected store (with `candidates_only`, what a review of the
    candidates reads: `Repository.review_records`), read without the lock; an invalid record file is
    left out, with a warning on stderr."""
    repository = Repository(selected_store())
    with failing(context):
        stored, invalid = repository.review_records() if candidates_only else repository.scan_valid()
    warn_degraded(invalid)
    return stored


# ---- inbox ---------------------------------------------------------------------------------------


@command("inbox", help="Review candidate memories awaiting a lifecycle decision.")
@click.option(
    "--min-age-days",
    type=click.IntRange(0, MAX_DAYS),
    default=0,
    help="Only candidates at least this many whole days old.",
)
@click.option("--kind", help="Only candidates of this kind: fact, decision, procedure, or checkpoint.")
@click.option("--source", help="Only candidates with a source of this kind: conversation, document, issue, or url.")
@click.option("--scope", help="Only candidates with exactly this record scope (`global` or `project:<id>`).")
@click.option("--possible-overlap", is_flag=True, help="Only candidates that may overlap another memory.")
@click.option("--json", "as_json", is_flag=True, help="Emit a JSON array instead of human-readable lines.")
def inbox(
    min_age_days: int, kind: str | None, source: str | None, scope: str | None, possible_overlap: bool, as_json: bool
) -> None:
    cli = current()
    cli.machine_mode = as_json
    if kind is not None and kind not in KINDS:
        fail(f"invalid memory kind: {KIND_REASON}")
    if source is not None and source not in SOURCE_KINDS:
        fail(f"invalid source kind: {SOURCE_KIND_REASON}")
    if scope is not None:
        try:
            parse_scope(scope)
        except ValueError as exc:
            fail(f"invalid scope: {exc}")
    stored = _read_store("could not review candidates", candidates_only=True)
    entries: list[dict[str, object]] = []
    for candidate in review.candidates(stored, Timestamp.now()):
        record = candidate.stored.record
        source_kinds = [source.kind for source in record.sources]
        if (
            candidate.age_days < min_age_days
            or kind not in (None, record.kind)
            or (source is not None and source not in source_kinds)
            or scope not in (None, record.scope)
            or (possible_overlap and candidate.overlap_id is None)
        ):
            continue
        entries.append(
            {
                "id": record.id,
                "title": record.title,
                "kind": record.kind,
                "scope": record.scope,
                "age_days": candidate.age_days,
                "sources": source_kinds,
                "possible_overlap_id": candidate.overlap_id,
            }
        )
    if as_json:
        click.echo(json.dumps(entries, separators=(",", ":"), ensure_ascii=False))
        return
    names = scope_names([selected_store()])
    for entry in entries:
        scope = scope_label(str(entry["scope"]), names)
        line = f"{entry['id']} | {entry['kind']} | {scope} | {one_line(str(entry['title']))}"
        line += f" | {entry['age_days']} days"
        if entry["possible_overlap_id"] is not None:
            line += f" | possible overlap: {entry['possible_overlap_id']}"
        click.echo(line)
    click.echo(cli.out().field("Candidates", str(len(entries))))


# ---- audit ---------------------------------------------------------------------------------------


@command("audit", help="Audit memory health without changing canonical records.")
@click.option(
    "--stale-after-days",
    type=click.IntRange(0, MAX_DAYS),
    default=30,
    show_default=True,
    help="Whole days after which an active checkpoint counts as stale.",
)
@click.option("--json", "as_json", is_flag=True, help="Emit one JSON object instead of human-readable findings.")
def audit(stale_after_days: int, as_json: bool) -> None:
    cli = current()
    cli.machine_mode = as_json
    stored = _read_store("could not audit store")
    findings = review.findings(stored, stale_after_days, f"sbuf {cli.scope_flag}", Timestamp.now())
    if as_json:
        report = {"findings": [asdict(found) for found in findings]}
        click.echo(json.dumps(report, separators=(",", ":"), ensure_ascii=False))
        return
    out = cli.out()
    for found in findings:
        click.echo(f"{found.kind} | {found.confidence} | {', '.join(found.record_ids)}")
        click.echo(out.field("Evidence", one_line(found.evidence)))
        click.echo(out.field("Rule", found.rule))
        click.echo(out.field("Follow up", found.follow_up))
    click.echo(out.field("Findings", str(len(findings))))
