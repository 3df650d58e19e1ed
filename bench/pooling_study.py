"""How a chunk's sentence vectors are best pooled from its one model pass, on a SciFact subsample.

Every variant is computed from the same pass over each chunk (the token states the graph gives
beside its pooled vector), so the model runs once per chunk whatever is compared:

- `tokens`: the mean of the states of the sentence's own tokens, L2-normalised (what
  `Embedder.embed_spans` does today);
- `tokens+cls+sep`: the same mean with the pass's [CLS] and [SEP] states added, as the model's own
  mean pooling over the attention mask includes them for a sentence embedded alone;
- `window8`: the sentence's tokens and up to 8 tokens on each side of it (a little context);
- `alone`: each sentence embedded again on its own (the model's own pooling; a second pass over
  the text, which is what pooling saves);
- `chunks only`: no sentence vectors at all.

Scoring is the semantic side as `retrieval/semantic.py` ranks: a chunk's similarity moves halfway
towards its closest sentence's when that is higher, a document scores its best chunk. Unlike a real
search it applies that to every chunk, not only to the nearest chunks and the lexical candidates, so
the differences show the sentence vectors' own effect. Reported: NDCG@{1,5,10} and Recall@{10,100}
over a seeded sample of `--queries` of the 300 test queries, on a corpus of their judged documents
plus seeded random others up to `--documents` (the whole corpus is 5,183 documents: a subsample
keeps a run within minutes on two cores).

Prints a table and writes bench/results/pooling_study.json (or `--out`).

Usage: python bench/pooling_study.py [--data DIR] [--queries N] [--documents N] [--out FILE]
"""

from __future__ import annotations

import argparse
import atexit
import gzip
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from machine import machine  # noqa: E402
from quality import read_qrels, scifact_metrics  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.embedding.embedder import _batches
from stormbuffer.index.chunking import chunk_body, sentence_spans

RESULTS = Path(__file__).parent / "results" / "pooling_study.json"
WINDOW = 8  # tokens of context on each side for `window8`
VARIANTS = ("chunks only", "tokens", "tokens+cls+sep", "window8", "alone")
SENTENCE_PULL = 0.5  # `retrieval/semantic.py`: halfway towards the closest sentence


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def pooled_variants(states: np.ndarray, offsets: list[tuple[int, int] | None],
                    spans: list[tuple[int, int]]) -> dict[str, np.ndarray]:  # fmt: skip
    """Each pooling variant's sentence vectors [len(spans), dimension] from one text's token states."""
    count = len(offsets)
    starts = np.array([o[0] if o else -1 for o in offsets])
    ends = np.array([o[1] if o else -1 for o in offsets])
    special = np.array([o is None for o in offsets])
    out = {name: np.zeros((len(spans), states.shape[-1]), dtype=np.float32) for name in VARIANTS[1:4]}
    for row, (start, end) in enumerate(spans):
        inside = (starts >= start) & (ends <= end) & ~special
        if not inside.any():
            continue
        out["tokens"][row] = states[:count][inside].mean(axis=0)
        out["tokens+cls+sep"][row] = states[:count][inside | special].mean(axis=0)
        first, last = np.flatnonzero(inside)[[0, -1]]
        window = np.zeros(count, dtype=bool)
        window[max(first - WINDOW, 0) : last + WINDOW + 1] = True
        out["window8"][row] = states[:count][window & ~special].mean(axis=0)
    return {name: unit(vectors) for name, vectors in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=150, help="seeded sample of the 300 test queries")
    parser.add_argument("--documents", type=int, default=800)
    parser.add_argument("--out", type=Path, default=RESULTS)
    options = parser.parse_args()
    require_data(options.data)
    started = time.monotonic()
    folder = options.data / "scifact"
    corpus = {str(d["_id"]): d for d in map(json.loads, gzip.decompress((folder / "corpus.jsonl.gz").read_bytes())
                                                 .splitlines())}  # fmt: skip
    queries = {str(q["_id"]): q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qrels = read_qrels(folder)
    qrels = {q: qrels[q] for q in sorted(random.Random(0).sample(sorted(qrels), min(options.queries, len(qrels))))}
    judged = sorted({doc for relevant in qrels.values() for doc in relevant if doc in corpus})
    others = sorted(set(corpus) - set(judged))
    chosen = judged + random.Random(0).sample(others, max(0, min(len(others), options.documents - len(judged))))
    cache = Path(tempfile.mkdtemp(prefix="sbuf-pooling-")) / "cache"
    atexit.register(shutil.rmtree, cache.parent, True)  # the model's copy goes with the run
    acquire_model(cache)
    embedder = load_embedder(cache)

    doc_of: list[str] = []  # per chunk
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    for doc_id in chosen:
        doc = corpus[doc_id]
        body = doc["text"].strip() or doc["title"].strip() or doc_id
        title = doc["title"] or doc_id
        for chunk in chunk_body(title, body + "\n", count_tokens=embedder.token_count):
            offset = len(chunk.embed_text) - len(chunk.text)
            own = sentence_spans(chunk.text)
            doc_of.append(doc_id)
            texts.append(chunk.embed_text)
            spans.append([(offset + s, offset + e) for s, e in own] if len(own) > 1 else [])
    print(f"{len(chosen)} documents, {len(texts)} chunks, {sum(map(len, spans))} sentences", file=sys.stderr)

    encoded = embedder._tokens.token_spans(texts)  # the pass `embed_spans` makes, with its states kept
    chunk_vectors = np.empty((len(texts), embedder.dimension), dtype=np.float32)
    sentences: dict[str, list[np.ndarray]] = {name: [np.empty(0)] * len(texts) for name in VARIANTS[1:]}
    order = sorted(range(len(texts)), key=lambda i: len(encoded[i][0]))
    pass_started = time.monotonic()
    for number, batch in enumerate(_batches(order, [len(ids) for ids, _ in encoded])):
        pooled, states = embedder._run([encoded[i][0] for i in batch], states=True)
        for row, index in enumerate(batch):
            chunk_vectors[index] = pooled[row]
            for name, vectors in pooled_variants(states[row], encoded[index][1], spans[index]).items():
                sentences[name][index] = vectors
        if number % 50 == 0:
            print(f"  pass: {number} batches", file=sys.stderr, flush=True)
    pass_s = time.monotonic() - pass_started
    alone_started = time.monotonic()
    pieces = [texts[i][s:e] for i in range(len(texts)) for s, e in spans[i]]
    alone = embedder.embed(pieces) if pieces else np.empty((0, embedder.dimension), dtype=np.float32)
    ends = np.cumsum([len(own) for own in spans])
    sentences["alone"] = [alone[end - len(own) : end] for own, end in zip(spans, ends, strict=True)]
    alone_s = time.monotonic() - alone_started

    ids = sorted(qrels)
    query_vectors = embedder.embed([queries[q] for q in ids])
    own = query_vectors @ chunk_vectors.T  # [queries, chunks]
    docs = np.array(doc_of)
    metrics: dict[str, dict[str, float]] = {}
    for name in VARIANTS:
        scores = own.copy()
        if name != "chunks only":
            for index, vectors in enumerate(sentences[name]):
                if len(vectors):
                    closest = (query_vectors @ vectors.T).max(axis=1)
                    raised = own[:, index] + SENTENCE_PULL * (closest - own[:, index])
                    scores[:, index] = np.maximum(own[:, index], raised)
        totals: dict[str, list[float]] = {}
        for row, query_id in enumerate(ids):
            best: dict[str, float] = {}
            for index in np.argsort(-scores[row], kind="stable"):
                best.setdefault(str(docs[index]), float(scores[row, index]))
                if len(best) >= 100:
                    break
            for metric, value in scifact_metrics(list(best), qrels[query_id]).items():
                totals.setdefault(metric, []).append(value)
        metrics[name] = {metric: round(float(np.mean(values)), 4) for metric, values in totals.items()}
    report: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "documents": len(chosen),
        "judged_documents": len(judged),
        "chunks": len(texts),
        "sentences": len(pieces),
        "queries": len(ids),
        "subsample": f"{len(ids)} of 300 test queries (seed 0), their judged documents and seeded others",
        "model_pass_s": round(pass_s, 1),
        "sentences_alone_s": round(alone_s, 1),
        "seconds": round(time.monotonic() - started, 1),
        "metrics": metrics,
    }
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    names = list(next(iter(metrics.values())))
    print(f"{'variant':<16}" + "".join(f"{n:>12}" for n in names))
    for name, values in metrics.items():
        print(f"{name:<16}" + "".join(f"{values[n]:>12.4f}" for n in names))
    print(f"model pass {pass_s:.0f} s, sentences alone {alone_s:.0f} s; saved to {options.out}")


if __name__ == "__main__":
    main()
