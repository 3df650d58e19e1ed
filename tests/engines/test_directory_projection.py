"""The directory store's projection behind the engine seam: a one-shot read stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stormbuffer.index.sync import sync_store
from tests.stores import make_store, write_record

READ = """
import sys
from pathlib import Path
from stormbuffer.core.stores import PlatformDirs, View, resolve_store
from stormbuffer.retrieval import SearchOptions, search
paths = resolve_store(View.PROJECT, Path({project!r}), PlatformDirs(Path({data!r}), Path({cache!r})))
hits = search([paths], "deploy", SearchOptions(mode="lexical"))
print([hit.title for hit in hits])
print(sorted({{"sqlalchemy", "psycopg", "pgvector"}} & {{name.split(".")[0] for name in sys.modules}}))
"""


def test_a_lexical_search_reads_sqlite_without_sqlalchemy_or_a_postgresql_driver(tmp_path: Path) -> None:
    paths = make_store(tmp_path)
    write_record(paths, "Deploys need a green build", "Run the suite before tagging a deploy.")
    write_record(paths, "Lunch", "Soup on Fridays.")
    sync_store(paths)
    code = READ.format(project=str(tmp_path / "project"), data=str(tmp_path / "data"), cache=str(tmp_path / "cache"))
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["['Deploys need a green build']", "[]"]
