"""Short memory-like records of real text, and the real model's vectors of them, for the million-record run.

Each record is one distinct sentence (or two short ones) of the LongMemEval-S haystack turns and the
SciFact abstracts in `../shared/bench` (bench/shared_data.py checks it): the store's own sentence cut
(`chunking.sentences` at `MIN_WORDS` words), kept when it has `MIN_CHARS`..`MAX_CHARS` characters and
fewer words than two of the store's sentences (`2 × SENTENCE_WORDS`), so that its record is one chunk
and that chunk has no sentence vectors of its own. The title is the turn's session date and role, or
the abstract's title, as bench/real_vectors.py names them. Distinct bodies only, shuffled with a fixed
seed, so that any prefix is a sample of the whole.

Vectors: each record's one chunk embedding text (`chunking.chunk_body`), embedded by the real model
(the store's default, as a bulk load embeds) and cached beside bench/real_vectors.py's vectors, in
`~/.cache/stormbuffer-bench/short-records/<model>/`, as float32 `.npy` shards written atomically: a run
resumes where the last one stopped and stops by itself after `--minutes`. Run it under `nice -n 19`.
Progress goes to stderr.

Beyond the first `REAL_RECORDS`, records are derived, and labelled so wherever they are reported: record
`REAL_RECORDS + k` joins two of the first `REAL_RECORDS` records' bodies (chosen by a seeded random
stream, kept only when the join is still short and distinct) under the first one's title, and its vector
is the unit sum of those two records' real vectors (the real model's vectors, combined, not its vector of
the joined text). That reaches a million records without embedding a million texts (the data holds
430,294 short sentences).

Usage: python bench/short_records.py [--count] [--minutes 60] [--records 1000000] [--data ../shared/bench]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
from real_vectors import CACHE, LONGMEMEVAL, embed_in_shards, embedder, model_dir, one_model  # noqa: E402
from shared_data import DEFAULT, require  # noqa: E402

if TYPE_CHECKING:
    import numpy as np

    from stormbuffer.core.records import Record

MIN_WORDS = 8  # the store's sentence cut, with short pieces merged up to this many words
MIN_CHARS = 40
MAX_CHARS = 300
SHARD = 5000
REAL_RECORDS = 300_000  # records with the real model's own vectors; later ones are derived
SECONDS = 1_780_000_000  # created_at of record i: a fixed start (May 2026) plus i seconds


def sentence_records(data: Path) -> list[tuple[str, str]]:
    """(title, body) of every distinct short sentence of the benchmark data, shuffled with seed 0; then
    every distinct pair of adjacent short sentences, shuffled likewise (a prefix up to the sentences'
    count is sentences alone)."""
    from stormbuffer.index.chunking import SENTENCE_WORDS, sentences

    singles: dict[str, str] = {}  # body → title, the first seen
    doubles: dict[str, str] = {}

    def short(sentence: str) -> bool:
        return MIN_CHARS <= len(sentence) <= MAX_CHARS and len(sentence.split()) < 2 * SENTENCE_WORDS

    def add(title: str, text: str) -> None:
        cut = sentences(text, MIN_WORDS)
        for sentence in cut:
            if short(sentence):
                singles.setdefault(sentence, title)
        for first, second in zip(cut, cut[1:], strict=False):
            if short(f"{first} {second}"):
                doubles.setdefault(f"{first} {second}", title)

    for item in json.loads(gzip.open(data / LONGMEMEVAL).read()):
        for date, turns in zip(item["haystack_dates"], item["haystack_sessions"], strict=True):
            for turn in turns:
                add(f"{date} {turn['role']}", turn["content"])
    with gzip.open(data / "scifact" / "corpus.jsonl.gz", "rt") as lines:
        for line in lines:
            doc = json.loads(line)
            add(" ".join(doc["title"].split())[:200] or doc["_id"], doc["text"])
    ordered = []
    for bodies in (singles, {body: title for body, title in doubles.items() if body not in singles}):
        part = [(title, body) for body, title in bodies.items()]
        random.Random(0).shuffle(part)
        ordered += part
    return ordered


def titled(pair: tuple[str, str]) -> tuple[str, str]:
    """`pair` with its title stripped, as a record's title must be (a title cut at 200 characters may end
    in a space; the tokenizer reads the same tokens either way)."""
    return pair[0].strip(), pair[1]


def make_short_record(index: int, scope: str, pair: tuple[str, str]) -> Record:
    """Record number `index`: the sentence `pair` (title, body) as an active fact (a pure function)."""
    import uuid
    from datetime import UTC, datetime

    from stormbuffer.core.records import Record, Source
    from stormbuffer.core.timestamps import Timestamp

    title, body = titled(pair)
    now = Timestamp(datetime.fromtimestamp(SECONDS + index, UTC).replace(tzinfo=None), 0, 0)
    source = Source(kind="conversation", reference=f"bench:short:{index}", actor="agent")
    return Record(
        id=str(uuid.UUID(int=(0x0190_0000_0000_7000_9000_0000_0000_0000 | index))),
        title=title, kind="fact", scope=scope, status="active", access="agent", created_at=now,
        updated_at=now, tags=(), aliases=(), sources=(source,), body=body + "\n",
    )  # fmt: skip


def folder_of(model: Any) -> Path:
    return CACHE / "short-records" / model_dir(model).name


def listed(data: Path, folder: Path) -> list[tuple[str, str]]:
    """The records' (title, body) pairs, listed once and kept in the cache (cutting takes a minute)."""
    path = folder / "records.json.gz"
    if path.exists():
        return [tuple(pair) for pair in json.loads(gzip.decompress(path.read_bytes()))]  # type: ignore[misc]
    pairs = sentence_records(data)
    folder.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".part").write_bytes(gzip.compress(json.dumps(pairs).encode()))
    path.with_suffix(".part").replace(path)
    return pairs


def embed_texts(pairs: list[tuple[str, str]], count_tokens: Any) -> list[str]:
    """Each record's one chunk embedding text, as the store's chunking makes it."""
    from stormbuffer.index.chunking import chunk_body

    texts = []
    for title, body in map(titled, pairs):
        chunks = chunk_body(title, body + "\n", count_tokens=count_tokens)
        if len(chunks) != 1:
            raise SystemExit(f"a record of {len(body)} characters made {len(chunks)} chunks, not one")
        texts.append(chunks[0].embed_text)
    return texts


def embed_all(data: Path, records: int, minutes: float) -> Path:
    """Embed (or resume embedding) the first `records` records' chunks; returns the cache directory."""
    import numpy as np

    model = embedder()
    folder = folder_of(model)
    every = listed(data, folder)
    pairs = every[:records]
    digest = hashlib.sha256("\0".join(f"{title}\1{body}" for title, body in every).encode()).hexdigest()
    manifest = folder / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text())["records_sha256"] != digest:
        raise SystemExit(f"{folder} holds vectors of other records; remove it to start again")
    manifest.write_text(json.dumps({"model_id": model.model_id, "model_version": model.model_version,
                                    "model_checksum": model.model_checksum, "records": len(every),
                                    "records_sha256": digest, "shard": SHARD,
                                    "vectors_are": "the real model's vectors of each short record's one chunk "
                                                   "(sentences of LongMemEval-S turns and SciFact abstracts)"},
                                   indent=2) + "\n")  # fmt: skip

    def embed(part: list[tuple[str, str]]) -> np.ndarray:
        return model.embed(embed_texts(part, model.token_count)).astype(np.float32)

    embed_in_shards(folder, pairs, SHARD, minutes, embed, "records")
    return folder


def cached(count: int, cache: Path = CACHE) -> tuple[list[tuple[str, str]], np.ndarray, dict[str, Any]]:
    """The first `count` records' (title, body) pairs and vectors under `cache` (cached real ones, then
    derived ones beyond `REAL_RECORDS`), and the manifest; stops with a clear message when fewer real
    vectors are cached than needed."""
    import numpy as np

    folder = one_model(cache / "short-records", "bench/short_records.py")
    real = min(count, REAL_RECORDS)
    parts: list[np.ndarray] = []
    for number in range(0, real, SHARD):
        shard = folder / f"vectors-{number // SHARD:05d}.npy"
        if not shard.exists():
            raise SystemExit(f"only {number:,} short records' vectors are cached; run python bench/short_records.py")
        parts.append(np.load(shard))
    pairs = [tuple(pair) for pair in json.loads(gzip.decompress((folder / "records.json.gz").read_bytes()))]
    pairs, vectors = pairs[:real], np.concatenate(parts)[:real]
    if count > real:
        joined, sources = derived(pairs, count - real)  # type: ignore[arg-type]
        summed = vectors[sources[:, 0]] + vectors[sources[:, 1]]
        summed /= np.linalg.norm(summed, axis=1, keepdims=True)
        pairs, vectors = pairs + joined, np.concatenate([vectors, summed.astype(np.float32)])  # type: ignore[operator]
    return pairs, vectors, json.loads((folder / "manifest.json").read_text())  # type: ignore[return-value]


def derived(real: list[tuple[str, str]], count: int) -> tuple[list[tuple[str, str]], np.ndarray]:
    """`count` derived records: each the join of two real records' bodies under the first one's title,
    drawn from a random stream of seed 1, kept when still short and distinct; and for each, the rows of
    the two real records it joins (a pure function of `real` and `count`)."""
    import numpy as np

    from stormbuffer.index.chunking import SENTENCE_WORDS

    draw = random.Random(1).randrange
    seen = {body for _title, body in real}
    joined: list[tuple[str, str]] = []
    sources: list[tuple[int, int]] = []
    for _ in range(50 * count):  # bounded: about half the draws are kept
        if len(joined) == count:
            break
        first, second = draw(len(real)), draw(len(real))
        body = f"{real[first][1]} {real[second][1]}"
        if first == second or len(body) > MAX_CHARS or len(body.split()) >= 2 * SENTENCE_WORDS or body in seen:
            continue
        seen.add(body)
        joined.append((real[first][0], body))
        sources.append((first, second))
    if len(joined) < count:
        raise SystemExit(f"only {len(joined):,} of {count:,} derived records could be drawn")
    return joined, np.array(sources, dtype=np.int64)


class Precomputed:
    """The real model's identity and tokenizer, and for each record's chunk its cached real vector
    (looked up by the chunk's embedding text; a text not cached is an error)."""

    def __init__(self, real: Any, pairs: list[tuple[str, str]], vectors: np.ndarray) -> None:
        self._real = real
        self.model_id, self.model_version = real.model_id, real.model_version
        self.model_checksum, self.dimension, self.max_tokens = real.model_checksum, real.dimension, real.max_tokens
        self._rows = {text: row for row, text in enumerate(embed_texts(pairs, real.token_count))}
        self._vectors = vectors

    def token_count(self, text: str) -> int:
        return int(self._real.token_count(text))

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [text for text in texts if text not in self._rows]
        if missing:
            raise SystemExit(f"no cached vector for a text of {len(missing[0])} characters: not a short record's chunk")
        return self._vectors[[self._rows[text] for text in texts]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", action="store_true", help="list and count the records, embed nothing")
    parser.add_argument(
        "--records",
        type=int,
        default=REAL_RECORDS,
        help=f"embed the first this many (at most {REAL_RECORDS:,}: later records are derived)",
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="stop embedding after this long")
    parser.add_argument("--data", type=Path, default=DEFAULT)
    args = parser.parse_args()
    data = require(args.data)
    if args.count:
        pairs = listed(data, folder_of(embedder()))
        lengths = sorted(len(body) for _title, body in pairs)
        middle = lengths[len(lengths) // 2]
        print(f"{len(pairs):,} distinct records of one or two short sentences; characters p50 {middle}, "
              f"mean {sum(lengths) / len(lengths):.0f}")  # fmt: skip
        return
    print(f"cached in {embed_all(data, min(args.records, REAL_RECORDS), args.minutes)}", file=sys.stderr)


if __name__ == "__main__":
    main()
