"""What vectors per sentence cost a store: matrix rows, embedding time, query time by where they live.

`fusion_study.py` measured the quality side of vectors per sentence (a chunk's similarity raised
halfway to its best sentence piece, `chunking.sentences`). This measures the cost side, and what
it would be if the sentences were rows of the vector matrix instead of blobs beside their chunk's
vector, read for the fused candidates only (what the index does):

- **rows**: the chunks of three real stores (the benchmark corpus at 10,000 records, every
  LongMemEval-S haystack turn of the answerable questions, the SciFact abstracts), cut by the
  index's own chunker with the model's tokenizer, and the pieces `chunking.sentences` cuts from
  them (chunks of one piece need no extra row);
- **embedding**: the real model's time for a sample of LongMemEval-S chunks' embedding texts and for
  their pieces, rounds interleaved: the extra model time of embedding new chunks;
- **query**: at 10,000 records of the benchmark corpus, with random unit vectors (timing does not
  depend on the values), the similarity product over the chunk rows, over chunk and piece rows in
  one matrix, and over only the pieces of 150 candidate chunks (what raising the fused candidates
  needs), p50 of repeated runs interleaved. `scale.py` measures the index's own path end to end.

`sbuf --version` is timed in the same run as the machine's floor. Prints a table and writes
bench/results/sentence_cost.json.

Usage: python bench/sentence_cost.py --work DIR [--sample 256] [--repeats 200] [--data DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import quality  # noqa: E402
from corpus import make_record  # noqa: E402
from machine import machine  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder
from stormbuffer.index.chunking import SENTENCE_WORDS, Chunk, chunk_body, own_sentences
from stormbuffer.index.sync import EMBED_BATCH

RESULTS = Path(__file__).parent / "results" / "sentence_cost.json"
CANDIDATES = 150  # about what hybrid fuses per query: the nearest records' chunks plus the lexical ones


def pieces_of(chunks: list[Chunk]) -> list[list[str]]:
    """Each chunk's pieces of at least SENTENCE_WORDS words; empty for a chunk of one piece (its own vector serves)."""
    return [own_sentences(chunk.text) for chunk in chunks]


def chunked(documents: Iterable[tuple[str, str]], total: int, label: str, count_tokens: Callable[[str], int]
            ) -> list[Chunk]:  # fmt: skip
    found: list[Chunk] = []
    with quality.progress_bar(f"Chunking {label}", total) as bar:
        for done, (title, body) in enumerate(documents, 1):
            found += chunk_body(title, body, count_tokens=count_tokens)
            if done % 500 == 0 or done == total:
                bar(done)
    return found


def corpus_documents(size: int) -> list[tuple[str, str]]:
    records = [make_record(index, "project:bench") for index in range(size)]
    return [(record.title, record.body) for record in records]


def longmemeval_documents(data: Path) -> list[tuple[str, str]]:
    items = json.loads(gzip.decompress((data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes()))
    return [(f"{date} {turn['role']}", turn["content"])
            for item in items if not item["question_id"].endswith("_abs")
            for date, session in zip(item["haystack_dates"], item["haystack_sessions"], strict=True)
            for turn in session if turn["content"].strip()]  # fmt: skip


def scifact_documents(data: Path) -> list[tuple[str, str]]:
    corpus = gzip.decompress((data / "scifact" / "corpus.jsonl.gz").read_bytes()).splitlines()
    return [(doc["title"] or str(doc["_id"]), doc["text"].strip() or doc["title"] or str(doc["_id"]))
            for doc in map(json.loads, corpus)]  # fmt: skip


def row_counts(chunks: list[Chunk], pieces: list[list[str]]) -> dict[str, Any]:
    extra = sum(len(cut) for cut in pieces)
    return {"chunks": len(chunks), "chunks_with_pieces": sum(1 for cut in pieces if cut), "pieces": extra,
            "rows_factor": round((len(chunks) + extra) / len(chunks), 2),
            "embedded_words_factor": round(1 + sum(chunk.word_count for chunk, cut in zip(chunks, pieces, strict=True)
                                                   if cut) / max(1, sum(c.word_count for c in chunks)), 2)}  # fmt: skip


def embedding_cost(embedder: Any, chunks: list[Chunk], sample: int, rounds: int = 3) -> dict[str, Any]:
    """The real model's seconds for a sample's chunk texts and for their pieces, median of interleaved rounds."""
    picked = random.Random(20).sample(chunks, min(sample, len(chunks)))
    chunk_texts = sorted((chunk.embed_text for chunk in picked), key=len)
    piece_texts = sorted((piece for cut in pieces_of(picked) for piece in cut), key=len)

    def seconds(texts: list[str]) -> float:
        started = time.perf_counter()
        for start in range(0, len(texts), EMBED_BATCH):
            embedder.embed(texts[start : start + EMBED_BATCH])
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"chunks": [], "pieces": []}
    with quality.progress_bar("Embedding rounds", rounds) as bar:
        for done in range(1, rounds + 1):
            times["chunks"].append(seconds(chunk_texts))
            times["pieces"].append(seconds(piece_texts))
            bar(done)
    chunk_s, piece_s = statistics.median(times["chunks"]), statistics.median(times["pieces"])
    return {"chunks": len(chunk_texts), "pieces": len(piece_texts), "chunks_s": round(chunk_s, 3),
            "pieces_s": round(piece_s, 3), "embedding_factor": round((chunk_s + piece_s) / chunk_s, 2)}  # fmt: skip


def query_cost(chunks: list[Chunk], pieces: list[list[str]], dimension: int, repeats: int) -> dict[str, Any]:
    """p50 ms of the similarity product: chunk rows; chunk and piece rows; the pieces of CANDIDATES chunks."""
    rng = np.random.default_rng(20)

    def unit(rows: int) -> np.ndarray:
        vectors = rng.standard_normal((rows, dimension), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    owners = np.repeat(np.arange(len(chunks)), [len(cut) for cut in pieces])  # piece rows sorted by chunk
    chunk_rows, piece_rows, query = unit(len(chunks)), unit(owners.size), unit(1)[0]
    both = np.concatenate([chunk_rows, piece_rows])
    draws = [np.sort(rng.choice(len(chunks), CANDIDATES, replace=False)) for _ in range(repeats)]

    def candidate_pieces(candidates: np.ndarray) -> np.ndarray:
        starts, ends = np.searchsorted(owners, candidates), np.searchsorted(owners, candidates, side="right")
        has = ends > starts
        positions = np.concatenate([np.arange(s, e) for s, e in zip(starts[has], ends[has], strict=True)])
        similarity = np.einsum("ij,j->i", piece_rows[positions], query)
        return np.maximum.reduceat(similarity, np.cumsum(ends[has] - starts[has]) - (ends[has] - starts[has]))

    samples: dict[str, list[float]] = {"chunk_rows": [], "chunk_and_piece_rows": [], "candidate_pieces": []}
    with quality.progress_bar("Query products", repeats) as bar:
        for done, candidates in enumerate(draws, 1):
            for name, action in (("chunk_rows", lambda: np.einsum("ij,j->i", chunk_rows, query)),
                                 ("chunk_and_piece_rows", lambda: np.einsum("ij,j->i", both, query)),
                                 ("candidate_pieces", lambda c=candidates: candidate_pieces(c))):  # fmt: skip
                started = time.perf_counter()
                action()
                samples[name].append(time.perf_counter() - started)
            if done % 20 == 0 or done == repeats:
                bar(done)
    return {
        "chunk_rows": len(chunks), "piece_rows": int(owners.size), "candidates": CANDIDATES,
        "piece_matrix_mb": round(piece_rows.nbytes / 1e6, 1),
        **{f"{name}_p50_ms": round(statistics.median(values) * 1000, 3) for name, values in samples.items()},
    }  # fmt: skip


def version_seconds(runs: int = 5) -> float:
    """Median wall time of `sbuf --version`, this machine's floor for any process."""
    sbuf = Path(sys.executable).with_name("sbuf")
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([str(sbuf), "--version"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def table(report: dict[str, Any]) -> str:
    lines = [
        "| store | chunks | with pieces | pieces | rows × | embedded words × |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, counts in report["rows"].items():
        lines.append(f"| {name} | {counts['chunks']} | {counts['chunks_with_pieces']} | {counts['pieces']} | "
                     f"{counts['rows_factor']} | {counts['embedded_words_factor']} |")  # fmt: skip
    embedding, query = report["embedding"], report["query"]
    lines += ["", f"embedding {embedding['chunks']} LongMemEval-S chunks: {embedding['chunks_s']} s; their "
              f"{embedding['pieces']} pieces: {embedding['pieces_s']} s; embedding new chunks × "
              f"{embedding['embedding_factor']}",
              f"query at 10k records ({query['chunk_rows']} chunk rows, {query['piece_rows']} piece rows, "
              f"{query['piece_matrix_mb']} MB of piece vectors), p50 ms: chunk rows {query['chunk_rows_p50_ms']}, "
              f"chunk and piece rows {query['chunk_and_piece_rows_p50_ms']}, pieces of {query['candidates']} "
              f"candidates {query['candidate_pieces_p50_ms']}",
              f"sbuf --version: {report['sbuf_version_s']} s"]  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True, help="where the model is cached")
    parser.add_argument("--sample", type=int, default=256, help="LongMemEval-S chunks embedded per round")
    parser.add_argument("--repeats", type=int, default=200, help="query products timed per way")
    parser.add_argument("--data", type=Path, default=quality.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    quality.require_data(args.data)
    version = version_seconds()
    acquire_model(args.work / "model-cache")
    embedder = load_embedder(args.work / "model-cache")
    stores = {
        "benchmark corpus, 10k records": corpus_documents(10_000),
        "LongMemEval-S turns": longmemeval_documents(args.data),
        "SciFact abstracts": scifact_documents(args.data),
    }
    count = embedder.token_count
    chunks = {name: chunked(documents, len(documents), name, count) for name, documents in stores.items()}
    pieces = {name: pieces_of(found) for name, found in chunks.items()}
    report = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "min_words": SENTENCE_WORDS,
        "rows": {name: row_counts(chunks[name], pieces[name]) for name in stores},
        "embedding": embedding_cost(embedder, chunks["LongMemEval-S turns"], args.sample),
        "query": query_cost(
            chunks["benchmark corpus, 10k records"],
            pieces["benchmark corpus, 10k records"],
            embedder.dimension,
            args.repeats,
        ),  # fmt: skip
        "sbuf_version_s": round(version, 3),
        "machine": machine(),
    }
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
