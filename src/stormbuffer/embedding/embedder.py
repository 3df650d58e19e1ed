"""The embedder: an onnxruntime session over a cached model plus its tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .cache import TOKENIZER_FILE, installed_model, reading
from .errors import EmbedderInitError, EmbeddingFailed
from .manifest import ModelManifest
from .sessions import bulk_workers, documents_on_writer, open_session
from .tokens import TokenCounter
from .writer_thread import WRITER, WriterThread

if TYPE_CHECKING:
    import onnxruntime

# Padded tokens (texts × the longest text's tokens) in one model call. What a call allocates grows
# with them (hidden states, the feed-forward layer) and with tokens × width (attention scores), so a
# fixed budget bounds the memory of embedding whatever the store holds: 1 text of 256 tokens, 8 of 32.
# Small batches keep a layer's activations in the core's cache: 256 took about 10 % less CPU per token
# than 1024, 2048 14 % more (LongMemEval-S turns, one thread; docs/performance.md).
BATCH_TOKENS = 256
# A call's batches come in multiples of this many (see `_batches`).
BATCH_GROUP = 2
POOLED_OUTPUT = "sentence_embedding"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Embedder:
    """Turns texts of at most `max_tokens` tokens into L2-normalised float32 vectors.

    `graph_file` names the graph the session runs: the saved optimized graph, or the model file.
    A call of several batches runs `workers` of them at once (the session itself uses few threads,
    which suits one short query; a bulk load can keep every core busy). Given `documents`, every
    call but a query's (`embed` of one text) runs on that one thread, its batches one after another.
    """

    def __init__(
        self,
        session: onnxruntime.InferenceSession,
        tokens: TokenCounter,
        manifest: ModelManifest,
        graph_file: str,
        workers: int = 1,
        documents: WriterThread | None = None,
    ):
        self.graph_file = graph_file
        self.model_id = manifest.model_id
        self.model_version = manifest.model_version
        self.model_checksum = manifest.model_checksum
        self.dimension = manifest.dimension
        self.max_tokens = manifest.max_tokens
        self.workers = 1 if documents is not None else workers
        self._documents = documents
        self._session = session
        self._tokens = tokens
        self._inputs = [node.name for node in session.get_inputs()]
        if not set(self._inputs) <= set(MODEL_INPUTS):
            raise EmbedderInitError("the cached embedding model expects unknown inputs; run `sbuf init`")
        outputs = {node.name: node.shape for node in session.get_outputs()}
        # Per-token states [batch, sequence, hidden], when the graph has them (a graph without pooling
        # has only them: it is pooled here).
        token_outputs = [name for name, shape in outputs.items() if len(shape) == 3]
        self._states = token_outputs[0] if token_outputs else None
        self._pooled = POOLED_OUTPUT if POOLED_OUTPUT in outputs else None
        if self._pooled is None and self._states is None:
            raise EmbedderInitError("the cached embedding model has no usable output; run `sbuf init`")
        for name in filter(None, (self._pooled, self._states)):
            width = outputs[name][-1]
            if isinstance(width, int) and width != self.dimension:
                raise EmbedderInitError("the cached embedding model has the wrong dimension; run `sbuf init`")

    @property
    def pools_spans(self) -> bool:
        """Whether `embed_spans` pools one pass's token states (else it embeds each span again)."""
        return self._states is not None

    def token_count(self, text: str) -> int:
        """Model tokens in `text`, [CLS] and [SEP] included."""
        return self._tokens.token_count(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors [len(texts), dimension], float32, unit length.

        Raises ValueError for a non-string or a text longer than `max_tokens` (split it first: nothing
        is truncated), EmbeddingFailed when the model fails.
        """
        if self._documents is not None and len(texts) > 1:
            return self._documents.run(self._embed, texts)
        return self._embed(texts)

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        ids = self._checked(texts, self._tokens.token_ids(_strings(texts)))
        vectors = np.empty((len(ids), self.dimension), dtype=np.float32)

        def run(batch: list[int]) -> None:
            vectors[batch] = self._run([ids[index] for index in batch], states=False)[0]

        self._each_batch(ids, run)
        return vectors

    def embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
                    ) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
        """The vectors of `texts` (as `embed`) and, for each text, one vector per (start, end)
        character span of it: [len(spans[i]), dimension] float32, unit length.

        A span's vector is the mean of the token states, from the text's own pass, of the tokens that
        lie inside it and of the pass's [CLS] and [SEP], L2-normalised: the model's own mean pooling
        over the attention mask, as for the span embedded alone, counts those two as well (so a span
        over the whole text gets the text's own vector). The span is read in its text's context and
        costs no model call of its own. A graph without token states embeds each span's text
        instead; so does a span without tokens (nothing but special characters).
        """
        if self._documents is not None:
            return self._documents.run(self._embed_spans, texts, spans)
        return self._embed_spans(texts, spans)

    def _embed_spans(self, texts: Sequence[str], spans: Sequence[Sequence[tuple[int, int]]]
                     ) -> tuple[np.ndarray, list[np.ndarray]]:  # fmt: skip
        if len(spans) != len(texts):
            raise ValueError("embed_spans needs one list of spans per text")
        if self._states is None:
            return self.embed(texts), [self._embed_pieces(text, own) for text, own in zip(texts, spans, strict=True)]
        encoded = self._tokens.token_spans(_strings(texts))
        ids = self._checked(texts, [sequence for sequence, _offsets in encoded])
        vectors = np.empty((len(ids), self.dimension), dtype=np.float32)
        pooled: list[np.ndarray] = [np.empty((0, self.dimension), dtype=np.float32)] * len(ids)

        def run(batch: list[int]) -> None:
            vectors[batch], states = self._run([ids[index] for index in batch], states=True)
            for row, index in enumerate(batch):
                pooled[index] = self._pool_spans(texts[index], states[row], encoded[index][1], spans[index])

        self._each_batch(ids, run)
        return vectors, pooled

    def _pool_spans(self, text: str, states: np.ndarray, offsets: list[tuple[int, int] | None],
                    spans: Sequence[tuple[int, int]]) -> np.ndarray:  # fmt: skip
        starts = np.array([offset[0] if offset else -1 for offset in offsets])
        ends = np.array([offset[1] if offset else -1 for offset in offsets])
        special = np.array([offset is None for offset in offsets])  # [CLS] and [SEP]
        out = np.empty((len(spans), self.dimension), dtype=np.float32)
        for row, (start, end) in enumerate(spans):
            inside = (starts >= start) & (ends <= end) & ~special
            if inside.any():
                out[row] = mean_pool_l2(states[None, : inside.size], (inside | special)[None, :])[0]
            else:
                out[row] = self.embed([text[start:end]])[0]
        return out

    def _embed_pieces(self, text: str, spans: Sequence[tuple[int, int]]) -> np.ndarray:
        if not spans:
            return np.empty((0, self.dimension), dtype=np.float32)
        return self.embed([text[start:end] for start, end in spans])

    def _checked(self, texts: Sequence[str], ids: list[list[int]]) -> list[list[int]]:
        for index, sequence in enumerate(ids):
            if len(sequence) > self.max_tokens:
                raise ValueError(
                    f"text {index} contains {len(sequence)} model tokens; the maximum is {self.max_tokens}"
                )
        return ids

    def _each_batch(self, ids: list[list[int]], run: Callable[[list[int]], None]) -> None:
        """`run` each batch (similar lengths together: little compute is spent on padding), `workers`
        at a time, the widest first; the session releases the interpreter lock while it computes."""
        order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
        batches = _batches(order, [len(sequence) for sequence in ids])
        if self.workers < 2 or len(batches) < 2:
            for batch in batches:
                run(batch)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(self.workers, len(batches))) as pool:
            for done in [pool.submit(run, batch) for batch in reversed(batches)]:
                done.result()

    def _run(self, batch: list[list[int]], *, states: bool) -> tuple[np.ndarray, np.ndarray]:
        """Pooled vectors of the batch and, with `states`, its token states (else an empty array)."""
        width = max(len(sequence) for sequence in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)  # 0 is [PAD]
        attention_mask = np.zeros_like(input_ids)
        for row, sequence in enumerate(batch):
            input_ids[row, : len(sequence)] = sequence
            attention_mask[row, : len(sequence)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
        wanted = [name for name in (self._pooled, self._states if states or self._pooled is None else None) if name]
        try:
            results = dict(zip(wanted, self._session.run(wanted, {name: feeds[name] for name in self._inputs}),
                               strict=True))  # fmt: skip
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddingFailed(f"the embedding model failed to run ({type(exc).__name__})") from exc
        token_states = results.get(self._states or "", np.empty(0, dtype=np.float32))
        pooled = results[self._pooled] if self._pooled else mean_pool_l2(token_states, attention_mask)
        if pooled.shape != (len(batch), self.dimension) or not np.isfinite(pooled).all():
            raise EmbeddingFailed("the embedding model returned malformed vectors")
        if states and (token_states.shape != (len(batch), width, self.dimension)
                       or not np.isfinite(token_states).all()):  # fmt: skip
            raise EmbeddingFailed("the embedding model returned malformed token states")
        return pooled, token_states


def _strings(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
        raise ValueError("embed expects a list of strings")
    return list(texts)


def _batches(order: list[int], lengths: list[int]) -> list[list[int]]:
    """`order` (indexes by ascending length) cut into batches whose padded tokens (texts × longest)
    fit `BATCH_TOKENS`; a text longer than the budget goes alone. The batches come in a multiple
    of `BATCH_GROUP` of about the same tokens each, so that two workers (`bulk_workers()` on most
    machines) finish together; they do not depend on the workers, and neither do the vectors."""
    count = BATCH_GROUP * -(-len(_filled(order, lengths)) // BATCH_GROUP)
    while count < len(order):
        even = _even(order, lengths, count)
        if all(len(batch) * lengths[batch[-1]] <= BATCH_TOKENS for batch in even if len(batch) > 1):
            return even
        count += BATCH_GROUP
    return [[index] for index in order]


def _filled(order: list[int], lengths: list[int]) -> list[list[int]]:
    """Each batch filled up to `BATCH_TOKENS` before the next begins."""
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        width = lengths[index]  # the longest so far: lengths ascend
        if current and (len(current) + 1) * width > BATCH_TOKENS:
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def _even(order: list[int], lengths: list[int], count: int) -> list[list[int]]:
    """`order` cut into at most `count` runs of about the same number of tokens."""
    total = sum(lengths[index] for index in order)
    batches: list[list[int]] = [[] for _ in range(count)]
    before = 0
    for index in order:
        batches[min(count - 1, before * count // total)].append(index)
        before += lengths[index]
    return [batch for batch in batches if batch]


def mean_pool_l2(states: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of token states over the attention mask, L2-normalised (sentence-transformers' epsilons)."""
    mask = attention_mask.astype(np.float32)[:, :, None]
    mean = (states * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
    return (mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def load(cache_dir: Path, variant: str) -> Embedder:
    """Open the cached model after the cheap manifest check (sizes and mtimes, no hashing)."""
    try:
        with reading(cache_dir):
            directory, manifest = installed_model(cache_dir, variant)
            session, graph_file = open_session(directory, manifest)
            tokenizer_json = (directory / TOKENIZER_FILE).read_text(encoding="utf-8")
    except OSError as exc:
        raise EmbedderInitError(f"the model cache cannot be read ({exc.strerror or type(exc).__name__})") from exc
    try:
        tokens = TokenCounter.from_json(tokenizer_json)
    except ValueError as exc:
        raise EmbedderInitError("the cached tokenizer is damaged; run `sbuf init` to repair it") from exc
    documents = WRITER if documents_on_writer() else None  # a team worker's: one thread, one arena
    return Embedder(session, tokens, manifest, graph_file, workers=bulk_workers(), documents=documents)
