"""Retrieval quality on public data: LongMemEval-S (100-question dev subset) and BEIR SciFact.

Reads ../shared/bench (relative to the project root; `--data` overrides), checks every file
against SHA256SUMS first, builds real stores in a temporary directory and runs each query through
`stormbuffer.retrieval.search` in three modes: lexical, semantic (vector only) and hybrid, and
through `stormbuffer.retrieval.context` (row `context`: the blocks a hybrid context gives, without
a budget cut, so that the metrics show what focused context leaves out; at most 20 blocks, 100
for SciFact's recall@100). `returned` is the mean number of distinct records a mode returned.

LongMemEval-S: one store per question, one record per turn (kind fact; title = session date +
role; body = the turn; created at the session's date; source `conversation`, reference
`<label>#<turn>`, actor = role, observed at the session's date). A session's label is an opaque
hash of question id + session id; the label → session mapping stays in this script, because raw
evidence-session ids start with `answer_` and would leak the answer to lexical search. Queries
are asked at the question's date (`SearchOptions.now`), so that "four weeks ago" means what it
meant to the asker. Answerable questions only (`_abs` questions are skipped); `--stride N` takes
every Nth of them, `--skip N` leaves out the first N of those and `--questions N` keeps the first N
(deterministic subsets; `--skip` lets two processes embed two halves of the set at once). Metrics on
the ranked distinct records (at most 10): recall_any@{1,5,10} (some record of an evidence session in the
top k), fractional recall@{5,10} (share of evidence sessions covered), NDCG@10 and MRR over the
distinct sessions of those records (binary relevance), and at turn level, over the questions
whose turns carry `has_answer`: turn_recall_any@1 (the first record is an evidence turn) and
turn_recall@{5,10} (share of the evidence turns among the top k).

SciFact (test split, 300 queries): one record per abstract (title → title, text → body).
NDCG@{1,5,10} (graded by qrels) and Recall@{10,100} over distinct records.

`--lexical-weights 0.3,0.7` also runs hybrid with other fusion weights of the lexical side (rows
`hybrid@0.3`, …), which is how the default weight was checked; `--lexical-only` runs lexical mode
without the model (chunks are then cut by the conservative token estimate). `--dump FILE` writes,
per query, the top 10 distinct records of every mode with their labels, scores and match reasons
(JSON lines), to study where the modes disagree.

Vectors come from the real model; a benchmark-side cache keyed by text avoids embedding the same
text twice across runs (bench/embedding_cache.py). Prints a table, writes bench/results/quality.json
(or `--out`).

Usage: python bench/quality.py [--data DIR] [--work DIR] [--only longmemeval|scifact] [--questions N]
       [--stride N] [--skip N] [--lexical-weights W,...] [--lexical-only] [--dump FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from embedding_cache import CachingEmbedder  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.core.codec import render_markdown
from stormbuffer.core.records import Record, Source
from stormbuffer.core.stores import PlatformDirs, StorePaths, View, initialize_store, record_scope, resolve_store
from stormbuffer.core.timestamps import Timestamp
from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.evaluation import mean, recall_at, reciprocal_rank
from stormbuffer.index.sync import sync_store
from stormbuffer.retrieval import ContextOptions, SearchHit, SearchOptions, context, fusion, search

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "quality.json"
MODES = ("lexical", "semantic", "hybrid")
VARIANTS: dict[str, tuple[str, float | None]] = {mode: (mode, None) for mode in MODES}  # name -> (mode, fusion weight)
VARIANTS["context"] = ("hybrid", None)  # the blocks `context` gives (no budget cut): hybrid less the weak hits
UNLIMITED_BUDGET = 10**9
CREATED = Timestamp.parse("2024-01-01T00:00:00Z")
NAMESPACE = uuid.UUID("6c1e5a4e-8f7b-4c1d-9a51-3f2b0c9d7e11")


@contextmanager
def progress_bar(label: str, total: int) -> Iterator[Callable[[int], None]]:
    if not sys.stderr.isatty():
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bars:
        task = bars.add_task(label, total=total)
        yield lambda done: bars.update(task, completed=done)


def new_store(base: Path) -> StorePaths:
    (base / "project").mkdir(parents=True, exist_ok=True)
    paths = resolve_store(View.PROJECT, base / "project", PlatformDirs(base / "data", base / "cache"))
    initialize_store(paths)
    return paths


def write_records(paths: StorePaths, records: Iterable[Record]) -> None:
    for record in records:
        (paths.records / f"{record.id}.md").write_text(render_markdown(record), encoding="utf-8")


def record(key: str, scope: str, title: str, body: str, source: Source, created: Timestamp = CREATED) -> Record:
    title = " ".join(title.split())[:200].strip() or "untitled"
    return Record(id=str(uuid.uuid5(NAMESPACE, key)), title=title, kind="fact", scope=scope, status="active",
                  access="agent", created_at=created, updated_at=created, sources=(source,), body=body)  # fmt: skip


def ranked_hits(paths: StorePaths, query: str, variant: str, embedder: Any, depth: int,
                now: datetime | None = None) -> list[SearchHit]:  # fmt: skip
    """The first hit of each distinct record, best first (lexical mode can return several chunks of one record)."""
    mode, weight = VARIANTS[variant]
    default = fusion.LEXICAL_WEIGHT
    fusion.LEXICAL_WEIGHT = default if weight is None else weight
    try:
        if variant == "context":
            options = ContextOptions(UNLIMITED_BUDGET, SearchOptions(limit=max(depth, 20), mode=mode, now=now))
            hits = [block.hit for block in context([paths], query, options, embedder=embedder).blocks]
        else:
            hits = search([paths], query, SearchOptions(limit=100, mode=mode, now=now), embedder=embedder)
    finally:
        fusion.LEXICAL_WEIGHT = default
    first: dict[str, SearchHit] = {}
    for hit in hits:
        first.setdefault(hit.record_id, hit)
    return list(first.values())[:depth]


def ndcg(ranked: list[str], gains: dict[str, float], k: int) -> float:
    dcg = sum(gains.get(item, 0.0) / math.log2(rank + 2) for rank, item in enumerate(ranked[:k]))
    ideal = sorted(gains.values(), reverse=True)[:k]
    best = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
    return dcg / best if best else 0.0


# ---- LongMemEval ---------------------------------------------------------------------------------


def longmemeval(data: Path, work: Path, embedder: Any, questions: int | None, stride: int, skip: int,
                dump: Dumper) -> dict[str, Any]:  # fmt: skip
    items = json.loads(gzip.decompress((data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes()))
    answerable = [item for item in items if not item["question_id"].endswith("_abs")][::stride][skip:][:questions]
    scores: dict[str, dict[str, list[float]]] = {variant: {} for variant in VARIANTS}
    started = time.perf_counter()
    with progress_bar("LongMemEval questions", len(answerable)) as bar:
        for done, item in enumerate(answerable, 1):
            paths = new_store(work / "longmemeval" / item["question_id"])
            session_of, evidence_turns = build_longmemeval_store(paths, item)
            sync_store(paths, embedder)
            evidence = set(item["answer_session_ids"])
            asked = datetime.fromisoformat(session_time(item["question_date"]).render())
            lists = {}
            for variant in VARIANTS:
                lists[variant] = ranked_hits(paths, item["question"], variant, embedder, 10, asked)
                ranked = [hit.record_id for hit in lists[variant]]
                metrics = longmemeval_metrics(ranked, session_of, evidence, evidence_turns) | {"returned": len(ranked)}
                for name, value in metrics.items():
                    scores[variant].setdefault(name, []).append(value)
            dump(
                {"question_id": item["question_id"], "type": item["question_type"], "query": item["question"]},
                lists,
                {
                    r: {"session": s, "evidence": s in evidence, "evidence_turn": r in evidence_turns}
                    for r, s in session_of.items()
                },  # fmt: skip
            )
            bar(done)
    return {
        "questions": len(answerable),
        "subset": (f"every {stride}th answerable question" if stride > 1 else "every answerable question")
        + (f", the first {skip} left out" if skip else ""),
        "question_ids": [item["question_id"] for item in answerable],
        "questions_with_turn_labels": len(next(iter(scores.values())).get("turn_recall@10", [])),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": {variant: {name: mean(values) for name, values in scores[variant].items()} for variant in VARIANTS},
    }


def build_longmemeval_store(paths: StorePaths, item: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    """Write one record per turn, created and observed at its session's date; returns record id →
    session id and the ids of the evidence turns (`has_answer`), both kept outside the store."""
    scope = record_scope(paths)
    session_of: dict[str, str] = {}
    evidence_turns: set[str] = set()
    records = []
    for session_id, date, turns in zip(item["haystack_session_ids"], item["haystack_dates"],
                                       item["haystack_sessions"], strict=True):  # fmt: skip
        label = hashlib.sha256(f"{item['question_id']}\n{session_id}".encode()).hexdigest()[:12]
        when = session_time(date)
        for number, turn in enumerate(turns):
            if not turn["content"].strip():
                continue
            source = Source("conversation", f"{label}#{number}", turn["role"], observed_at=when)
            made = record(f"{label}#{number}", scope, f"{date} {turn['role']}", turn["content"], source, when)
            session_of[made.id] = session_id
            if turn.get("has_answer"):
                evidence_turns.add(made.id)
            records.append(made)
    write_records(paths, records)
    return session_of, evidence_turns


def session_time(date: str) -> Timestamp:
    """A LongMemEval date such as `2023/08/11 (Fri) 15:58`, as UTC."""
    day, _weekday, clock = date.split()
    return Timestamp.parse(f"{day.replace('/', '-')}T{clock}:00Z")


def longmemeval_metrics(ranked: list[str], session_of: dict[str, str], evidence: set[str],
                        evidence_turns: set[str]) -> dict[str, float]:  # fmt: skip
    """One question's metrics for its ranked record ids: session level, and turn level when turns are labelled."""
    metrics = session_metrics([session_of[record] for record in ranked], evidence)
    return metrics | turn_metrics(ranked, evidence_turns) if evidence_turns else metrics


def session_metrics(sessions: list[str], evidence: set[str]) -> dict[str, float]:
    distinct = list(dict.fromkeys(sessions))
    metrics = {f"recall_any@{k}": float(any(s in evidence for s in sessions[:k])) for k in (1, 5, 10)}
    metrics |= {f"recall@{k}": recall_at(sessions, evidence, k) for k in (5, 10)}
    metrics["ndcg@10"] = ndcg(distinct, dict.fromkeys(evidence, 1.0), 10)
    metrics["mrr"] = reciprocal_rank(distinct, evidence)
    return metrics


def turn_metrics(ranked: list[str], evidence_turns: set[str]) -> dict[str, float]:
    """Share of the evidence turns among the top k records, and whether the first record is one."""
    metrics = {"turn_recall_any@1": float(bool(ranked) and ranked[0] in evidence_turns)}
    metrics |= {f"turn_recall@{k}": recall_at(ranked, evidence_turns, k) for k in (5, 10)}
    return metrics


# ---- SciFact ---------------------------------------------------------------------------------------


def scifact(data: Path, work: Path, embedder: Any, dump: Dumper) -> dict[str, Any]:
    folder = data / "scifact"
    corpus = [json.loads(line) for line in gzip.decompress((folder / "corpus.jsonl.gz").read_bytes()).splitlines()]
    queries = {str(q["_id"]): q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qrels = read_qrels(folder)
    paths = new_store(work / "scifact")
    scope = record_scope(paths)
    doc_of: dict[str, str] = {}
    records = []
    for doc in corpus:
        doc_id = str(doc["_id"])
        body = doc["text"].strip() or doc["title"].strip() or doc_id
        made = record(f"scifact:{doc_id}", scope, doc["title"] or doc_id, body + "\n",
                      Source("document", f"scifact:{doc_id}", "dataset"))  # fmt: skip
        doc_of[made.id] = doc_id
        records.append(made)
    write_records(paths, records)
    started = time.perf_counter()
    with progress_bar("SciFact: indexing and embedding", 1) as bar:
        sync_store(paths, embedder)
        bar(1)
    index_seconds = time.perf_counter() - started
    scores: dict[str, dict[str, list[float]]] = {variant: {} for variant in VARIANTS}
    with progress_bar("SciFact queries", len(qrels)) as bar:
        for done, (query_id, relevant) in enumerate(sorted(qrels.items()), 1):
            lists = {variant: ranked_hits(paths, queries[query_id], variant, embedder, 100) for variant in VARIANTS}
            top = {variant: hits[:10] for variant, hits in lists.items()}
            grades = {hit.record_id: {"doc": doc_of[hit.record_id], "grade": relevant.get(doc_of[hit.record_id], 0.0)}
                      for hits in top.values() for hit in hits}  # fmt: skip
            dump({"query_id": query_id, "query": queries[query_id]}, top, grades)
            for variant, hits in lists.items():
                metrics = scifact_metrics([doc_of[hit.record_id] for hit in hits], relevant) | {"returned": len(hits)}
                for name, value in metrics.items():
                    scores[variant].setdefault(name, []).append(value)
            bar(done)
    return {
        "documents": len(corpus),
        "queries": len(qrels),
        "index_seconds": round(index_seconds, 1),
        "metrics": {variant: {name: mean(values) for name, values in scores[variant].items()} for variant in VARIANTS},
    }


def read_qrels(folder: Path) -> dict[str, dict[str, float]]:
    """SciFact's test judgements: query id → document id → grade."""
    qrels: dict[str, dict[str, float]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        query_id, doc_id, score = line.split("\t")
        qrels.setdefault(query_id, {})[doc_id] = float(score)
    return qrels


def scifact_metrics(ranked: list[str], relevant: dict[str, float]) -> dict[str, float]:
    """One query's NDCG@{1,5,10} and Recall@{10,100} for its ranked document ids."""
    metrics = {f"ndcg@{k}": ndcg(ranked, relevant, k) for k in (1, 5, 10)}
    return metrics | {f"recall@{k}": recall_at(ranked, relevant, k) for k in (10, 100)}


class Dumper:
    """Writes each query's ranked lists, per variant, as JSON lines (`--dump`); does nothing without a file."""

    def __init__(self, path: Path | None) -> None:
        self.file = path.open("w", encoding="utf-8") if path else None

    def __call__(self, query: dict[str, Any], lists: dict[str, list[SearchHit]],
                 labels: dict[str, dict[str, Any]]) -> None:  # fmt: skip
        """`labels`: record id → what the data says about it (its session, whether it is evidence, …)."""
        if self.file is None:
            return
        ranked = {variant: [{"record": hit.record_id, **labels[hit.record_id], "score": round(hit.score, 4),
                             "reasons": hit.match_reasons, "text": hit.text[:160]} for hit in hits]
                  for variant, hits in lists.items()}  # fmt: skip
        self.file.write(json.dumps(query | {"ranked": ranked}) + "\n")
        self.file.flush()


def table(results: dict[str, Any]) -> str:
    lines = []
    for dataset, result in results.items():
        metrics = result["metrics"]
        names = list(next(iter(metrics.values())))
        width = max(14, *(len(variant) + 2 for variant in metrics))
        lines.append(
            f"{dataset}: "
            + ", ".join(f"{k}={v}" for k, v in result.items() if k not in ("metrics", "generated_at", "question_ids"))
        )
        lines.append(f"{'mode':<{width}}" + "".join(f"{name:>18}" for name in names))
        for variant in metrics:
            lines.append(f"{variant:<{width}}" + "".join(f"{metrics[variant][name]:>18.4f}" for name in names))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, help="directory for stores and the embedding cache")
    parser.add_argument("--only", choices=("longmemeval", "scifact"))
    parser.add_argument("--questions", type=int, help="use only the first N answerable LongMemEval questions")
    parser.add_argument(
        "--stride", type=int, default=1, help="use every Nth answerable LongMemEval question (a deterministic subset)"
    )
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N questions of that selection")
    parser.add_argument("--out", type=Path, default=RESULTS, help="result file (default bench/results/quality.json)")
    parser.add_argument("--lexical-weights", default="",
                        help="also run hybrid with these fusion weights of the lexical side, e.g. 0.3,0.7")  # fmt: skip
    parser.add_argument("--dump", type=Path, help="write every query's ranked lists per mode to this JSON-lines file")
    parser.add_argument("--lexical-only", action="store_true",
                        help="lexical mode only, no model (chunks cut by the conservative token estimate)")  # fmt: skip
    args = parser.parse_args()
    if args.lexical_only:
        del VARIANTS["semantic"], VARIANTS["hybrid"]
    for weight in filter(None, args.lexical_weights.split(",")):
        VARIANTS[f"hybrid@{float(weight):g}"] = ("hybrid", float(weight))
    require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-quality-"))
    cache_dir = work / "model-cache"
    acquire_model(cache_dir)
    embedder = None if args.lexical_only else CachingEmbedder(load_embedder(cache_dir), work / "embeddings.sqlite3")
    results: dict[str, Any] = {}
    dump = Dumper(args.dump)
    if args.only in (None, "scifact"):
        results["scifact"] = scifact(args.data, work / f"run-{os.getpid()}", embedder, dump)
    if args.only in (None, "longmemeval"):
        run = work / f"run-{os.getpid()}"
        subset = (args.questions, max(args.stride, 1), max(args.skip, 0))
        results["longmemeval"] = longmemeval(args.data, run, embedder, *subset, dump)
    print(table(results))
    for dataset in results:
        results[dataset]["generated_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    earlier = json.loads(args.out.read_text())["results"] if args.out.is_file() else {}
    report = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "model": {"id": embedder.model_id, "version": embedder.model_version} if embedder else None,
        "results": earlier | results,  # a run of one dataset keeps the other's latest results
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
