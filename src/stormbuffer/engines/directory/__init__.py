"""The directory store: Markdown record files on disk (byte-compatible with the reference), projected
into a SQLite file."""

from .store import DirectoryStore, record_files, recover_interrupted

__all__ = ["DirectoryStore", "record_files", "recover_interrupted"]
