"""Import planning on a real store: every policy combination over one archive holding every kind of collision."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from stormbuffer.backup.archive import Archive, ArchiveRecord
from stormbuffer.backup.errors import ImportCollision
from stormbuffer.backup.planning import ExistingPolicy, IdPolicy, Policies, ScopePolicy, plan_import
from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.errors import StoreIntegrityError
from stormbuffer.core.repository import Repository
from stormbuffer.core.stores import PlatformDirs, View, initialize_store, resolve_store
from tests.helpers import record_markdown

FOREIGN = "01890a5d-ac96-774b-bcce-b30209900001"  # another project's record
EXISTING = "01890a5d-ac96-774b-bcce-b30209900002"  # stored with the very same bytes
COLLIDING = "01890a5d-ac96-774b-bcce-b30209900003"  # stored with other content
EQUIVALENT = "01890a5d-ac96-774b-bcce-b30209900004"  # archive id of a record equivalent to STORED_TWIN
STORED_TWIN = "01890a5d-ac96-774b-bcce-b30209900005"
NEW = "01890a5d-ac96-774b-bcce-b30209900006"
FRESH = "01890a5d-ac96-774b-bcce-b3020990ffff"  # the id a remap hands out


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    paths = resolve_store(View.GLOBAL, tmp_path, PlatformDirs(tmp_path / "data", tmp_path / "cache"))
    initialize_store(paths)
    stored = {
        EXISTING: record_markdown(EXISTING, "global", title="Existing"),
        COLLIDING: record_markdown(COLLIDING, "global", title="Colliding", body="Stored body.\n"),
        STORED_TWIN: record_markdown(STORED_TWIN, "global", title="Equivalent memory", body="Same body text.\n"),
    }
    for record_id, text in stored.items():
        (paths.records / f"{record_id}.md").write_text(text)
    return Repository(paths)


def archive_record(text: str, path: str | None = None) -> ArchiveRecord:
    record = parse_markdown(text)
    return ArchiveRecord(path or f"records/{record.id}.md", text, record)


def mixed_archive() -> Archive:
    return Archive(
        "global",
        (
            archive_record(record_markdown(FOREIGN, "project:elsewhere", title="Foreign")),
            archive_record(record_markdown(EXISTING, "global", title="Existing")),
            archive_record(record_markdown(COLLIDING, "global", title="Colliding", body="Archive body.\n")),
            archive_record(
                record_markdown(EQUIVALENT, "global", title="equivalent  MEMORY", body="Same\n  body text.\n")
            ),
            archive_record(record_markdown(NEW, "global", title="New", supersedes=(COLLIDING,))),
        ),
    )


def expected_actions(
    scope: ScopePolicy | None, id_: IdPolicy | None, existing: ExistingPolicy | None
) -> list[str] | str:
    """The reference's rules, record by record in archive order: a list of actions, or the refusal."""
    if scope is None:
        return "scope collision requires an explicit policy"
    if scope is ScopePolicy.FAIL:
        return "scope collision: archive has `project:elsewhere`, selected store requires `global`"
    actions = ["skip_scope_collision" if scope is ScopePolicy.SKIP else "import"]
    if existing is None:
        return "existing-record collision requires an explicit policy"
    if existing is ExistingPolicy.FAIL:
        return f"archive record {EXISTING} already exists as record {EXISTING}"
    actions.append("skip_existing_record" if existing is ExistingPolicy.SKIP else "overwrite")
    if id_ is None:
        return "id collision requires an explicit policy"
    if id_ is IdPolicy.FAIL:
        return f"record id collision for {COLLIDING}"
    actions.append({IdPolicy.SKIP: "skip_id_collision", IdPolicy.OVERWRITE: "overwrite", IdPolicy.REMAP: "remap"}[id_])
    actions.append("skip_equivalent_record" if existing is ExistingPolicy.SKIP else "overwrite")
    return [*actions, "import"]


@pytest.mark.parametrize(
    ("scope", "id_", "existing"),
    list(itertools.product([None, *ScopePolicy], [None, *IdPolicy], [None, *ExistingPolicy])),
)
def test_every_policy_combination(
    repo: Repository, scope: ScopePolicy | None, id_: IdPolicy | None, existing: ExistingPolicy | None
) -> None:
    archive = mixed_archive()
    stored = repo.scan()
    expected = expected_actions(scope, id_, existing)
    policies = Policies(scope, id_, existing)
    if isinstance(expected, str):
        with pytest.raises(ImportCollision) as caught:
            plan_import(archive, stored, repo.scope, repo.paths.root, policies, lambda: FRESH)
        assert expected in str(caught.value)
        return
    plan = plan_import(archive, stored, repo.scope, repo.paths.root, policies, lambda: FRESH)
    assert [item.action for item in plan.records] == expected
    by_source = {item.source_id: item for item in plan.records}
    originals = {item.record.id: item for item in archive.records}

    foreign = by_source[FOREIGN]
    if foreign.writes:  # remapped to the store's scope, hence re-rendered
        assert foreign.record.scope == "global" and foreign.data != originals[FOREIGN].data
        assert foreign.destination == f"records/{FOREIGN}.md"
    if by_source[EXISTING].writes:
        assert by_source[EXISTING].data == originals[EXISTING].data
        assert by_source[EXISTING].before == originals[EXISTING].data
    colliding = by_source[COLLIDING]
    if colliding.action == "overwrite":
        assert colliding.data == originals[COLLIDING].data  # unchanged record: the archive's exact bytes
        assert colliding.destination == f"records/{COLLIDING}.md"
    if colliding.action == "remap":
        assert (colliding.target_id, colliding.destination) == (FRESH, f"records/{FRESH}.md")
        assert parse_markdown(colliding.data).id == FRESH
    equivalent = by_source[EQUIVALENT]
    assert equivalent.equivalent_record_id == STORED_TWIN
    if equivalent.writes:  # keeps the stored record's id and file
        assert (equivalent.target_id, equivalent.destination) == (STORED_TWIN, f"records/{STORED_TWIN}.md")
        assert parse_markdown(equivalent.data).id == STORED_TWIN
    new = by_source[NEW]
    expected_link = FRESH if colliding.action == "remap" else COLLIDING
    assert parse_markdown(new.data).supersedes == (expected_link,)
    assert (new.data == originals[NEW].data) == (expected_link == COLLIDING)
    assert plan.imported == sum(item.writes for item in plan.records)
    assert plan.skipped == len(plan.records) - plan.imported
    assert plan.overwritten == expected.count("overwrite")
    assert plan.remapped == expected.count("remap")


def test_planning_writes_nothing(repo: Repository) -> None:
    before = {path: path.read_bytes() for path in repo.paths.root.rglob("*") if path.is_file()}
    policies = Policies(ScopePolicy.REMAP, IdPolicy.REMAP, ExistingPolicy.OVERWRITE)
    plan_import(mixed_archive(), repo.scan(), repo.scope, repo.paths.root, policies)
    assert {path: path.read_bytes() for path in repo.paths.root.rglob("*") if path.is_file()} == before


def test_two_records_for_one_destination_are_refused(repo: Repository) -> None:
    twin_a = record_markdown(EQUIVALENT, "global", title="Equivalent memory", body="Same body text.\n")
    twin_b = record_markdown(NEW, "global", title="Equivalent memory", body="Same body text.\n")
    archive = Archive("global", (archive_record(twin_a), archive_record(twin_b)))
    with pytest.raises(StoreIntegrityError, match="two archive records would be written"):
        plan_import(archive, repo.scan(), repo.scope, repo.paths.root, Policies(existing=ExistingPolicy.OVERWRITE))


def test_a_file_named_for_a_new_record_but_holding_another_is_refused(repo: Repository) -> None:
    (repo.paths.records / f"{EXISTING}.md").rename(repo.paths.records / f"{NEW}.md")
    archive = Archive("global", (archive_record(record_markdown(NEW, "global", title="New")),))
    with pytest.raises(StoreIntegrityError, match="record destination already exists"):
        plan_import(archive, repo.scan(), repo.scope, repo.paths.root, Policies())


def test_nested_archive_paths_are_imported_flat(repo: Repository) -> None:
    text = record_markdown(NEW, "global", title="New")
    archive = Archive("global", (archive_record(text, f"records/archive/2020/{NEW}.md"),))
    plan = plan_import(archive, repo.scan(), repo.scope, repo.paths.root, Policies())
    assert [(item.destination, item.data) for item in plan.writes] == [(f"records/{NEW}.md", text.encode())]


def test_archived_or_superseded_records_are_not_equivalents(repo: Repository) -> None:
    twin = repo.paths.records / f"{STORED_TWIN}.md"
    twin.write_text(twin.read_text().replace('status = "active"', 'status = "archived"'))
    text = record_markdown(EQUIVALENT, "global", title="Equivalent memory", body="Same body text.\n")
    plan = plan_import(Archive("global", (archive_record(text),)), repo.scan(), repo.scope, repo.paths.root, Policies())
    assert [(item.action, item.equivalent_record_id) for item in plan.records] == [("import", None)]
