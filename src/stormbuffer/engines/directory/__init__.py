"""The directory engine: records as Markdown files under `records/`, byte-compatible with the reference."""

from .store import DirectoryStore, record_files, recover_interrupted

__all__ = ["DirectoryStore", "record_files", "recover_interrupted"]
