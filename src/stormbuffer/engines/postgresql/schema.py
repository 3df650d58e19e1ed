"""The PostgreSQL engine's tables, in the `stormbuffer` schema of the database.

`records` keeps each record's canonical Markdown bytes verbatim (what the directory engine writes
to its file) and, beside them, only what lookups need. `store` is the store's record scope (`global`
or `project:<uuid>`), so several stores can share one database; `path` is where an export puts the
record (`records/<id>.md` unless an import placed it elsewhere); `version` counts the row's writes.

The team server's tables (`team`) keep, per store likewise, its tokens (hashes only), its audit
trail and its review-page sessions (hashes of their ids), so every server of the store shares them.
They came after the first stores: opening the team data of a store made before creates them
(`TEAM_TABLES`, idempotent).
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Identity,
    Index,
    LargeBinary,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

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

team_tokens = Table(
    "team_tokens",
    metadata,
    Column("store", Text, primary_key=True),
    Column("id", Text, primary_key=True),  # the token's public id
    Column("name", Text, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("scopes", ARRAY(Text), nullable=False),
    Column("audience", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
    Column("seq", BigInteger, Identity(), nullable=False),  # the order they were made in
    Index("team_tokens_unrevoked_name", "store", "name", unique=True, postgresql_where=text("revoked_at IS NULL")),
)

team_audit = Table(
    "team_audit",
    metadata,
    Column("seq", BigInteger, Identity(), primary_key=True),  # the order of appends
    Column("store", Text, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("who", Text),
    Column("records", ARRAY(Text), nullable=False),
    Column("entry", Text, nullable=False),  # the entry's JSON, as the directory store's line holds it
    Index("team_audit_at", "store", "at"),
    Index("team_audit_who", "store", "who"),
    Index("team_audit_records", "records", postgresql_using="gin"),
)

team_sessions = Table(
    "team_sessions",
    metadata,
    Column("store", Text, primary_key=True),
    Column("key", Text, primary_key=True),  # SHA-256 of the session id
    Column("token_id", Text, nullable=False),
    Column("sha256", Text, nullable=False),  # the token's
    Column("opened_at", DateTime(timezone=True), nullable=False),
    Index("team_sessions_opened", "store", "opened_at"),
)

TEAM_TABLES = (team_tokens, team_audit, team_sessions)
