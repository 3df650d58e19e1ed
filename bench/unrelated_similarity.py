"""How similar the model finds texts that have nothing to do with each other: the calibration of
the similarity floor that focused context uses (`retrieval.focus.SIMILARITY_FLOOR`).

Pairs that are unrelated by construction, from ../shared/bench (`--data` overrides):

- LongMemEval-S: each of the first `--questions` questions against `--texts` turns drawn at random
  (fixed seed) from the haystacks of *other* questions (each question has its own conversations);
- SciFact: each of the first `--questions` test claims against `--texts` abstracts drawn at random
  from those no claim of the test split is judged against.

Prints the percentiles of the cosine similarity of each set and of both together, and beside them
the similarity of each question to its evidence (LongMemEval: its `has_answer` turns; SciFact: its
relevant abstracts), which a floor must stay below. Writes bench/results/unrelated_similarity.json.

Usage: python bench/unrelated_similarity.py [--data DIR] [--work DIR] [--questions 60] [--texts 300]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from embedding_cache import CachingEmbedder  # noqa: E402
from machine import save  # noqa: E402
from quality import read_qrels  # noqa: E402
from shared_data import DEFAULT as DEFAULT_DATA  # noqa: E402
from shared_data import require as require_data  # noqa: E402

from stormbuffer.embedding import acquire_model, load_embedder

RESULTS = Path(__file__).parent / "results" / "unrelated_similarity.json"
PERCENTILES = (1, 5, 10, 50, 90, 95, 99, 99.9)


def fitting(embedder: Any, texts: list[str]) -> list[str]:
    """Texts cut to the model's token limit (by words: a calibration needs no exact cut)."""
    out = []
    for text in texts:
        words = text.split()
        while embedder.token_count(" ".join(words)) > embedder.max_tokens:
            words = words[: len(words) * 3 // 4]
        out.append(" ".join(words))
    return out


def longmemeval(data: Path, questions: int, texts: int, rng: random.Random) -> tuple[list[str], list[list[str]],
                                                                                     list[list[str]]]:  # fmt: skip
    """Questions, for each its unrelated turns (other haystacks), and its evidence turns."""
    items = json.loads(gzip.decompress((data / "longmemeval" / "longmemeval_s.subset100.seed0.json.gz").read_bytes()))
    items = [item for item in items if not item["question_id"].endswith("_abs")][:questions]
    turns = [[turn["content"] for session in item["haystack_sessions"] for turn in session if turn["content"].strip()]
             for item in items]  # fmt: skip
    others = [rng.sample([text for j, own in enumerate(turns) if j != i for text in own], texts)
              for i in range(len(items))]  # fmt: skip
    evidence = [[turn["content"] for session in item["haystack_sessions"] for turn in session if turn.get("has_answer")]
                for item in items]  # fmt: skip
    return [item["question"] for item in items], others, evidence


def scifact(data: Path, questions: int, texts: int, rng: random.Random) -> tuple[list[str], list[list[str]],
                                                                                 list[list[str]]]:  # fmt: skip
    folder = data / "scifact"
    corpus = {str(doc["_id"]): f"{doc['title']}\n{doc['text']}" for doc in
              map(json.loads, gzip.decompress((folder / "corpus.jsonl.gz").read_bytes()).splitlines())}  # fmt: skip
    queries = {str(q["_id"]): q["text"] for q in map(json.loads, (folder / "queries.jsonl").read_text().splitlines())}
    qrels = read_qrels(folder)
    judged = {doc for relevant in qrels.values() for doc in relevant}
    pool = sorted(set(corpus) - judged)
    chosen = sorted(qrels)[:questions]
    sample = [corpus[doc] for doc in rng.sample(pool, texts)]
    return [queries[q] for q in chosen], [sample] * len(chosen), [[corpus[d] for d in qrels[q]] for q in chosen]


def similarities(embedder: Any, questions: list[str], groups: list[list[str]]) -> np.ndarray:
    distinct = sorted({text for group in groups for text in group})
    vectors = dict(zip(distinct, embedder.embed(fitting(embedder, distinct)), strict=True))
    asked = embedder.embed(questions)
    return np.concatenate([np.array([vectors[text] for text in group]) @ question
                           for question, group in zip(asked, groups, strict=True) if group])  # fmt: skip


def summary(values: np.ndarray) -> dict[str, float]:
    return {"pairs": int(values.size), "mean": round(float(values.mean()), 4),
            **{f"p{p:g}": round(float(np.percentile(values, p)), 4) for p in PERCENTILES}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--work", type=Path, help="directory for the model cache and the embedding cache")
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    require_data(args.data)
    work = args.work or Path(tempfile.mkdtemp(prefix="stormbuffer-unrelated-"))
    acquire_model(work / "model-cache")
    embedder = CachingEmbedder(load_embedder(work / "model-cache"), work / "embeddings.sqlite3")
    rng = random.Random(20240101)
    results: dict[str, Any] = {}
    unrelated_all = []
    for name, loader in (("longmemeval", longmemeval), ("scifact", scifact)):
        questions, unrelated, evidence = loader(args.data, args.questions, args.texts, rng)
        unrelated_values = similarities(embedder, questions, unrelated)
        unrelated_all.append(unrelated_values)
        results[name] = {"unrelated": summary(unrelated_values),
                         "evidence": summary(similarities(embedder, questions, evidence))}  # fmt: skip
    results["both_unrelated"] = summary(np.concatenate(unrelated_all))
    for name, result in results.items():
        print(name, json.dumps(result))
    save(args.out, {"questions": args.questions, "texts": args.texts, "model": embedder.model_version,
                    "results": results})  # fmt: skip


if __name__ == "__main__":
    main()
