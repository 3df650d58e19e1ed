"""Diagnosing a store, and repairing what is disposable.

`doctor_store` reads everything and changes nothing. `repair_store` never touches Markdown or
`store.toml`: when the canonical data is sound it rebuilds the projection if the diagnosis found
a projection problem, and removes stale disposable files (lock files other than the mutation lock
and journals, everything under `tmp/`, leftover temporaries and unused vector files beside the
projection). Symlinks are neither followed nor removed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.atomic import TEMP_SUFFIX
from ..core.codec import parse_markdown
from ..core.errors import IndexUnavailable, NotInitialized, RecordError, StoreError, out_of_space
from ..core.stores import StorePaths, record_scope
from ..engines.projection import database_variable
from . import projection as pj
from . import vectors as vector_files
from .sync import current_layout, scan_files

REPAIR_MODEL = "run `sbuf init` to prepare and verify the local model"
MODEL_NOT_READY = "semantic retrieval is not ready; search is using lexical matching only"
KEPT_LOCK_FILES = ("mutation.lock",)
LOW_SPACE_BYTES = 1024 * 1024  # below this, nothing the store writes (a record, the projection) fits
EXAMPLES = 3  # names shown in an issue that counts many records
# (one record, several records) of each kind of projection drift
DELETED = ("record was deleted but is still in the projection", "records were deleted but are still in the projection")
STALE = ("record changed since it was indexed", "records changed since they were indexed")
UNINDEXED = ("canonical record is not indexed", "canonical records are not indexed")
_WRITE_TEMPORARY = re.compile(rf"^\..+\.\d+\.\d+{re.escape(TEMP_SUFFIX)}$")  # `atomic.temp_path_for`


def sbuf(paths: StorePaths, command: str) -> str:
    """The command a repair names, for the store diagnosed: `sbuf --project sync` for a project store."""
    return f"`sbuf {'--project ' if paths.kind == 'project' else ''}{command}`"


def run(paths: StorePaths, command: str) -> str:
    return f"run {sbuf(paths, command)}"


@dataclass(frozen=True)
class Issue:
    severity: str  # "failure" | "warning"
    kind: str  # "canonical" | "projection" | "model" | "disposable"
    message: str
    repair: str

    def to_json(self) -> dict[str, str]:
        return {"severity": self.severity, "message": self.message, "repair": self.repair}


@dataclass
class Diagnosis:
    index_path: Path
    semantic_model_ready: bool = False
    database: str | None = None  # a PostgreSQL store: the variable naming its database (or `embedded`)
    issues: list[Issue] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(issue.severity == "failure" for issue in self.issues)

    @property
    def warnings(self) -> int:
        return sum(issue.severity == "warning" for issue in self.issues)

    def has(self, kind: str, severity: str | None = None) -> bool:
        return any(issue.kind == kind and severity in (None, issue.severity) for issue in self.issues)

    def to_json(self) -> dict[str, Any]:
        return {
            "index_path": str(self.index_path),
            "semantic_model_ready": self.semantic_model_ready,
            "failures": self.failures,
            "warnings": self.warnings,
            "issues": [issue.to_json() for issue in self.issues],
        }


@dataclass
class RepairReport:
    diagnosis: Diagnosis
    repaired: list[str]


def doctor_store(paths: StorePaths) -> Diagnosis:
    """Diagnose canonical data, the projection, the model and disposable leftovers."""
    index_path = pj.existing_index_path(paths) or _planned_index_path(paths)
    diagnosis = Diagnosis(index_path)
    issues = diagnosis.issues
    if not paths.is_initialized():
        issues.append(Issue("failure", "canonical", "the selected store is not initialized",
                            "run `sbuf init` (or `sbuf --project init`)"))  # fmt: skip
        return diagnosis
    try:
        diagnosis.database = database_variable(paths)
    except StoreError:
        pass  # an unreadable store.toml: reported below as the directory's
    if diagnosis.database is not None:
        _check_database(paths, diagnosis)
        return diagnosis
    if not paths.records.is_dir():
        issues.append(Issue("failure", "canonical", "the canonical records directory is missing",
                            "restore the records directory or initialize the store again"))  # fmt: skip
        return diagnosis
    try:
        scope = record_scope(paths)
    except (StoreError, NotInitialized) as exc:
        issues.append(Issue("failure", "canonical", f"canonical store metadata is invalid: {exc}",
                            f"repair store.toml, then run {sbuf(paths, 'doctor')}"))  # fmt: skip
        return diagnosis
    try:
        files = scan_files(paths)
    except (OSError, StoreError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        issues.append(Issue("failure", "canonical", f"canonical records could not be scanned: {reason}",
                            f"restore access to the records directory, then run {sbuf(paths, 'doctor')}"))  # fmt: skip
        return diagnosis
    free = _free_bytes(paths)
    if free is not None and free < LOW_SPACE_BYTES:
        issues.append(Issue("failure", "disk", f"no space left on device: {free} bytes free where the store lives",
                            f"free some disk space, then run {sbuf(paths, 'doctor')}"))  # fmt: skip
    valid = _check_records(paths, scope, sorted(files), issues)
    model_problems = _model_problems(paths)
    diagnosis.semantic_model_ready = not model_problems
    _check_projection(paths, diagnosis, valid)
    if model_problems:
        issues.append(Issue("warning", "model", MODEL_NOT_READY, REPAIR_MODEL))
    else:
        slow = _slow_model_start(paths)
        if slow:
            issues.append(Issue("warning", "model", f"the model opens without its saved optimized graph, about twice "
                                f"as slowly ({slow})", REPAIR_MODEL))  # fmt: skip
    for path in stale_disposable_files(paths, diagnosis.index_path):
        what = (
            "a temporary file left by an interrupted write"
            if _WRITE_TEMPORARY.match(path.name)
            else "stale \
disposable metadata"
        )
        issues.append(Issue("warning", "disposable", f"{what} remains at {_label(paths, path)}",
                            run(paths, "doctor --repair")))  # fmt: skip
    return diagnosis


def repair_store(paths: StorePaths) -> RepairReport:
    """Repair disposable state when the canonical data allows one unambiguous recovery."""
    from ..core.repository import Repository
    from ..embedding import open_embedder
    from .sync import reindex_store

    diagnosis = doctor_store(paths)
    if diagnosis.has("canonical", "failure"):
        return RepairReport(diagnosis, [])
    repaired: list[str] = []
    if diagnosis.database is not None:
        from ..engines.postgresql.upkeep import rebuild

        if diagnosis.has("projection", "failure"):
            rebuild(paths, Repository(paths).engine)
            repaired.append("rebuilt the store's projection in its database")
        return RepairReport(doctor_store(paths), repaired)
    with Repository(paths).locked():
        diagnosis = doctor_store(paths)
        if diagnosis.has("projection"):
            embedder = open_embedder(paths.cache_dir)[0] if diagnosis.semantic_model_ready else None
            reindex_store(paths, embedder)
            repaired.append("rebuilt the disposable search projection")
        for path in stale_disposable_files(paths, pj.existing_index_path(paths) or diagnosis.index_path):
            path.unlink(missing_ok=True)
            repaired.append(f"removed stale disposable metadata {_label(paths, path)}")
    return RepairReport(doctor_store(paths), repaired)


def _check_database(paths: StorePaths, diagnosis: Diagnosis) -> None:
    """A PostgreSQL store: its database (`engines.postgresql.upkeep.diagnose`) and the model."""
    from ..engines.postgresql.upkeep import diagnose

    assert diagnosis.database is not None
    try:
        scope = record_scope(paths)
    except (StoreError, NotInitialized) as exc:
        diagnosis.issues.append(Issue("failure", "canonical", f"canonical store metadata is invalid: {exc}",
                                      f"repair store.toml, then run {sbuf(paths, 'doctor')}"))  # fmt: skip
        return
    repairs = {
        "canonical": f"make the database usable (the message says how), then run {sbuf(paths, 'doctor')}",
        "projection": run(paths, "doctor --repair"),
    }
    for problem in diagnose(diagnosis.database, scope):
        diagnosis.issues.append(Issue(problem.severity, problem.kind, problem.message, repairs[problem.kind]))
    model_problems = _model_problems(paths)
    diagnosis.semantic_model_ready = not model_problems
    if model_problems:
        diagnosis.issues.append(Issue("warning", "model", MODEL_NOT_READY, REPAIR_MODEL))


def _planned_index_path(paths: StorePaths) -> Path:
    """Where the projection would be created, computed without creating anything."""
    directory = paths.root if paths.kind == "project" else paths.cache_dir
    return directory / paths.index_name


def _check_records(paths: StorePaths, scope: str, names: list[str], issues: list[Issue]) -> dict[str, tuple[str, str]]:
    """Parse every record; returns store-relative path → (record id, sha256) of the valid ones."""
    first_seen: dict[str, str] = {}
    valid: dict[str, tuple[str, str]] = {}
    for name in names:
        try:
            data = (paths.root / name).read_bytes()
            record = parse_markdown(data, name.rsplit("/", 1)[-1])
        except (OSError, RecordError) as exc:
            reason = exc.detail if isinstance(exc, RecordError) else (exc.strerror or type(exc).__name__)
            issues.append(Issue("failure", "canonical", f"canonical record {name} is invalid: {reason}",
                                f"repair the Markdown, then run {sbuf(paths, 'sync')}"))  # fmt: skip
            continue
        if record.scope != scope:
            issues.append(Issue("failure", "canonical", f"canonical record {name} is outside the selected store scope",
                                f"correct the record scope, then run {sbuf(paths, 'sync')}"))  # fmt: skip
        elif record.id in first_seen:
            issues.append(Issue("failure", "canonical",
                                f"canonical record {name} duplicates the ID first seen at {first_seen[record.id]}",
                                f"give each record a unique ID, then run {sbuf(paths, 'sync')}"))  # fmt: skip
        else:
            first_seen[record.id] = name
            valid[name] = (record.id, hashlib.sha256(data).hexdigest())
    return valid


def _check_projection(paths: StorePaths, diagnosis: Diagnosis, valid: dict[str, tuple[str, str]]) -> None:
    from . import postings

    issues = diagnosis.issues
    path = pj.existing_index_path(paths)
    if path is None:
        issues.append(Issue("warning", "projection", "the SQLite projection is missing", run(paths, "reindex")))
        return
    try:
        with pj.reading(path) as conn:
            projected = {name: (record_id, sha256) for name, record_id, sha256 in conn.execute(
                "SELECT path, id, content_sha256 FROM records")}  # fmt: skip
            settings = pj.get_settings(conn)
            broken_lexical = postings.problem(conn)
            unembedded = conn.execute(
                "SELECT count(*) FROM chunks WHERE embed_hash NOT IN (SELECT embed_hash FROM vectors)"
            ).fetchone()[0]
    except IndexUnavailable as exc:
        why = "no space left on device" if out_of_space(exc) or diagnosis.has("disk") else (
            "it is damaged, foreign or of another version")  # fmt: skip
        issues.append(Issue("failure", "projection", f"the SQLite projection cannot be opened: {why}",
                            run(paths, "reindex")))  # fmt: skip
        return
    if broken_lexical is not None:
        issues.append(Issue("failure", "projection", "the SQLite projection's lexical index is inconsistent",
                            run(paths, "reindex")))  # fmt: skip
    sync = run(paths, "sync")
    deleted = sorted(name for name in projected if name not in valid)
    stale = sorted(name for name, stored in projected.items() if name in valid and valid[name] != stored)
    unindexed = sorted(set(valid) - set(projected))
    for names, phrases in ((deleted, DELETED), (stale, STALE), (unindexed, UNINDEXED)):
        if names:
            issues.append(Issue("warning", "projection", _counted(names, phrases), sync))
    vectors_current = unembedded == 0 and current_layout(settings, path) is not None
    if diagnosis.semantic_model_ready and not vectors_current:
        issues.append(Issue("warning", "projection", "semantic vectors are missing or stale for some records", sync))


def _counted(names: list[str], phrases: tuple[str, str]) -> str:
    """One issue for many records: `445 canonical records are not indexed (records/a.md, ...)`."""
    shown = ", ".join(names[:EXAMPLES]) + (", ..." if len(names) > EXAMPLES else "")
    return f"{len(names)} {phrases[len(names) > 1]} ({shown})"


def _free_bytes(paths: StorePaths) -> int | None:
    try:
        return shutil.disk_usage(paths.root).free
    except OSError:
        return None


def _model_problems(paths: StorePaths) -> list[str]:
    from ..embedding import verify_model

    return verify_model(paths.cache_dir)


def _slow_model_start(paths: StorePaths) -> str | None:
    from ..embedding import verify_optimized_graph

    return verify_optimized_graph(paths.cache_dir)


def stale_disposable_files(paths: StorePaths, index_path: Path) -> list[Path]:
    """Lock files (not the mutation lock or journals), `tmp/` contents, temporaries of interrupted writes
    anywhere in the store (records included), leftover projection temporaries and vector files the
    projection no longer uses. Regular files only; symlinks are left alone."""
    found: list[Path] = []
    if paths.locks.is_dir():
        found += [entry for entry in paths.locks.iterdir()
                  if entry.suffix == ".lock" and entry.name not in KEPT_LOCK_FILES and _regular(entry)]  # fmt: skip
    tmp = paths.root / "tmp"
    if tmp.is_dir() and not tmp.is_symlink():
        for directory, _dirs, names in os.walk(tmp):
            found += [Path(directory, name) for name in names if _regular(Path(directory, name))]
    for directory, dirs, names in os.walk(paths.root):  # symlinked directories are not entered
        dirs[:] = [name for name in dirs if name != "tmp"]
        found += [Path(directory, name) for name in names
                  if _WRITE_TEMPORARY.match(name) and _regular(Path(directory, name))]  # fmt: skip
    index_dir = index_path.parent
    if index_dir.is_dir():
        prefix = f".{index_path.name}."
        found += [entry for entry in index_dir.iterdir()
                  if entry.name.startswith(prefix) and entry.name.endswith(".tmp") and _regular(entry)]  # fmt: skip
        used = used_matrix_files(index_path)
        found += [entry for entry in vector_files.all_matrix_files(index_path) if entry not in used]
    return sorted(set(found))


def used_matrix_files(index_path: Path) -> set[Path]:
    if not index_path.is_file():
        return set()
    try:
        with pj.reading(index_path) as conn:
            files = pj.get_setting(conn, pj.VECTOR_FILES)
    except IndexUnavailable:
        return set()
    return set(vector_files.Layout.parse(files).paths(index_path)) if files else set()


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _label(paths: StorePaths, path: Path) -> str:
    """A store-relative name for files inside the store, the full path for the shared cache."""
    try:
        return path.relative_to(paths.root).as_posix()
    except ValueError:
        return str(path)
