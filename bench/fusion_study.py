"""Fusion study: capture what hybrid fusion receives once, then replay other fusions in seconds.

`capture` runs `quality.py`'s LongMemEval-S or SciFact pass (same stores, same real model, same
embedding cache) and saves, per query, the exact inputs of `fusion.fuse` (the lexical and vector
candidate lists with their BM25 scores and similarities, the scope and the time reference), the
inverse document frequency of each term the lexical side scored (both sets search one store per
query) and the data's labels. `units` embeds, for every captured LongMemEval-S candidate chunk of more than one
sentence, its sentences (short ones merged until a piece has `--min-words` words), and saves each
chunk's best sentence similarity to the query: what vectors per sentence, rather than per chunk,
would tell fusion. `replay` runs today's `fusion.fuse` and a fixed set of alternatives on the
captured inputs and reports the same metrics as `quality.py` (hybrid only; `today` reproduces its
hybrid row).

The capture is a local pickle of this machine's run, not a result; the replay's table is saved to
bench/results/fusion_study.json (or `--out`). Candidates are fixed by the capture, so a variant that
would also change which chunks are retrieved is measured on today's candidates only.

Usage: python bench/fusion_study.py capture --only longmemeval|scifact --work DIR --capture FILE
       python bench/fusion_study.py units --capture FILE --work DIR [--min-words N] --out FILE
       python bench/fusion_study.py replay --capture FILE [--units FILE ...] [--scifact FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import quality  # noqa: E402
from embedding_cache import CachingEmbedder  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index import postings
from stormbuffer.index.chunking import own_sentences
from stormbuffer.retrieval import SearchHit, fusion

RESULTS = Path(__file__).parent / "results" / "fusion_study.json"
Inputs = tuple[list[SearchHit], list[SearchHit], str | None, int, Any]
Fuse = Callable[..., list[SearchHit]]


def capture(args: argparse.Namespace) -> None:
    """Run one dataset of quality.py with a spy on `fuse`; save its inputs and labels per query."""
    search_module = sys.modules["stormbuffer.retrieval.search"]
    real_fuse, real_rank, seen, idfs, queries = search_module.fuse, postings.rank, [], [], []

    def spy(*inputs: Any) -> list[SearchHit]:
        seen.append(inputs)
        return real_fuse(*inputs)

    def idf_spy(conn: Any, terms: Any, stats: postings.Stats, limit: int) -> Any:
        idfs.append(scored_terms(conn, list(terms), stats))
        return real_rank(conn, terms, stats, limit)

    def keep(query: dict[str, Any], lists: dict[str, list[SearchHit]], labels: dict[str, Any]) -> None:
        queries.append({"query": query, "inputs": seen[-1], "labels": labels, "idf": idfs[-1]})

    search_module.fuse, postings.rank = spy, idf_spy
    quality.Dumper = lambda path: keep  # type: ignore[assignment,misc,return-value]
    output = args.capture.with_suffix(".quality.json")
    sys.argv = ["quality.py", "--only", args.only, "--work", str(args.work), "--out", str(output)]
    quality.main()
    args.capture.write_bytes(pickle.dumps({"dataset": args.only, "queries": queries}))
    print(f"captured {len(queries)} queries in {args.capture}")


def scored_terms(conn: Any, terms: list[str], stats: postings.Stats) -> dict[str, tuple[float, bool]]:
    """Each query term `postings.rank` scores → (its idf, whether it matches only as a prefix)."""
    lookup, distinct = postings.SqliteTerms(conn), list(dict.fromkeys(terms))
    matched = {
        term: found
        for term, own in zip(distinct, lookup.own(distinct), strict=True)
        if (found := postings._matches(lookup, term, own)).size
    }
    chosen = {term: found for term, found in matched.items() if 2 * found.size < stats.chunks} or matched
    return {term: (max(postings.IDF_FLOOR, math.log((stats.chunks - found.size + 0.5) / (found.size + 0.5))),
                   conn.execute("SELECT 1 FROM postings WHERE term = ?", (term,)).fetchone() is None)
            for term, found in chosen.items()}  # fmt: skip


def units(args: argparse.Namespace) -> None:
    """Each captured candidate chunk's best sentence similarity to its query (chunks of one sentence left out)."""
    captured = pickle.loads(args.capture.read_bytes())
    acquire_model(args.work / "model-cache")
    embedder = CachingEmbedder(load_embedder(args.work / "model-cache"), args.work / "embeddings.sqlite3")
    best: list[dict[int, float]] = []
    with quality.progress_bar("Sentences of candidate chunks", len(captured["queries"])) as bar:
        for done, query in enumerate(captured["queries"], 1):
            lexical, semantic = query["inputs"][:2]
            texts = {hit.chunk: hit.text for hit in lexical + semantic}
            owners, pieces = [], []
            for chunk, text in texts.items():
                if cut := own_sentences(text, args.min_words):
                    owners += [chunk] * len(cut)
                    pieces += cut
            scores: dict[int, float] = {}
            if pieces:
                similarities = embedder.embed(pieces) @ embedder.embed([query["query"]["query"]])[0]
                for chunk, similarity in zip(owners, similarities.tolist(), strict=True):
                    scores[chunk] = max(scores.get(chunk, -1.0), similarity)
            best.append(scores)
            bar(done)
    args.out.write_bytes(pickle.dumps({"min_words": args.min_words, "best": best}))
    print(f"saved {args.out}")


def with_sentences(inputs: Inputs, best: dict[int, float], share: float) -> Inputs:
    """The inputs with each vector hit's similarity raised by `share` of the way to its chunk's best sentence's."""
    lexical, semantic, *rest = inputs
    raised = []
    for hit in semantic:
        similarity = 1.0 - (hit.vector_distance or 0.0) ** 2 / 2.0
        similarity += share * max(0.0, best.get(hit.chunk, -1.0) - similarity)
        raised.append(replace(hit, vector_distance=math.sqrt(max(0.0, 2.0 - 2.0 * similarity))))
    raised.sort(key=lambda hit: hit.vector_distance or 0.0)
    return (lexical, raised, *rest)  # type: ignore[return-value]


def floored(values: list[float]) -> list[float]:
    """Best → 1 and the candidates' mean → 0 (below the mean: 0)."""
    best, floor = max(values, default=0.0), statistics.fmean(values) if values else 0.0
    return [max(0.0, (value - floor) / (best - floor)) if best > floor else float(best > 0) for value in values]


def absolute_vector(hits: list[SearchHit]) -> list[float]:
    """Cosine similarity itself (0 when negative), not over the best candidate's."""
    return [max(0.0, 1.0 - (hit.vector_distance or 0.0) ** 2 / 2.0) for hit in hits]


def mean_floor_lexical(hits: list[SearchHit]) -> list[float]:
    parts, by_scope = [0.0] * len(hits), {}
    for position, hit in enumerate(hits):
        by_scope.setdefault(hit.scope, []).append(position)
    for positions in by_scope.values():
        for position, part in zip(positions, floored([hits[p].bm25 for p in positions]), strict=True):
            parts[position] = part
    return parts


def mean_floor_vector(hits: list[SearchHit]) -> list[float]:
    return floored(absolute_vector(hits))


CONVEX, LEXICAL_PARTS, VECTOR_PARTS = fusion._combined, fusion._lexical_parts, fusion._vector_parts  # today's


def patched(**names: Any) -> Fuse:
    """`fusion.fuse` with some of its module's names replaced for the call (a weight, a side's
    normalisation `_lexical_parts` / `_vector_parts`, the combination `_combined`)."""

    def fuse(*inputs: Any) -> list[SearchHit]:
        saved = {name: getattr(fusion, name) for name in names}
        for name, value in names.items():
            setattr(fusion, name, value)
        try:
            return fusion.fuse(*inputs)
        finally:
            for name, value in saved.items():
                setattr(fusion, name, value)

    return fuse


def variant(weight: float = fusion.LEXICAL_WEIGHT, mean_floor: bool = False) -> Fuse:
    """`fusion.fuse` with another lexical weight and, optionally, the mean as both sides' floor."""
    floors = {"_lexical_parts": mean_floor_lexical, "_vector_parts": mean_floor_vector} if mean_floor else {}
    return patched(LEXICAL_WEIGHT=weight, **floors)


REPLAYED: dict[str, Any] = {}  # the query being replayed (its terms' idf)


def over_ceiling(hits: list[SearchHit]) -> list[float]:
    """BM25 over the most any chunk could score for the query's terms (each at full saturation,
    idf · (k1 + 1)) instead of over the best candidate's: how much of the query a chunk matches."""
    top = sum(idf for idf, _ in REPLAYED["query"]["idf"].values()) * (postings.K1 + 1.0)
    return [min(1.0, hit.bm25 / top) if top > 0 else 0.0 for hit in hits]


def matches(word: str, term: str, prefix: bool) -> bool:
    """Whether a text's term counts for a query term (as `postings.rank` matches: whole, or as a prefix)."""
    return word.startswith(term) if prefix else word == term


def sentence_bm25(text: str, idf: dict[str, tuple[float, bool]], average: float) -> float:
    """BM25 of a chunk's best sentence (20-word pieces, as its sentence vectors), 0 for one piece."""
    best = 0.0
    for sentence in own_sentences(text):
        found = postings.terms(sentence)
        score = 0.0
        for term, (weight, prefix) in idf.items():
            count = sum(matches(word, term, prefix) for word in found)
            norm = postings.K1 * (1.0 - postings.B + postings.B * len(found) / average)
            score += weight * count * (postings.K1 + 1.0) / (count + norm) if count else 0.0
        best = max(best, score)
    return best


def toward_sentences(share: float) -> Callable[[list[SearchHit]], list[float]]:
    """Each lexical part raised `share` of the way to its chunk's best sentence's BM25, over the
    best of those among the candidates: what the vector side does with sentence vectors."""

    def parts(hits: list[SearchHit]) -> list[float]:
        pieces = [len(postings.terms(piece)) for hit in hits for piece in own_sentences(hit.text)]
        average = statistics.fmean(pieces) if pieces else 1.0
        best = [sentence_bm25(hit.text, REPLAYED["query"]["idf"], average) for hit in hits]
        top = max(best, default=0.0)
        return [own + share * max(0.0, (sentence / top if top > 0 else 0.0) - own)
                for own, sentence in zip(LEXICAL_PARTS(hits), best, strict=True)]  # fmt: skip

    return parts


def min_distance(text: str, idf: dict[str, tuple[float, bool]]) -> int:
    """The fewest positions between two different query terms in `text` (MinDist, Tao & Zhai 2007);
    the text's length when fewer than two of the terms occur in it."""
    found = postings.terms(text)
    where = sorted((position, term) for position, word in enumerate(found) for term, (_, prefix) in idf.items()
                   if matches(word, term, prefix))  # fmt: skip
    if len({term for _, term in where}) < 2:
        return len(found)
    return min(b - a for (a, first), (b, second) in zip(where, where[1:], strict=False) if first != second)


def with_proximity(alpha: float, scale: float) -> Callable[[list[SearchHit]], list[float]]:
    """Today's lexical parts of BM25 plus `scale` · log(alpha + e^−MinDist), Tao & Zhai's proximity
    term: chunks whose query terms stand close together gain, scattered matches lose."""

    def parts(hits: list[SearchHit]) -> list[float]:
        idf = REPLAYED["query"]["idf"]
        return LEXICAL_PARTS([replace(hit, bm25=max(0.0, hit.bm25 + scale * math.log(
            alpha + math.exp(-min_distance(hit.text, idf))))) for hit in hits])  # fmt: skip

    return parts


def record_parts(hits: list[SearchHit], parts: list[float], depth: int = 10) -> list[float]:
    """Each record's best part, best first, at most `depth` records."""
    best: dict[str, float] = {}
    for hit, part in zip(hits, parts, strict=True):
        best[hit.record_id] = max(best.get(hit.record_id, 0.0), part)
    return sorted(best.values(), reverse=True)[:depth]


def margin(parts: list[float]) -> float:
    """How far the first record leads the second (parts are over the best, so 1 − the second's)."""
    return parts[0] - parts[1] if len(parts) > 1 else float(bool(parts))


def spread(parts: list[float]) -> float:
    """The standard deviation of the top records' parts (as NQC, a query performance predictor)."""
    return statistics.pstdev(parts) if len(parts) > 1 else 0.0


def decisive(measure: Callable[[list[float]], float], shrink: float) -> Fuse:
    """Per query, each side weighted by how decisive its own ranking is (`measure` of its top records'
    parts), moved `shrink` of the way back to today's equal weights."""

    def fuse(lexical: list[SearchHit], semantic: list[SearchHit], *rest: Any) -> list[SearchHit]:
        lexical_side = measure(record_parts(lexical, LEXICAL_PARTS(lexical)))
        total = lexical_side + measure(record_parts(semantic, VECTOR_PARTS(semantic)))
        weight = lexical_side / total if total > 0 else fusion.LEXICAL_WEIGHT
        weight = shrink * fusion.LEXICAL_WEIGHT + (1.0 - shrink) * weight
        return patched(LEXICAL_WEIGHT=weight)(lexical, semantic, *rest)

    return fuse


VARIANTS: dict[str, tuple[Fuse, float]] = {  # name -> (fusion, share of the way to the best sentence)
    "today": (fusion.fuse, 0.0),
    "geometric mean": (patched(_combined=lambda lexical, vector: math.sqrt(lexical * vector)), 0.0),
    "CombMNZ": (
        patched(_combined=lambda lexical, vector: CONVEX(lexical, vector) * ((lexical > 0) + (vector > 0))),
        0.0,
    ),
    "agreement bonus": (
        patched(_combined=lambda lexical, vector: CONVEX(lexical, vector) + 0.25 * min(lexical, vector)),
        0.0,
    ),
    "lexical over its ceiling": (patched(_lexical_parts=over_ceiling), 0.0),
    "vector absolute": (patched(_vector_parts=absolute_vector), 0.0),
    "lexical over its ceiling, vector absolute": (
        patched(_lexical_parts=over_ceiling, _vector_parts=absolute_vector),
        0.0,
    ),
    "lexical halfway to sentences' BM25": (patched(_lexical_parts=toward_sentences(0.5)), 0.0),
    "BM25 + proximity (α 0.3)": (patched(_lexical_parts=with_proximity(0.3, 1.0)), 0.0),
    "BM25 + 2 × proximity (α 0.3)": (patched(_lexical_parts=with_proximity(0.3, 2.0)), 0.0),
    "BM25 + 4 × proximity (α 0.3)": (patched(_lexical_parts=with_proximity(0.3, 4.0)), 0.0),
    "weights by each side's lead": (decisive(margin, 0.0), 0.0),
    "weights by each side's lead, halfway": (decisive(margin, 0.5), 0.0),
    "weights by each side's spread": (decisive(spread, 0.0), 0.0),
    "weights by each side's spread, halfway": (decisive(spread, 0.5), 0.0),
    "mean floor": (variant(mean_floor=True), 0.0),
    "lexical weight 0.55": (variant(0.55), 0.0),
    "mean floor, lexical weight 0.55": (variant(0.55, True), 0.0),
    "vector side only": (lambda lexical, semantic, *rest: semantic, 0.0),
    "sentences": (fusion.fuse, 1.0),
    "halfway to sentences": (fusion.fuse, 0.5),
    "sentences, mean floor": (variant(mean_floor=True), 1.0),
    "sentences, lexical weight 0.55": (variant(0.55), 1.0),
    "sentences, vector side only": (lambda lexical, semantic, *rest: semantic, 1.0),
}


def first_of_each(hits: list[SearchHit], depth: int) -> list[str]:
    return list(dict.fromkeys(hit.record_id for hit in hits))[:depth]


def averaged(per_query: list[dict[str, float]]) -> dict[str, float]:
    names = dict.fromkeys(name for metrics in per_query for name in metrics)
    return {name: quality.mean([metrics[name] for metrics in per_query if name in metrics]) for name in names}


def longmemeval_metrics(queries: list[dict[str, Any]], fuse: Fuse, best: list[dict[int, float]] | None = None,
                        share: float = 0.0) -> dict[str, float]:  # fmt: skip
    per_query = []
    for position, query in enumerate(queries):
        inputs = with_sentences(query["inputs"], best[position], share) if best is not None else query["inputs"]
        labels = query["labels"]
        session_of = {record: label["session"] for record, label in labels.items()}
        evidence = {label["session"] for label in labels.values() if label["evidence"]}
        turns = {record for record, label in labels.items() if label["evidence_turn"]}
        REPLAYED["query"] = query
        per_query.append(quality.longmemeval_metrics(first_of_each(fuse(*inputs), 10), session_of, evidence, turns))
    return averaged(per_query)


def scifact_metrics(queries: list[dict[str, Any]], fuse: Fuse, data: Path) -> dict[str, float]:
    """Judgements keyed by record id (the capture labels only the records each mode put in its top 10)."""
    qrels = {query_id: {record_id(doc_id): grade for doc_id, grade in judged.items()}
             for query_id, judged in quality.read_qrels(data / "scifact").items()}  # fmt: skip
    per_query = []
    for query in queries:
        REPLAYED["query"] = query
        ranked = first_of_each(fuse(*query["inputs"]), 100)
        per_query.append(quality.scifact_metrics(ranked, qrels[query["query"]["query_id"]]))
    return averaged(per_query)


def record_id(doc_id: str) -> str:
    """The id `quality.py` gives the record of a SciFact document."""
    return str(uuid.uuid5(quality.NAMESPACE, f"scifact:{doc_id}"))


def replay(args: argparse.Namespace) -> None:
    """Every variant on the captured inputs; prints the table and saves it."""
    captured = pickle.loads(args.capture.read_bytes())["queries"]
    metrics = {name: longmemeval_metrics(captured, fuse) for name, (fuse, share) in VARIANTS.items() if not share}
    for path in args.units:
        sentence_units = pickle.loads(path.read_bytes())
        for name, (fuse, share) in VARIANTS.items():
            if share:
                label = f"{name} (>= {sentence_units['min_words']} words)"
                metrics[label] = longmemeval_metrics(captured, fuse, sentence_units["best"], share)
    results: dict[str, Any] = {"longmemeval": {"questions": len(captured), "metrics": metrics}}
    if args.scifact:
        quality.require_data(args.data)
        scifact = pickle.loads(args.scifact.read_bytes())["queries"]
        results["scifact"] = {"queries": len(scifact), "metrics": {
            name: scifact_metrics(scifact, fuse, args.data) for name, (fuse, share) in VARIANTS.items()
            if not share}}  # fmt: skip
    print(quality.table(results))
    report = {"generated_at": datetime.now(UTC).isoformat(timespec="seconds"), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = parser.add_subparsers(dest="step", required=True)
    step = steps.add_parser("capture")
    step.add_argument("--only", choices=("longmemeval", "scifact"), required=True)
    step.add_argument("--work", type=Path, required=True, help="quality.py's work directory (embedding cache)")
    step.add_argument("--capture", type=Path, required=True)
    step = steps.add_parser("units")
    step.add_argument("--capture", type=Path, required=True, help="a LongMemEval-S capture")
    step.add_argument("--work", type=Path, required=True)
    step.add_argument("--min-words", type=int, default=20)
    step.add_argument("--out", type=Path, required=True)
    step = steps.add_parser("replay")
    step.add_argument("--capture", type=Path, required=True, help="a LongMemEval-S capture")
    step.add_argument("--units", type=Path, nargs="*", default=[], help="sentence similarities (units step)")
    step.add_argument("--scifact", type=Path, help="a SciFact capture")
    step.add_argument("--data", type=Path, default=quality.DEFAULT_DATA)
    step.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    {"capture": capture, "units": units, "replay": replay}[args.step](args)


if __name__ == "__main__":
    main()
