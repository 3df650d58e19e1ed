"""`sbuf export`, `verify-export`, `import` and `destroy-store`: portable archives and whole-store removal."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

import click

from ..backup.archive import decode_archive, encode_archive, read_archive, secret_findings
from ..backup.destroy import destroy_store, preview_destruction
from ..backup.errors import ImportCollision
from ..backup.planning import ExistingPolicy, IdPolicy, ImportPlan, Policies, ScopePolicy
from ..backup.transfer import Progress, export_store, import_archive, phase, write_export
from ..core.records import STATUSES, Record
from .context import current, fail
from .failures import failing
from .main import command
from .records import selected_store
from .style import Style

P = TypeVar("P", bound=StrEnum)

# Phases with fewer items than this finish too fast for a progress bar to help.
PROGRESS_THRESHOLD = 200


@command("export", help="Export canonical records and provenance as a portable JSON archive.")
@click.argument("path", metavar="[PATH|-]", required=False, default="-")
def export(path: str) -> None:
    paths = selected_store()
    with failing("could not export canonical records"), _progress_bar() as progress:
        archive = export_store(paths, progress)
        data = encode_archive(archive)
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    with failing("could not write export archive"):
        write_export(paths, data, Path(path))
    click.echo(f"Exported {len(archive.records)} records to {current().out().path(path)}")


@command("verify-export", help="Verify an export archive without importing it.")
@click.argument("path", metavar="PATH|-")
def verify_export(path: str) -> None:
    data = _read(path)
    with failing("could not verify export archive"), _progress_bar() as progress:
        archive = decode_archive(data, phase(progress, "Verifying archive"))
    out = current().out()
    click.echo(f"{out.success('Verified')}: {out.path(path)}")
    click.echo(out.field("Format version", "1"))
    click.echo(out.field("Source scope", archive.source_scope))
    click.echo(out.field("Records", str(len(archive.records))))
    for status in STATUSES:
        count = sum(item.record.status == status for item in archive.records)
        click.echo(out.field(status.capitalize(), str(count)))
    records = [item.record for item in archive.records]
    click.echo(out.field("Records with credential-like material", str(len(secret_findings(records)))))
    _report_secrets(out, records)


@command("import", help="Import a portable canonical-record archive.")
@click.argument("path", metavar="PATH|-")
@click.option(
    "--on-scope",
    "--scope-policy",
    "on_scope",
    metavar="fail|skip|remap",
    help="Archive records of another scope: fail, skip them, or remap them to this store's scope.",
)
@click.option(
    "--on-id",
    "--id-policy",
    "on_id",
    metavar="fail|skip|overwrite|remap",
    help="Same id, different content: fail, skip, overwrite the stored record, or give a fresh id.",
)
@click.option(
    "--on-existing",
    "--existing-policy",
    "on_existing",
    metavar="fail|skip|overwrite",
    help="A record already stored (same id and bytes, or an equivalent record): fail, skip or overwrite.",
)
@click.option("--dry-run", is_flag=True, help="Show every destination and action; write nothing.")
def import_records(path: str, on_scope: str | None, on_id: str | None, on_existing: str | None, dry_run: bool) -> None:
    policies = Policies(
        scope=_policy(ScopePolicy, on_scope, "--on-scope"),
        id=_policy(IdPolicy, on_id, "--on-id"),
        existing=_policy(ExistingPolicy, on_existing, "--on-existing"),
    )
    paths = selected_store()
    data = _read(path)
    context = "could not preview canonical record import" if dry_run else "could not import canonical records"
    with _progress_bar() as progress:
        with failing("could not read import archive"):
            archive = decode_archive(data, phase(progress, "Verifying archive"))
        with failing(context), _naming_the_policy_flag():
            plan = import_archive(paths, archive, policies, dry_run=dry_run, progress=progress)
    _report_import(plan, dry_run)


# the start of a collision the archive cannot be imported past without a policy -> the option that sets it
POLICY_FLAGS = {
    "scope collision requires": "--on-scope fail|skip|remap",
    "id collision requires": "--on-id fail|skip|overwrite|remap",
    "existing-record collision requires": "--on-existing fail|skip|overwrite",
}


@contextmanager
def _naming_the_policy_flag() -> Iterator[None]:
    """A collision that needs a policy names the option that chooses one."""
    try:
        yield
    except ImportCollision as exc:
        flag = next((flag for start, flag in POLICY_FLAGS.items() if str(exc).startswith(start)), None)
        if flag is None:
            raise
        raise ImportCollision(f"{exc}; choose one with {flag} (--dry-run shows what each would do)") from None


@command("destroy-store", help="Permanently remove the entire selected store.")
@click.option("--store-id", metavar="ID", help="The id of the store to destroy: its project id, or `global`.")
@click.option(
    "--export",
    "export_path",
    metavar="PATH",
    type=click.Path(path_type=Path),
    help="First write a verified recovery archive here (outside the store).",
)
@click.option("--yes", is_flag=True, help="Do not ask; requires --store-id.")
def destroy(store_id: str | None, export_path: Path | None, yes: bool) -> None:
    paths = selected_store()
    with failing("could not destroy selected store"):
        summary = preview_destruction(paths)
    out = current().out()
    click.echo(out.field("Store ID", summary.store_id))
    click.echo(out.field("Scope", summary.scope))
    click.echo(out.field("Root", out.path(str(summary.root))))
    click.echo(out.field("Store root bytes", str(summary.store_root_bytes)))
    click.echo(out.field("Canonical records", str(summary.records)))
    click.echo(out.field("Canonical bytes", str(summary.canonical_bytes)))
    click.echo(out.field("Disposable bytes", str(summary.disposable_bytes)))
    if store_id is not None and store_id != summary.store_id:
        fail("the supplied --store-id does not match the selected store")
    if not yes:
        _confirm_destruction(summary.store_id)
    elif store_id is None:
        fail("noninteractive destruction requires both --yes and --store-id")
    with failing("could not destroy selected store"), _progress_bar() as progress:
        exported = destroy_store(paths, summary.store_id, export_path, progress)
    if exported is not None:
        click.echo(out.field("Exported", out.path(str(export_path))))
    click.echo(f"{out.success('Destroyed')} store {summary.store_id}")


def _confirm_destruction(store_id: str) -> None:
    if not all(stream.isatty() for stream in (sys.stdin, sys.stdout, sys.stderr)):
        fail("noninteractive destruction requires both --yes and --store-id")
    click.echo(f"Type store ID {store_id} to destroy it (or cancel and use --export first): ", err=True, nl=False)
    if sys.stdin.readline().strip() != store_id:
        fail("store destruction cancelled")


def _policy(kind: type[P], value: str | None, flag: str) -> P | None:
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        fail(f"invalid value for {flag}: must be one of {', '.join(member.value for member in kind)}")


def _read(path: str) -> bytes:
    with failing("could not read import archive"):
        if path == "-":
            return read_archive(sys.stdin.buffer)
        with open(path, "rb") as stream:
            return read_archive(stream)


def _report_import(plan: ImportPlan, dry_run: bool) -> None:
    out = current().out()
    if dry_run:
        click.echo(out.field("Dry run", "yes"))
        for item in plan.records:
            line = f"{item.source_id} -> {item.target_id} | {item.scope} | {item.destination} | {item.action}"
            if item.equivalent_record_id is not None:
                line += f" | equivalent: {item.equivalent_record_id}"
            click.echo(line)
    click.echo(out.field("Imported", str(plan.imported)))
    click.echo(out.field("Skipped", str(plan.skipped)))
    click.echo(out.field("Overwritten", str(plan.overwritten)))
    click.echo(out.field("Remapped", str(plan.remapped)))
    _report_secrets(out, [item.record for item in plan.writes])


def _report_secrets(out: Style, records: list[Record]) -> None:
    """One line per record with credential-like material, naming fields only, never values."""
    for record_id, fields in secret_findings(records):
        click.echo(f"{out.warning('Credential-like material')}: {record_id} ({', '.join(fields)})")


@contextmanager
def _progress_bar() -> Iterator[Progress | None]:
    """A progress callback drawing bars on a terminal's stderr; None (silent) when stderr is no terminal.

    The bars appear only once a phase has at least PROGRESS_THRESHOLD items.
    """
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress as Bars
    from rich.progress import TaskID

    bars = Bars(console=Console(stderr=True, no_color=not current().err().enabled), transient=True)
    tasks: dict[str, TaskID] = {}

    def update(label: str, done: int, total: int) -> None:
        if total < PROGRESS_THRESHOLD:
            return
        if not tasks:
            bars.start()
        if label not in tasks:
            tasks[label] = bars.add_task(label, total=total)
        bars.update(tasks[label], completed=done)

    try:
        yield update
    finally:
        if tasks:
            bars.stop()
