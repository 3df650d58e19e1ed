"""A store's records in PostgreSQL: reads without a lock, every write one database transaction.

A write takes a transaction-level advisory lock on its store (waiting up to the same bound as the
directory engine's mutation lock; still busy → MutationBusy), so writers of one store take turns
whatever process or host they run in, and the repository's checks (duplicate ids, duplicates and
overlaps) see every earlier write. A replace or remove compares the row's bytes with what was read
(compare-and-swap) and fails with Conflict when another writer, or someone working in `psql`,
changed it meanwhile. Everything a write changes, the two rows of a supersession included, commits
at once or not at all, together with the projection of what changed (`projecting`): every server
reading the database sees a write and its chunks and postings at once, and a process killed
mid-write leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...core.codec import parse_markdown, render_markdown
from ...core.errors import Conflict, MutationBusy, NotFound, ScopeDenied, StoreIntegrityError
from ...core.records import Record, RecordSummary, normalize
from ...core.stores import StorePaths
from ..base import MATCHING, FileWrite, Invalid, Progress, StoredRecord
from .database import connection

if TYPE_CHECKING:
    from sqlalchemy import Connection

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('stormbuffer:records:' || :store, 0))"
_LOCK_TIMEOUT = "55P03"


class PostgreSQLStore:
    """The `RecordStore` of a store kept in the database named by the environment variable `variable`."""

    def __init__(self, paths: StorePaths, scope: str, lock_wait: float, variable: str) -> None:
        self.paths = paths
        self.scope = scope
        self.lock_wait = lock_wait
        self.variable = variable
        self._held: Connection | None = None  # the connection of `locked()`, for `write_all`
        self._bulk = False  # whether `write_all` wrote in the transaction `locked()` holds

    # ---- reading -------------------------------------------------------------------------

    def rows(self, conn: Connection, *where: Any) -> list[StoredRecord]:
        """This store's records that meet the conditions `where`, by location."""
        from .schema import records

        query = records.select().with_only_columns(records.c.path, records.c.markdown)
        query = query.where(records.c.store == self.scope, *where).order_by(records.c.path)
        return [self._stored(row.path, row.markdown) for row in conn.execute(query)]

    def _stored(self, location: str, data: bytes) -> StoredRecord:
        record = parse_markdown(data, Path(location).name)
        if record.scope != self.scope:
            raise ScopeDenied(record.id)
        return StoredRecord(record, self.paths.root / location, data)

    def find(self, record_id: str) -> StoredRecord:
        from .schema import records

        with connection(self.variable) as conn:
            found = self.rows(conn, records.c.id == record_id)
        if not found:
            raise NotFound(record_id)
        return found[0]

    def listing(self) -> tuple[list[RecordSummary], Invalid]:
        from .schema import records

        query = records.select().with_only_columns(
            records.c.id, records.c.title, records.c.kind, records.c.scope, records.c.status
        )
        with connection(self.variable) as conn:
            rows = conn.execute(query.where(records.c.store == self.scope).order_by(records.c.id)).all()
        return [RecordSummary(*row) for row in rows], []

    def scan(self, progress: Progress | None, *, recover: bool, leave_out_invalid: bool) -> tuple[
        list[StoredRecord], Invalid
    ]:  # fmt: skip
        """Every record, by location; the table holds only records the codec wrote, so none is invalid."""
        with connection(self.variable) as conn:
            stored = self.rows(conn)
        if progress is not None:
            for done in range(1, len(stored) + 1):
                progress(done, len(stored))
        return stored, []

    def review_records(self) -> tuple[list[StoredRecord], Invalid]:
        from sqlalchemy import and_, select

        from .schema import records

        candidate = records.alias("candidate")
        overlapping = select(candidate.c.id).where(
            candidate.c.store == self.scope,
            candidate.c.status == "candidate",
            candidate.c.title_key == records.c.title_key,
            candidate.c.kind == records.c.kind,
            candidate.c.scope == records.c.scope,
        )
        with connection(self.variable) as conn:
            stored = self.rows(conn, and_(records.c.status.in_(MATCHING), overlapping.exists()))
            known = {item.record.id for item in stored}
            wanted = {old for item in stored for old in item.record.supersedes if old not in known}
            if wanted:
                stored += self.rows(conn, records.c.id.in_(sorted(wanted)))
        return sorted(stored, key=lambda item: item.path.as_posix()), []

    # ---- writing -------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A transaction holding this store's write lock."""
        from sqlalchemy import text
        from sqlalchemy.exc import OperationalError

        with connection(self.variable) as conn:
            wait_ms = max(1, round(self.lock_wait * 1000))
            conn.execute(text(f"SET LOCAL lock_timeout = {wait_ms}"))
            try:
                conn.execute(text(_LOCK), {"store": self.scope})
            except OperationalError as exc:
                if getattr(exc.orig, "sqlstate", None) == _LOCK_TIMEOUT:
                    raise MutationBusy() from None
                raise
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            yield conn

    @contextmanager
    def locked(self) -> Iterator[None]:
        """This store's write lock, in a transaction; after a bulk write (`write_all`) commits, the
        projection's tables are vacuumed, so reads get index-only scans at once (`upkeep.compact`)."""
        from .upkeep import compact

        self._bulk = False
        with self._writing() as conn:
            self._held = conn
            try:
                yield
            finally:
                self._held = None
        if self._bulk:
            compact(self.variable, dry_run=False)

    @contextmanager
    def transaction(self) -> Iterator[PostgreSQLTransaction]:
        from ...index.sync import token_counter

        token_counter(self.paths)  # the tokenizer loads before the lock is taken, as in the directory engine
        with self._writing() as conn:
            transaction = PostgreSQLTransaction(self, conn)
            yield transaction
            transaction.project()

    @property
    def held(self) -> Connection:
        """The connection of the transaction `locked()` holds."""
        if self._held is None:
            raise RuntimeError("this needs locked()")
        return self._held

    def erase(self) -> None:
        """Every row of this store, in every table keyed by it, deleted in the transaction `locked()` holds."""
        from .upkeep import erase

        erase(self.held, self.scope)

    def write_all(self, writes: Sequence[FileWrite], progress: Progress | None) -> None:
        """Every row in the transaction `locked()` holds: all of them commit with it, or none."""
        transaction = PostgreSQLTransaction(self, self.held)
        new: list[tuple[str, Record, bytes]] = []  # inserted many rows a statement, before any update
        for done, write in enumerate(writes, 1):
            location = write.path.relative_to(self.paths.root).as_posix()
            record = parse_markdown(write.data, write.path.name)
            if write.before is None:
                new.append((location, record, write.data))
            else:
                transaction.insert_all(new)
                new = []
                transaction.update(location, write.before, record, write.data)
            if progress is not None:
                progress(done, len(writes))
        transaction.insert_all(new)
        transaction.project()
        transaction.refresh_statistics()
        self._bulk = True


class PostgreSQLTransaction:
    """The `RecordTransaction` of a PostgreSQL store: lookups and writes on one locked transaction."""

    def __init__(self, store: PostgreSQLStore, conn: Connection) -> None:
        self.store = store
        self.conn = conn
        self.written: dict[str, tuple[str, Record]] = {}  # id → (location, record) to project
        self.removed: set[str] = set()  # ids whose projection goes

    def project(self) -> None:
        """Bring the projection along with what this transaction wrote, before it commits."""
        from ...embedding.constants import DIMENSION
        from ...index.sync import token_counter
        from .projecting import project, unproject

        if self.removed:
            unproject(self.conn, self.store.scope, sorted(self.removed), dimension=DIMENSION)
        if self.written:
            items = list(self.written.values())
            project(
                self.conn, self.store.scope, items, dimension=DIMENSION, count_tokens=token_counter(self.store.paths)
            )

    def refresh_statistics(self) -> None:
        """Let the planner see what a bulk write brought (`projecting.refresh_statistics`)."""
        from ...embedding.constants import DIMENSION
        from .projecting import refresh_statistics

        refresh_statistics(self.conn, DIMENSION)

    def get(self, record_id: str, *, guarded: bool = True, known: StoredRecord | None = None) -> StoredRecord:
        from .schema import records

        found = self.store.rows(self.conn, records.c.id == record_id)
        if not found:
            raise NotFound(record_id)
        return found[0]

    def unused(self, record_id: str) -> None:
        from .schema import records

        query = records.select().with_only_columns(records.c.id)
        if self.conn.execute(query.where(records.c.store == self.store.scope, records.c.id == record_id)).first():
            raise StoreIntegrityError(f"record {record_id} already exists")

    def title_matches(self, scope: str, kind: str, title: str) -> Iterator[StoredRecord]:
        from .schema import records

        yield from self.store.rows(
            self.conn,
            records.c.title_key == normalize(title),
            records.c.kind == kind,
            records.c.scope == scope,
            records.c.status.in_(MATCHING),
        )

    def guard(self, ids: Sequence[str] = (), titles: Sequence[str] = ()) -> None:
        """Nothing to guard: every row was written through the codec, so no unreadable record exists."""

    # -- writes ----------------------------------------------------------------------------

    def create(self, record: Record) -> None:
        self.insert(f"records/{record.id}.md", record, render_markdown(record).encode())

    def replace(self, item: StoredRecord, record: Record) -> None:
        location = item.path.relative_to(self.store.paths.root).as_posix()
        self.update(location, item.data, record, render_markdown(record).encode())

    def remove(self, item: StoredRecord) -> None:
        from .schema import records

        deleted = self.conn.execute(records.delete().where(*self._same_row(item.record.id, item.data)))
        if deleted.rowcount != 1:
            raise Conflict("record changed while it was being written")
        self.written.pop(item.record.id, None)
        self.removed.add(item.record.id)

    def supersede(self, old: StoredRecord, old_after: Record, new: Record, new_before: StoredRecord | None) -> None:
        """Both rows in this transaction: they commit together."""
        self.replace(old, old_after)
        if new_before is None:
            self.create(new)
        else:
            self.replace(new_before, new)

    def insert(self, location: str, record: Record, data: bytes) -> None:
        self.insert_all([(location, record, data)])

    def insert_all(self, rows: Sequence[tuple[str, Record, bytes]]) -> None:
        """Insert these (location, record, bytes) as new rows, many a statement; StoreIntegrityError
        when any id is taken already."""
        from sqlalchemy.dialects.postgresql import insert

        from .schema import records

        if not rows:
            return
        statement = insert(records).on_conflict_do_nothing().returning(records.c.id)
        values = [{"store": self.store.scope, "id": record.id, "path": location, "markdown": data, "version": 1,
                   **_columns(record)} for location, record, data in rows]  # fmt: skip
        if len(self.conn.execute(statement, values).all()) != len(rows):
            raise StoreIntegrityError("record destination already exists")
        for location, record, _data in rows:
            self.written[record.id] = (location, record)

    def update(self, location: str, before: bytes, record: Record, data: bytes) -> None:
        from .schema import records

        statement = (
            records.update()
            .where(*self._same_row(record.id, before), records.c.path == location)
            .values(markdown=data, version=records.c.version + 1, **_columns(record))
        )
        if self.conn.execute(statement).rowcount != 1:
            raise Conflict("record changed while it was being written")
        self.written[record.id] = (location, record)

    def _same_row(self, record_id: str, data: bytes) -> tuple[Any, ...]:
        from .schema import records

        return records.c.store == self.store.scope, records.c.id == record_id, records.c.markdown == data


def _columns(record: Record) -> dict[str, str]:
    """What lookups need of a record, beside its bytes."""
    return {
        "scope": record.scope,
        "kind": record.kind,
        "status": record.status,
        "title": record.title,
        "title_key": normalize(record.title),
    }
