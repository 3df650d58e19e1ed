"""The manifest written beside a cached model: what it was made from and what was written."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stormbuffer.core.atomic import write_atomic

from .files import sha256_file

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 2  # 2 added `optimized`
READABLE_VERSIONS = (1, 2)  # a version 1 manifest reads as one without an optimized graph


@dataclass(frozen=True)
class FileRecord:
    """A written file: its content hash, and the metadata a process start compares."""

    sha256: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> FileRecord:
        """Hash and stat `path`."""
        digest = sha256_file(path)
        stat = path.stat()
        return cls(digest, stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True)
class OptimizedGraph:
    """The model graph as onnxruntime optimised it, saved beside the model (see `sessions`).

    Derived data: only the `runtime` that wrote it loads it, and a process whose check of these
    files fails uses the model file instead.
    """

    runtime: str
    files: dict[str, FileRecord]


@dataclass(frozen=True)
class ModelManifest:
    """Everything a loader needs to trust a cached model without re-hashing it."""

    model_id: str
    model_version: str
    model_checksum: str
    variant: str
    dimension: int
    max_tokens: int
    source: str  # "package:<distribution>" or "download:<base url>"
    source_hashes: dict[str, str]  # source file name -> "sha256:<hex>" or "blake3:<hex>"
    files: dict[str, FileRecord]  # file name in the model folder -> record
    created_at: str
    optimized: OptimizedGraph | None = None
    format_version: int = FORMAT_VERSION

    def recorded_files(self) -> dict[str, FileRecord]:
        """Every file the manifest vouches for: the model's and the optimized graph's."""
        return self.files | (self.optimized.files if self.optimized else {})

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelManifest:
        """Parse a manifest; raises ValueError when it is malformed or of an unknown format version."""
        try:
            data = json.loads(text)
            if data.pop("format_version", None) not in READABLE_VERSIONS:
                raise ValueError("unsupported manifest format version")
            files = _file_records(data.pop("files"))
            optimized = data.pop("optimized", None)
            if optimized is not None:
                optimized = OptimizedGraph(**(optimized | {"files": _file_records(optimized["files"])}))
            manifest = cls(files=files, optimized=optimized, **data)
            well_typed = manifest._well_typed()
        except (AttributeError, TypeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError("malformed model manifest") from exc
        if not well_typed:
            raise ValueError("malformed model manifest")
        return manifest

    def _well_typed(self) -> bool:
        texts = (
            self.model_id,
            self.model_version,
            self.model_checksum,
            self.variant,
            self.source,
            self.created_at,
            *self.source_hashes.keys(),
            *self.source_hashes.values(),
            *([self.optimized.runtime] if self.optimized else []),
        )
        records = self.recorded_files()
        optimized = self.optimized.files if self.optimized else None
        numbers = (
            self.dimension,
            self.max_tokens,
            *(value for record in records.values() for value in (record.size, record.mtime_ns)),
        )
        return (
            all(isinstance(value, str) for value in texts)
            and all(type(value) is int and value >= 0 for value in numbers)
            and all(isinstance(record.sha256, str) for record in records.values())
            and bool(self.files)
            and (optimized is None or (bool(optimized) and not self.files.keys() & optimized.keys()))
            and all(Path(name).name == name and name not in ("", ".", "..") for name in records)
        )


def _file_records(data: dict[str, Any]) -> dict[str, FileRecord]:
    return {str(name): FileRecord(**record) for name, record in data.items()}


def recipe_checksum(recipe: dict[str, Any]) -> str:
    """sha256 of everything that determines the vectors, in a canonical JSON form."""
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_manifest(directory: Path) -> ModelManifest | None:
    """The manifest in `directory`, or None when there is none. Raises ValueError when malformed."""
    path = directory / MANIFEST_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise ValueError("malformed model manifest") from exc
    return ModelManifest.from_json(text)


def write_manifest(directory: Path, manifest: ModelManifest) -> None:
    write_atomic(directory / MANIFEST_NAME, manifest.to_json().encode("utf-8"))


def stat_problems(files: dict[str, FileRecord], directory: Path) -> list[str]:
    """Files in `directory` whose size or mtime differ from their records (cheap: no hashing)."""
    problems = []
    for name, record in files.items():
        try:
            stat = (directory / name).stat()
        except FileNotFoundError:
            problems.append(f"model file `{name}` is missing")
            continue
        if (stat.st_size, stat.st_mtime_ns) != (record.size, record.mtime_ns):
            problems.append(f"model file `{name}` changed since it was verified")
    return problems


def hash_problems(files: dict[str, FileRecord], directory: Path) -> list[str]:
    """Files in `directory` that are missing or whose sha256 differs from their records."""
    problems = []
    for name, record in files.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"model file `{name}` is missing")
        elif sha256_file(path) != record.sha256:
            problems.append(f"model file `{name}` does not match its recorded sha256")
    return problems
