"""The checked-in evaluation corpus (`corpus.json`): records in a global store and two project
stores (`alpha`, `beta`), and questions asked in one of those views, each expecting one record.

`run_corpus` writes the records into fresh stores in a temporary directory, indexes them with the
real model and asks every question in three modes. The report passes when hybrid retrieval meets
THRESHOLDS: recall@5 and MRR at least their floor, and no hit in the first five from outside the
question's view (scope violation) or not active (candidate, superseded or archived leakage).
"""

from __future__ import annotations

import json
import tempfile
import uuid
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .metrics import mean
from .questions import ranked_records, score_question

if TYPE_CHECKING:
    from ..core.stores import StorePaths
    from ..index.sync import Embedder

K = 5
MODES = {"fts-only": "lexical", "vector-only": "semantic", "hybrid": "hybrid"}  # report name -> search mode
THRESHOLDS = {
    "recall_at_5": (">=", 0.90),
    "mean_reciprocal_rank": (">=", 0.60),
    "scope_violation_rate": ("<=", 0.0),
    "inactive_or_superseded_leakage_rate": ("<=", 0.0),
}
NAMESPACE = uuid.UUID("0b8a4a0e-51f6-4d55-9d0c-5e0f4c1a2b3d")


def load_corpus() -> dict[str, Any]:
    corpus: dict[str, Any] = json.loads(resources.files(__package__).joinpath("corpus.json").read_text("utf-8"))
    return corpus


def record_id(key: str) -> str:
    return str(uuid.uuid5(NAMESPACE, key))


def run_corpus(embedder: Embedder) -> dict[str, Any]:
    """Build the corpus's stores in a temporary directory, ask its questions, return the report."""
    corpus = load_corpus()
    with tempfile.TemporaryDirectory(prefix="stormbuffer-evaluate-") as work:
        stores = _build_stores(Path(work), corpus, embedder)
        modes = {name: _run_mode(corpus, stores, mode, embedder) for name, mode in MODES.items()}
    failures = threshold_failures(modes["hybrid"])
    return {
        "revision": corpus["revision"],
        "passed": not failures,
        "failures": failures,
        "records": len(corpus["records"]),
        "queries": len(corpus["queries"]),
        "model": {"id": embedder.model_id, "version": embedder.model_version},
        "thresholds": {metric: {"op": op, "value": value} for metric, (op, value) in THRESHOLDS.items()},
        "modes": modes,
    }


def threshold_failures(metrics: dict[str, Any]) -> list[str]:
    """What in one mode's metrics misses THRESHOLDS, one sentence each (empty: the report passes)."""
    return [
        f"hybrid {metric} {metrics[metric]} is not {op} {bound}"
        for metric, (op, bound) in THRESHOLDS.items()
        if not (metrics[metric] >= bound if op == ">=" else metrics[metric] <= bound)
    ]


def _build_stores(base: Path, corpus: dict[str, Any], embedder: Embedder) -> dict[str, StorePaths]:
    from ..core.codec import render_markdown
    from ..core.records import Record, Source
    from ..core.stores import PlatformDirs, View, initialize_store, record_scope, resolve_store
    from ..core.timestamps import Timestamp
    from ..index.sync import sync_store

    dirs = PlatformDirs(base / "data", base / "cache")
    stores = {"global": resolve_store(View.GLOBAL, base, dirs)}
    for name in sorted({item["store"] for item in corpus["records"]} - {"global"}):
        (base / name).mkdir()
        stores[name] = resolve_store(View.PROJECT, base / name, dirs)
    for paths in stores.values():
        initialize_store(paths)
    created = Timestamp.parse(corpus["created_at"])
    source = Source("document", "stormbuffer evaluation corpus", "evaluation")
    for item in corpus["records"]:
        paths = stores[item["store"]]
        record = Record(id=record_id(item["key"]), title=item["title"], kind=item["kind"], scope=record_scope(paths),
                        status=item.get("status", "active"), access="agent", created_at=created, updated_at=created,
                        tags=("evaluation",), sources=(source,), body=item["body"] + "\n")  # fmt: skip
        (paths.records / f"{record.id}.md").write_text(render_markdown(record), encoding="utf-8")
    for paths in stores.values():
        sync_store(paths, embedder)
    return stores


def _run_mode(corpus: dict[str, Any], stores: dict[str, StorePaths], mode: str, embedder: Embedder) -> dict[str, Any]:
    home = {record_id(item["key"]): item["store"] for item in corpus["records"]}
    active = {record_id(item["key"]) for item in corpus["records"] if item.get("status", "active") == "active"}
    per_query = []
    violations = leaks = 0
    for item in corpus["queries"]:
        view = [item["store"]] if item["store"] == "global" else [item["store"], "global"]
        hits = ranked_records([stores[name] for name in view], item["query"], mode, embedder)
        scored = score_question(hits, tuple(record_id(key) for key in item["expected"]), K)
        top = [hit.record_id for hit in hits[:K]]
        violations += any(home.get(found) not in view for found in top)
        leaks += any(found not in active for found in top)
        per_query.append({"query": item["query"], "store": item["store"], "rank": scored["rank"]})
    count = len(per_query)
    return {
        "recall_at_5": mean([float(bool(q["rank"] and q["rank"] <= K)) for q in per_query]),
        "mean_reciprocal_rank": mean([1.0 / q["rank"] if q["rank"] else 0.0 for q in per_query]),
        "scope_violation_rate": round(violations / count, 4),
        "inactive_or_superseded_leakage_rate": round(leaks / count, 4),
        "misses": [q for q in per_query if not q["rank"] or q["rank"] > K],
    }
