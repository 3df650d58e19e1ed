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
FORMAT_VERSION = 1


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
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ModelManifest:
        """Parse a manifest; raises ValueError when it is malformed or of another format version."""
        try:
            data = json.loads(text)
            if data.get("format_version") != FORMAT_VERSION:
                raise ValueError("unsupported manifest format version")
            files = {str(name): FileRecord(**record) for name, record in data.pop("files").items()}
            manifest = cls(files=files, **data)
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
        )
        numbers = (
            self.dimension,
            self.max_tokens,
            *(value for record in self.files.values() for value in (record.size, record.mtime_ns)),
        )
        return (
            all(isinstance(value, str) for value in texts)
            and all(type(value) is int and value >= 0 for value in numbers)
            and all(isinstance(record.sha256, str) for record in self.files.values())
            and bool(self.files)
            and all(Path(name).name == name and name not in ("", ".", "..") for name in self.files)
        )


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


def stat_problems(manifest: ModelManifest, directory: Path) -> list[str]:
    """Files whose size or mtime differ from the manifest (cheap: no hashing)."""
    problems = []
    for name, record in manifest.files.items():
        try:
            stat = (directory / name).stat()
        except FileNotFoundError:
            problems.append(f"model file `{name}` is missing")
            continue
        if (stat.st_size, stat.st_mtime_ns) != (record.size, record.mtime_ns):
            problems.append(f"model file `{name}` changed since it was verified")
    return problems


def hash_problems(manifest: ModelManifest, directory: Path) -> list[str]:
    """Files that are missing or whose sha256 differs from the manifest."""
    problems = []
    for name, record in manifest.files.items():
        path = directory / name
        if not path.is_file():
            problems.append(f"model file `{name}` is missing")
        elif sha256_file(path) != record.sha256:
            problems.append(f"model file `{name}` does not match its recorded sha256")
    return problems
