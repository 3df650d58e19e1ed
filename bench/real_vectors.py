"""The real model's vectors of real text, embedded once and cached for the HNSW benchmarks.

The texts are the distinct chunk embedding texts a store would make of the benchmark data in
`../shared/bench` (bench/shared_data.py checks it): one record per LongMemEval-S haystack turn
(title = session date and role, as bench/quality.py writes them) and one per SciFact abstract
(title → title), cut by the store's own chunking (`index.chunking.chunk_body`, the first
`VECTOR_CHUNKS` chunks of a record, as a projection embeds them). Distinct texts only, shuffled
with a fixed seed so that any prefix is a sample of the whole. The queries are held-out texts of the
same data: the LongMemEval-S questions and the SciFact test claims.

Vectors are cached outside the repository, in `~/.cache/stormbuffer-bench/real-vectors/<model>/`,
as float32 `.npy` shards of `SHARD` vectors written atomically, beside `manifest.json` (the model's
identity and the digest of the ordered texts): a run resumes where the last one stopped, and stops
by itself after `--minutes` with what it has. Progress goes to stderr.

Usage: python bench/real_vectors.py [--minutes 25] [--data ../shared/bench]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from shared_data import DEFAULT, require  # noqa: E402

if TYPE_CHECKING:
    import numpy as np

    from stormbuffer.embedding.embedder import Embedder

CACHE = Path.home() / ".cache" / "stormbuffer-bench"
SHARD = 2000
QUERIES_PER_SET = 100  # LongMemEval-S questions (all 100 of the subset), SciFact test claims
LONGMEMEVAL = "longmemeval/longmemeval_s.subset100.seed0.json.gz"


def embedder() -> Embedder:
    """The store's own embedder (the default model), acquired into the benchmark cache; a bulk call
    runs its batches on every core, as a store's bulk load does."""
    from stormbuffer.embedding import acquire_model, load_embedder

    acquire_model(CACHE)
    return load_embedder(CACHE)


def corpus_texts(data: Path, count_tokens: Any) -> list[str]:
    """The distinct embedding texts of the chunks of every LongMemEval-S turn and SciFact abstract."""
    from stormbuffer.index.chunking import VECTOR_CHUNKS, chunk_body

    records: dict[str, str] = {}  # body → title, the first seen
    for item in json.loads(gzip.open(data / LONGMEMEVAL).read()):
        for date, turns in zip(item["haystack_dates"], item["haystack_sessions"], strict=True):
            for turn in turns:
                if turn["content"].strip():
                    records.setdefault(turn["content"], f"{date} {turn['role']}")
    with gzip.open(data / "scifact" / "corpus.jsonl.gz", "rt") as lines:
        for line in lines:
            doc = json.loads(line)
            body = doc["text"].strip() or doc["title"].strip()
            records.setdefault(body + "\n", " ".join(doc["title"].split())[:200] or doc["_id"])
    texts: dict[str, None] = {}
    for number, (body, title) in enumerate(records.items()):
        for chunk in chunk_body(title, body, count_tokens=count_tokens, exact_chunks=VECTOR_CHUNKS):
            if chunk.ordinal < VECTOR_CHUNKS:
                texts[chunk.embed_text] = None
        if number % 10_000 == 0:
            print(f"chunked {number} of {len(records)} records", file=sys.stderr, flush=True)
    ordered = list(texts)
    random.Random(0).shuffle(ordered)
    return ordered


def query_texts(data: Path) -> list[str]:
    """The LongMemEval-S questions and the first SciFact test claims: held out from the corpus."""
    questions = [item["question"] for item in json.loads(gzip.open(data / LONGMEMEVAL).read())]
    tested = {line.split("\t")[0] for line in (data / "scifact" / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    claims = [json.loads(line) for line in (data / "scifact" / "queries.jsonl").read_text().splitlines()]
    chosen = [claim["text"] for claim in claims if claim["_id"] in tested]
    return questions[:QUERIES_PER_SET] + chosen[:QUERIES_PER_SET]


def model_dir(model: Embedder) -> Path:
    """The cache folder of one model's vectors, named for its identity."""
    name = f"{model.model_id}-{model.model_version}"
    return CACHE / "real-vectors" / "".join(char if char.isalnum() or char in "-_." else "-" for char in name)


def _save(path: Path, array: np.ndarray) -> None:
    import numpy as np

    part = path.with_suffix(".part.npy")
    np.save(part, array)
    os.replace(part, path)


def embed_in_shards(folder: Path, items: list[Any], size: int, minutes: float, embed: Any, what: str) -> None:
    """`embed` each `size` items into `folder/vectors-NNNNN.npy` not yet there, until `minutes` have
    passed; a line of progress on stderr per shard."""
    started = time.monotonic()
    done_now = 0
    for first in range(0, len(items), size):
        shard = folder / f"vectors-{first // size:05d}.npy"
        if shard.exists():
            continue
        if time.monotonic() - started > 60 * minutes:
            print(f"stopped after {minutes} minutes: {first} of {len(items)} {what} embedded", file=sys.stderr)
            break
        part = items[first : first + size]
        _save(shard, embed(part))
        done_now += len(part)
        rate = done_now / (time.monotonic() - started)
        print(f"embedded {first + len(part):,} of {len(items):,} {what} ({rate:.0f} a second, "
              f"{(len(items) - first - len(part)) / rate / 60:.0f} min left)", file=sys.stderr, flush=True)  # fmt: skip


def embed_all(data: Path, minutes: float) -> Path:
    """Embed (or resume embedding) the corpus and the queries; returns the cache directory."""
    import numpy as np

    model = embedder()
    folder = model_dir(model)
    folder.mkdir(parents=True, exist_ok=True)
    listed = folder / "texts.json.gz"  # chunking takes minutes (the tokenizer counts every chunk)
    if listed.exists():
        texts = json.loads(gzip.decompress(listed.read_bytes()))
    else:
        texts = corpus_texts(data, model.token_count)
        listed.with_suffix(".part").write_bytes(gzip.compress(json.dumps(texts).encode()))
        os.replace(listed.with_suffix(".part"), listed)
    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()
    manifest = {"model_id": model.model_id, "model_version": model.model_version,
                "model_checksum": model.model_checksum, "texts": len(texts), "texts_sha256": digest,
                "shard": SHARD, "vectors_are": "the real model's vectors of real text (store chunks of "
                "LongMemEval-S turns and SciFact abstracts, distinct, shuffled with seed 0)"}  # fmt: skip
    known = folder / "manifest.json"
    if known.exists() and json.loads(known.read_text())["texts_sha256"] != digest:
        raise SystemExit(f"{folder} holds vectors of other texts; remove it to start again")
    known.write_text(json.dumps(manifest, indent=2) + "\n")
    queries = folder / "queries.npy"
    if not queries.exists():
        _save(queries, model.embed(query_texts(data)))
    embed_in_shards(folder, texts, SHARD, minutes, lambda part: model.embed(part).astype(np.float32), "texts")
    return folder


def one_model(root: Path, script: str) -> Path:
    """The one model's folder of vectors under `root`; stops with a clear message when there is not one."""
    folders = sorted(root.glob("*/manifest.json"))
    if len(folders) != 1:
        raise SystemExit(f"{len(folders)} models' vectors cached under {root}, not one; run python {script}, "
                         "and remove the folders of other models")  # fmt: skip
    return folders[0].parent


def load(count: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The first `count` cached corpus vectors, the query vectors and the manifest; stops with a clear
    message when fewer are cached."""
    import numpy as np

    folder = one_model(CACHE / "real-vectors", "bench/real_vectors.py")
    parts: list[np.ndarray] = []
    held = 0
    for shard in sorted(folder.glob("vectors-[0-9]*.npy")):
        if held < count and not shard.name.endswith(".part.npy"):
            parts.append(np.load(shard))
            held += len(parts[-1])
    if held < count:
        raise SystemExit(f"only {held} real vectors are cached; run python bench/real_vectors.py again")
    return (
        np.concatenate(parts)[:count],
        np.load(folder / "queries.npy"),
        json.loads((folder / "manifest.json").read_text()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=25.0, help="stop embedding after this long")
    parser.add_argument("--data", type=Path, default=DEFAULT)
    args = parser.parse_args()
    folder = embed_all(require(args.data), args.minutes)
    print(f"cached in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
