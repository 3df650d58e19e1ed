"""The directory store: Markdown record files on disk, projected into a SQLite file."""
