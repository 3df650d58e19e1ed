"""The PostgreSQL engine's tables, in the `stormbuffer` schema of the database.

`records` keeps each record's canonical Markdown bytes verbatim (what the directory engine writes
to its file) and, beside them, only what lookups need. `store` is the store's record scope (`global`
or `project:<uuid>`), so several stores can share one database; `path` is where an export puts the
record (`records/<id>.md` unless an import placed it elsewhere); `version` counts the row's writes.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, LargeBinary, MetaData, Table, Text, UniqueConstraint

SCHEMA = "stormbuffer"
SCHEMA_VERSION = "1"

metadata = MetaData(schema=SCHEMA)

records = Table(
    "records",
    metadata,
    Column("store", Text, primary_key=True),
    Column("id", Text, primary_key=True),
    Column("path", Text, nullable=False),
    Column("markdown", LargeBinary, nullable=False),
    Column("scope", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("title_key", Text, nullable=False),  # the normalized title duplicates and overlaps compare
    Column("version", BigInteger, nullable=False),
    UniqueConstraint("store", "path", name="records_store_path"),
    Index("records_title_key", "store", "title_key", "kind"),
)

settings = Table(
    "settings",
    metadata,
    Column("name", Text, primary_key=True),
    Column("value", Text, nullable=False),
)
