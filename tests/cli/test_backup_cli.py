"""`sbuf export`, `verify-export`, `import` and `destroy-store`, run as real processes on real stores."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stormbuffer.core.codec import parse_markdown
from stormbuffer.core.locks import exclusive_lock
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, resolve_store
from stormbuffer.engines.directory import record_files
from tests.helpers import Sandbox, link_tree, record_markdown, run_at_terminal, tree_digest

FIRST = "01890a5d-ac96-774b-bcce-b30209900001"
SECOND = "01890a5d-ac96-774b-bcce-b30209900002"
THIRD = "01890a5d-ac96-774b-bcce-b30209900003"
FOURTH = "01890a5d-ac96-774b-bcce-b30209900004"
FIFTH = "01890a5d-ac96-774b-bcce-b30209900005"
TOKEN = "ghp_0123456789abcdefghijklmnop"


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "a")


@pytest.fixture
def other(tmp_path: Path) -> Sandbox:
    return Sandbox.create(tmp_path / "b")


def store(box: Sandbox, view: View = View.GLOBAL, *records: str, cwd: Path | None = None) -> StorePaths:
    """An initialized store holding the given record files (written as `records/<id>.md`)."""
    paths = resolve_store(view, cwd or box.cwd, PlatformDirs(box.base / "data", box.base / "cache"))
    initialize_store(paths)
    for text in records:
        (paths.records / f"{parse_markdown(text).id}.md").write_text(text, newline="")
    return paths


def files(paths: StorePaths) -> dict[str, bytes]:
    """Record id → exact file bytes."""
    return {parse_markdown(path.read_bytes()).id: path.read_bytes() for path in record_files(paths.records)}


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no progress bar or noise when stderr is no terminal
    return result.stdout


def failed(result: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line of a failed command (exit 1, no traceback)."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def archive_bytes(*records: dict[str, str], scope: str = "global", **header: object) -> bytes:
    document = {"format_version": 1, "source_scope": scope, "records": list(records), **header}
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode()


def entry(text: str, path: str | None = None) -> dict[str, str]:
    return {"path": path or f"records/{parse_markdown(text).id}.md", "markdown": text}


def write_archive(box: Sandbox, *records: dict[str, str], scope: str = "global", **header: object) -> Path:
    path = box.base / "archive.json"
    path.write_bytes(archive_bytes(*records, scope=scope, **header))
    return path


def field(stdout: str, name: str) -> str:
    values = [line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith(f"{name}: ")]
    assert len(values) == 1, stdout
    return values[0]


def counts(stdout: str) -> tuple[int, int, int, int]:
    return tuple(int(field(stdout, name)) for name in ("Imported", "Skipped", "Overwritten", "Remapped"))  # type: ignore[return-value]


# ---- export, verify, round trip -----------------------------------------------------------------------------


def varied_records(scope: str) -> list[str]:
    """Every status, hand-written formatting, CRLF, non-ASCII text and a supersession link."""
    return [
        record_markdown(FIRST, scope, title="Crème brûlée recipe", body="Caramelise the sugar.\r\nServe cold.\r\n"),
        record_markdown(SECOND, scope, status="superseded", title="Old deploy rule"),
        record_markdown(THIRD, scope, supersedes=(SECOND,), title="New deploy rule", body="# Deploy\n\nGreen only.\n"),
        record_markdown(FOURTH, scope, status="candidate", access="agent", title="Agent idea"),
        record_markdown(FIFTH, scope, status="archived", title="Retired note", body="唯一の書き込み境界\n"),
    ]


def search_results(box: Sandbox, query: str) -> list[dict[str, object]]:
    """`sbuf search --all --json` without the host-specific `path`, scores rounded against float noise."""
    hits = json.loads(ok(box.sbuf("search", query, "--all", "--json")))
    for hit in hits:
        del hit["path"]
        for key in ("score", "vector_distance"):
            if hit.get(key) is not None:
                hit[key] = round(hit[key], 6)
    return hits


def test_export_then_import_into_a_fresh_store_is_byte_identical(
    sandbox: Sandbox, acquired_models: Path, tmp_path: Path
) -> None:
    """Search needs the embedding model: `sandbox` brings it, and the second store gets a link to it."""
    box = sandbox
    other = Sandbox.create(tmp_path / "other")
    link_tree(acquired_models, other.base / "cache" / "stormbuffer" / "models")
    source = store(box, View.GLOBAL, *varied_records("global")[:4])
    nested = source.records / "archive" / f"{FIFTH}.md"
    nested.parent.mkdir()
    nested.write_text(varied_records("global")[4])
    out = ok(box.sbuf("export", "backup.json"))
    assert out == "Exported 5 records to backup.json\n"
    data = (box.cwd / "backup.json").read_bytes()
    assert ok(box.sbuf("export")).encode() == data  # no PATH: the same archive on stdout
    document = json.loads(data)
    assert list(document) == ["format_version", "source_scope", "records"]
    assert (document["format_version"], document["source_scope"]) == (1, "global")
    assert [item["path"] for item in document["records"]] == sorted(
        [f"records/{FIRST}.md", f"records/{SECOND}.md", f"records/{THIRD}.md", f"records/{FOURTH}.md"]
        + [f"records/archive/{FIFTH}.md"]
    )
    assert data.startswith(b'{\n  "format_version": 1,\n') and data.endswith(b"\n  ]\n}\n")
    assert str(box.base).encode() not in data  # no host paths

    target = store(other)
    report = ok(other.sbuf("import", str(box.cwd / "backup.json")))
    assert counts(report) == (5, 0, 0, 0)
    assert files(target) == files(source)
    assert ok(other.sbuf("list", "--all")) == ok(box.sbuf("list", "--all"))
    assert len(ok(other.sbuf("list", "--all")).splitlines()) == 5
    for query in ("deploy rule", "crème brûlée"):
        found = search_results(box, query)
        assert found and found == search_results(other, query)


def test_verify_export_reports_format_scope_counts_and_credential_like_material(box: Sandbox) -> None:
    leaky = record_markdown(FIRST, "global", body=f"Push with {TOKEN} please.\n").replace(
        'reference = "hand-written"', f'reference = "https://ci:{TOKEN}@example.org/x"'
    )
    records = [leaky, *varied_records("global")[1:]]
    path = write_archive(box, *(entry(text) for text in records))
    out = ok(box.sbuf("verify-export", str(path)))
    assert out.splitlines() == [
        f"Verified: {path}",
        "Format version: 1",
        "Source scope: global",
        "Records: 5",
        "Candidate: 1",
        "Active: 2",
        "Superseded: 1",
        "Archived: 1",
        "Records with credential-like material: 1",
        f"Credential-like material: {FIRST} (body, sources[0].reference)",
    ]
    assert TOKEN not in out
    assert ok(box.sbuf("verify-export", "-", input=path.read_text())).replace("Verified: -", f"Verified: {path}") == out
    assert not (box.base / "data").joinpath("stormbuffer").exists()  # no store needed, none created


def test_export_refuses_destinations_inside_the_store(box: Sandbox) -> None:
    paths = store(box, View.PROJECT, cwd=box.cwd)
    before = tree_digest(paths.root)
    (box.cwd / "link").symlink_to(paths.root)
    for destination in (".sbuf/backup.json", "link/records/backup.json", ".sbuf"):
        message = failed(box.sbuf("--project", "export", destination))
        assert message.startswith("error: could not write export archive: ")
        assert "outside the selected store" in message or "is a directory" in message
    assert tree_digest(paths.root) == before
    assert "does not exist" in failed(box.sbuf("--project", "export", "missing/backup.json"))


def test_export_and_import_need_an_initialized_store(box: Sandbox) -> None:
    path = write_archive(box, entry(record_markdown(FIRST, "global")))
    assert "store is not initialized" in failed(box.sbuf("--project", "export", str(box.base / "x.json")))
    assert "store is not initialized" in failed(box.sbuf("--project", "import", str(path)))
    assert not (box.cwd / ".sbuf").exists()


# ---- import policies -------------------------------------------------------------------------------------------


STORED = record_markdown(FIRST, "global", title="Stored", body="Stored body.\n")
CHANGED = record_markdown(FIRST, "global", title="Stored", body="Archive body.\n")
TWIN = record_markdown(SECOND, "global", title="Twin memory", body="Same body text.\n")
TWIN_IN_ARCHIVE = record_markdown(THIRD, "global", title="twin  Memory", body="Same\nbody text.\n")
FOREIGN = record_markdown(FOURTH, "project:elsewhere", title="Foreign")

# collision → (archive record, policy flag)
COLLISIONS = {
    "existing": (STORED, "--on-existing"),
    "id": (CHANGED, "--on-id"),
    "equivalent": (TWIN_IN_ARCHIVE, "--on-existing"),
    "scope": (FOREIGN, "--on-scope"),
}
# (collision, policy) → error fragment, or the counts (imported, skipped, overwritten, remapped)
OUTCOMES: dict[tuple[str, str | None], str | tuple[int, int, int, int]] = {
    ("existing", None): "existing-record collision requires an explicit policy",
    ("existing", "fail"): f"archive record {FIRST} already exists as record {FIRST}",
    ("existing", "skip"): (0, 1, 0, 0),
    ("existing", "overwrite"): (1, 0, 1, 0),
    ("id", None): "id collision requires an explicit policy",
    ("id", "fail"): f"record id collision for {FIRST}",
    ("id", "skip"): (0, 1, 0, 0),
    ("id", "overwrite"): (1, 0, 1, 0),
    ("id", "remap"): (1, 0, 0, 1),
    ("equivalent", None): "existing-record collision requires an explicit policy",
    ("equivalent", "fail"): f"archive record {THIRD} already exists as record {SECOND}",
    ("equivalent", "skip"): (0, 1, 0, 0),
    ("equivalent", "overwrite"): (1, 0, 1, 0),
    ("scope", None): "scope collision requires an explicit policy",
    ("scope", "fail"): "scope collision: archive has `project:elsewhere`, selected store requires `global`",
    ("scope", "skip"): (0, 1, 0, 0),
    ("scope", "remap"): (1, 0, 0, 0),
}


@pytest.mark.parametrize(("collision", "policy"), list(OUTCOMES))
def test_collision_policies(box: Sandbox, collision: str, policy: str | None) -> None:
    paths = store(box, View.GLOBAL, STORED, TWIN)
    text, flag = COLLISIONS[collision]
    archive = write_archive(box, entry(text))
    before = files(paths)
    result = box.sbuf("import", str(archive), *([flag, policy] if policy else []))
    expected = OUTCOMES[(collision, policy)]
    if isinstance(expected, str):
        assert expected in failed(result)
        assert files(paths) == before
        return
    assert counts(ok(result)) == expected
    after = files(paths)
    if expected[1]:  # skipped: nothing changed
        assert after == before
    elif collision == "existing":
        assert after == before
    elif (collision, policy) == ("id", "overwrite"):
        assert after == {**before, FIRST: CHANGED.encode()}  # the archive's exact bytes
    elif (collision, policy) == ("id", "remap"):
        (fresh,) = set(after) - set(before)
        assert after[FIRST] == before[FIRST]
        assert parse_markdown(after[fresh]).body == "Archive body.\n"
    elif collision == "equivalent":
        assert set(after) == set(before)  # written over the stored record, keeping its id and file
        rewritten = parse_markdown(after[SECOND])
        assert (rewritten.title, rewritten.body) == ("twin  Memory", "Same\nbody text.\n")
    else:
        assert parse_markdown(after[FOURTH]).scope == "global"


def test_moving_memories_between_project_stores_needs_a_scope_policy(box: Sandbox) -> None:
    source = store(box, View.PROJECT, cwd=box.cwd)
    for text in varied_records(f"project:{project_id(source)}"):
        (source.records / f"{parse_markdown(text).id}.md").write_text(text, newline="")
    ok(box.sbuf("--project", "export", str(box.base / "moving.json")))
    elsewhere = box.base / "work" / "elsewhere"
    elsewhere.mkdir()
    target = store(box, View.PROJECT, cwd=elsewhere)
    archive = str(box.base / "moving.json")
    assert "scope collision" in failed(box.sbuf("--project", "import", archive, cwd=elsewhere))
    preview = ok(box.sbuf("--project", "import", archive, "--on-scope", "remap", "--dry-run", cwd=elsewhere))
    assert preview.startswith("Dry run: yes\n") and "Imported: 5" in preview
    assert list(target.records.iterdir()) == []
    assert counts(ok(box.sbuf("--project", "import", archive, "--on-scope", "remap", cwd=elsewhere)))[0] == 5
    moved = {key: parse_markdown(value) for key, value in files(target).items()}
    assert {record.scope for record in moved.values()} == {f"project:{project_id(target)}"}
    assert moved[THIRD].supersedes == (SECOND,)


def test_policy_aliases_and_bad_policy_values(box: Sandbox) -> None:
    paths = store(box, View.GLOBAL, STORED)
    archive = write_archive(box, entry(CHANGED), entry(FOREIGN))
    out = ok(
        box.sbuf("import", str(archive), "--id-policy", "skip", "--scope-policy", "skip", "--existing-policy", "fail")
    )
    assert counts(out) == (0, 2, 0, 0)
    message = failed(box.sbuf("import", str(archive), "--on-id", "rename"))
    assert message == "error: invalid value for --on-id: must be one of fail, skip, overwrite, remap"
    assert list(files(paths)) == [FIRST]


def test_remap_rewrites_supersedes_links_inside_the_imported_set(box: Sandbox) -> None:
    paths = store(box, View.GLOBAL, STORED)
    successor = record_markdown(FIFTH, "global", title="Successor", supersedes=(FIRST,))
    archive = write_archive(box, entry(CHANGED), entry(successor))
    assert counts(ok(box.sbuf("import", str(archive), "--on-id", "remap"))) == (2, 0, 0, 1)
    after = files(paths)
    (fresh,) = set(after) - {FIRST, FIFTH}
    assert parse_markdown(after[FIFTH]).supersedes == (fresh,)
    assert parse_markdown(after[fresh]).supersedes == ()


def test_reimporting_a_stores_own_export_with_existing_skip(box: Sandbox) -> None:
    paths = store(box, View.PROJECT, cwd=box.cwd)
    for text in varied_records(f"project:{project_id(paths)}"):
        (paths.records / f"{parse_markdown(text).id}.md").write_text(text, newline="")
    ok(box.sbuf("--project", "export", "own.json"))
    before = tree_digest(paths.root)
    assert "existing-record collision" in failed(box.sbuf("--project", "import", "own.json"))
    assert counts(ok(box.sbuf("--project", "import", "own.json", "--on-existing", "skip"))) == (0, 5, 0, 0)
    assert tree_digest(paths.root) == before


def test_dry_run_prints_every_destination_and_action_and_changes_nothing(box: Sandbox) -> None:
    paths = store(box, View.GLOBAL, STORED, TWIN)
    new = record_markdown(FIFTH, "global", title="Brand new")
    archive = write_archive(box, entry(CHANGED), entry(TWIN_IN_ARCHIVE), entry(FOREIGN), entry(new))
    before = tree_digest(box.base / "data")
    args = ["import", str(archive), "--dry-run", "--on-id", "remap", "--on-existing", "skip", "--on-scope", "remap"]
    lines = ok(box.sbuf(*args)).splitlines()
    assert tree_digest(box.base / "data") == before
    assert lines[0] == "Dry run: yes"
    remap_target = lines[1].split(" -> ")[1].split(" | ")[0]
    assert lines[1:5] == [
        f"{FIRST} -> {remap_target} | global | records/{remap_target}.md | remap",
        f"{THIRD} -> {THIRD} | global | records/{SECOND}.md | skip_equivalent_record | equivalent: {SECOND}",
        f"{FOURTH} -> {FOURTH} | global | records/{FOURTH}.md | import",
        f"{FIFTH} -> {FIFTH} | global | records/{FIFTH}.md | import",
    ]
    assert remap_target != FIRST
    assert lines[5:] == ["Imported: 3", "Skipped: 1", "Overwritten: 0", "Remapped: 1"]
    assert set(files(paths)) == {FIRST, SECOND}


def test_import_reads_stdin(box: Sandbox) -> None:
    paths = store(box)
    text = record_markdown(FIFTH, "global")
    assert counts(ok(box.sbuf("import", "-", input=archive_bytes(entry(text)).decode()))) == (1, 0, 0, 0)
    assert files(paths) == {FIFTH: text.encode()}


def test_import_is_refused_while_another_process_changes_the_store(box: Sandbox) -> None:
    paths = store(box)
    archive = write_archive(box, entry(record_markdown(FIFTH, "global")))
    with exclusive_lock(paths.mutation_lock):
        assert "store mutation lock is busy" in failed(box.sbuf("import", str(archive)))
    assert files(paths) == {}


# ---- hostile archives ----------------------------------------------------------------------------------------


GOOD = record_markdown(FIFTH, "global", title="Good")
HOSTILE: dict[str, tuple[bytes, str]] = {
    "dot-dot path": (archive_bytes(entry(GOOD, f"records/../../{FIFTH}.md")), "archive record 1 has an unsafe path"),
    "absolute path": (archive_bytes(entry(GOOD, f"/etc/cron.d/{FIFTH}.md")), "archive record 1 has an unsafe path"),
    "backslash path": (archive_bytes(entry(GOOD, f"records\\..\\{FIFTH}.md")), "unsafe path"),
    "duplicate ids": (
        archive_bytes(entry(GOOD), entry(GOOD, f"records/copy/{FIFTH}.md")),
        f"archive record 2 repeats record id {FIFTH}",
    ),
    "format version 2": (archive_bytes(entry(GOOD), format_version=2), "export format version 2 is unsupported"),
    "foreign scope": (archive_bytes(entry(GOOD), entry(FOREIGN)), "scope collision requires an explicit policy"),
    "truncated": (archive_bytes(entry(GOOD))[:-40], "invalid JSON"),
    "not JSON": (b"+++\nthis is markdown\n", "invalid JSON"),
    "binary": (b"\x00\xff\xfe\x01", "not valid UTF-8"),
    "over the limit": (b" " * (16 * 1024 * 1024 + 1), "exceeds the 16777216 byte limit"),
    "unknown header key": (archive_bytes(entry(GOOD), checksum="abc"), "unknown field `checksum`"),
    "unknown record key": (archive_bytes({**entry(GOOD), "mode": "0755"}), "unknown field `mode` in archive record 1"),
    "inference provenance": (
        archive_bytes(entry(GOOD.replace('actor = "human"', 'actor = "inference"'))),
        "unsupported inference",
    ),
    "invalid record": (
        archive_bytes(entry(GOOD.replace('kind = "fact"', 'kind = "rumour"'), f"records/{FIFTH}.md")),
        "field `kind`",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_archives_get_one_clear_error_and_write_nothing(box: Sandbox, case: str) -> None:
    paths = store(box, View.GLOBAL, STORED)
    data, fragment = HOSTILE[case]
    archive = box.base / "hostile.json"
    archive.write_bytes(data)
    before = tree_digest(paths.root)
    message = failed(box.sbuf("import", str(archive)))
    assert fragment in message
    assert str(box.base) not in message
    assert tree_digest(paths.root) == before
    if case != "foreign scope":  # scope is a store question; verification alone accepts it
        assert fragment in failed(box.sbuf("verify-export", str(archive)))


def test_a_hostile_archive_on_stdin_is_refused(box: Sandbox) -> None:
    paths = store(box)
    data = archive_bytes(entry(GOOD, "records/../../escape.md")).decode()
    assert "unsafe path" in failed(box.sbuf("import", "-", input=data))
    assert files(paths) == {}


# ---- credential-like material -----------------------------------------------------------------------------


def test_secrets_are_imported_but_reported_by_id_and_field_only(box: Sandbox) -> None:
    paths = store(box)
    leaky = record_markdown(FIFTH, "global", title="CI access", body=f"Authorization: Bearer {TOKEN}\n")
    clean = record_markdown(FOURTH, "global", title="Clean")
    archive = write_archive(box, entry(leaky), entry(clean))
    for args in (["--dry-run"], []):
        result = box.sbuf("import", str(archive), *args)
        out = ok(result)
        assert f"Credential-like material: {FIFTH} (body)" in out.splitlines()
        assert FOURTH not in out.split("Remapped: 0")[1]
        assert TOKEN not in out + result.stderr
    assert files(paths)[FIFTH] == leaky.encode()


# ---- progress ------------------------------------------------------------------------------------------------


def test_large_imports_and_exports_show_progress_only_at_a_terminal(box: Sandbox, other: Sandbox) -> None:
    many = [record_markdown(f"01890a5d-ac96-774b-bcce-{n:012x}", "global", title=f"Note {n}") for n in range(1, 301)]
    archive = write_archive(box, *(entry(text) for text in many))
    target = store(other)
    code, output = run_at_terminal(other, ["verify-export", str(archive)])
    assert code == 0 and "Verifying archive" in output and "Records: 300" in output
    code, output = run_at_terminal(other, ["import", str(archive)])
    assert code == 0 and "Imported: 300" in output
    assert "Verifying archive" in output and "Writing records" in output
    assert len(files(target)) == 300
    code, output = run_at_terminal(other, ["export", str(other.base / "again.json")])
    assert code == 0 and "Reading records" in output
    quiet = other.sbuf("export", str(other.base / "quiet.json"))
    assert ok(quiet) == f"Exported 300 records to {other.base / 'quiet.json'}\n"


# ---- destroy-store ---------------------------------------------------------------------------------------------


def project_id(paths: StorePaths) -> str:
    for line in paths.config_file.read_text().splitlines():
        if line.startswith("project_id = "):
            return line.split('"')[1]
    raise AssertionError("no project id")


def test_destroy_store_requires_an_initialized_store(box: Sandbox) -> None:
    message = failed(box.sbuf("--project", "destroy-store", "--store-id", "x", "--yes"))
    assert "store is not initialized" in message
    assert not (box.cwd / ".sbuf").exists()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--store-id", "wrong", "--yes"], "the supplied --store-id does not match the selected store"),
        (["--store-id", "{id}"], "noninteractive destruction requires both --yes and --store-id"),
        (["--yes"], "noninteractive destruction requires both --yes and --store-id"),
        ([], "noninteractive destruction requires both --yes and --store-id"),
        (["--store-id", "{id}", "--yes", "--export", ".sbuf/inside.json"], "outside the selected store"),
    ],
)
def test_destroy_store_refusals_keep_the_store(box: Sandbox, args: list[str], error: str) -> None:
    paths = store(box, View.PROJECT, cwd=box.cwd)
    scope = f"project:{project_id(paths)}"
    (paths.records / f"{FIRST}.md").write_text(record_markdown(FIRST, scope))
    before = tree_digest(paths.root)
    result = box.sbuf("--project", "destroy-store", *(arg.replace("{id}", project_id(paths)) for arg in args))
    assert error in failed(result)
    assert field(result.stdout, "Store ID") == project_id(paths)
    assert tree_digest(paths.root) == before


def test_destroy_store_with_a_verified_export(box: Sandbox, other: Sandbox) -> None:
    paths = store(box, View.PROJECT, cwd=box.cwd)
    store_id = project_id(paths)
    for text in varied_records(f"project:{store_id}"):
        (paths.records / f"{parse_markdown(text).id}.md").write_text(text, newline="")
    (paths.root / "notes-from-someone.txt").write_text("an unrecognised file\n" * 10)
    (paths.root / "index.sqlite3").write_bytes(b"projection" * 10)
    saved = files(paths)
    backup = box.base / "safety.json"
    result = box.sbuf("--project", "destroy-store", "--store-id", store_id, "--yes", "--export", str(backup))
    out = ok(result)
    assert field(out, "Store ID") == store_id
    assert field(out, "Scope") == f"project:{store_id}"
    assert field(out, "Root") == str(paths.root)
    assert field(out, "Canonical records") == "5"
    assert int(field(out, "Store root bytes")) > int(field(out, "Canonical bytes")) + int(
        field(out, "Disposable bytes")
    )
    assert int(field(out, "Disposable bytes")) >= 100
    assert out.splitlines()[-2:] == [f"Exported: {backup}", f"Destroyed store {store_id}"]
    assert not paths.root.exists()
    assert "Records: 5" in ok(box.sbuf("verify-export", str(backup)))
    restored = store(other, View.PROJECT, cwd=other.cwd)
    ok(other.sbuf("--project", "import", str(backup), "--on-scope", "remap"))
    assert {key: parse_markdown(value).body for key, value in files(restored).items()} == {
        key: parse_markdown(value).body for key, value in saved.items()
    }


def test_destroy_store_keeps_the_store_when_the_export_cannot_be_verified(box: Sandbox) -> None:
    paths = store(box, View.GLOBAL, GOOD.replace('actor = "human"', 'actor = "inference"'))
    before = tree_digest(paths.root)
    backup = box.base / "safety.json"
    message = failed(box.sbuf("destroy-store", "--store-id", "global", "--yes", "--export", str(backup)))
    assert "unsupported inference" in message
    assert tree_digest(paths.root) == before and not backup.exists()


def test_destroying_the_global_store_removes_its_projection_but_keeps_the_model_cache(box: Sandbox) -> None:
    paths = store(box, View.GLOBAL, GOOD)
    cache = box.base / "cache" / "stormbuffer"
    projection = [cache / name for name in ("global.sqlite3", "global.sqlite3-wal", "global.sqlite3-shm")]
    projection.append(cache / "projection.lock")
    model = cache / "models" / "all-minilm-l6-v2" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"weights")
    for path in projection:
        path.write_bytes(b"index")
    out = ok(box.sbuf("destroy-store", "--store-id", "global", "--yes"))
    assert field(out, "Store ID") == "global"
    assert int(field(out, "Disposable bytes")) >= 4 * len(b"index")
    assert out.splitlines()[-1] == "Destroyed store global"
    assert not paths.root.exists()
    assert not any(path.exists() for path in projection)
    assert model.read_bytes() == b"weights"


@pytest.mark.parametrize(
    ("answer", "destroyed"), [("{id}\n", True), ("  {id}  \n", True), ("no\n", False), ("\n", False)]
)
def test_destroy_store_asks_for_the_id_at_a_terminal(box: Sandbox, answer: str, destroyed: bool) -> None:
    paths = store(box, View.PROJECT, cwd=box.cwd)
    store_id = project_id(paths)
    prompt = f"Type store ID {store_id} to destroy it (or cancel and use --export first): ".encode()
    code, output = run_at_terminal(box, ["--project", "destroy-store"], prompt, answer.replace("{id}", store_id))
    assert prompt.decode() in output
    if destroyed:
        assert code == 0 and f"Destroyed store {store_id}" in output and not paths.root.exists()
    else:
        assert code == 1 and "error: store destruction cancelled" in output and paths.root.exists()
