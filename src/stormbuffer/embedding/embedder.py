"""The embedder: an onnxruntime session over a cached model plus its tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .cache import TOKENIZER_FILE, installed_model, reading
from .errors import EmbedderInitError, EmbeddingFailed
from .manifest import ModelManifest
from .sessions import open_session
from .tokens import TokenCounter

if TYPE_CHECKING:
    import onnxruntime

# Padded tokens (texts × the longest text's tokens) in one model call. What a call allocates grows
# with them (hidden states, the feed-forward layer) and with tokens × width (attention scores), so a
# fixed budget bounds the memory of embedding whatever the store holds: 4 texts of 256 tokens, 32 of 32.
BATCH_TOKENS = 1024
POOLED_OUTPUT = "sentence_embedding"
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Embedder:
    """Turns texts of at most `max_tokens` tokens into L2-normalised float32 vectors.

    `graph_file` names the graph the session runs: the saved optimized graph, or the model file.
    """

    def __init__(
        self,
        session: onnxruntime.InferenceSession,
        tokens: TokenCounter,
        manifest: ModelManifest,
        graph_file: str,
    ):
        self.graph_file = graph_file
        self.model_id = manifest.model_id
        self.model_version = manifest.model_version
        self.model_checksum = manifest.model_checksum
        self.dimension = manifest.dimension
        self.max_tokens = manifest.max_tokens
        self._session = session
        self._tokens = tokens
        self._inputs = [node.name for node in session.get_inputs()]
        if not set(self._inputs) <= set(MODEL_INPUTS):
            raise EmbedderInitError("the cached embedding model expects unknown inputs; run `sbuf init`")
        outputs = {node.name: node.shape for node in session.get_outputs()}
        if POOLED_OUTPUT in outputs:
            self._output, self._pool = POOLED_OUTPUT, False
        else:
            # A graph without pooling yields per-token states [batch, sequence, hidden]: pool here.
            token_outputs = [name for name, shape in outputs.items() if len(shape) == 3]
            if not token_outputs:
                raise EmbedderInitError("the cached embedding model has no usable output; run `sbuf init`")
            self._output, self._pool = token_outputs[0], True
        width = outputs[self._output][-1]
        if isinstance(width, int) and width != self.dimension:
            raise EmbedderInitError("the cached embedding model has the wrong dimension; run `sbuf init`")

    def token_count(self, text: str) -> int:
        """Model tokens in `text`, [CLS] and [SEP] included."""
        return self._tokens.token_count(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors [len(texts), dimension], float32, unit length.

        Raises ValueError for a non-string or a text longer than `max_tokens` (split it first: nothing
        is truncated), EmbeddingFailed when the model fails.
        """
        if isinstance(texts, str) or not all(isinstance(text, str) for text in texts):
            raise ValueError("embed expects a list of strings")
        ids = self._tokens.token_ids(texts)
        for index, sequence in enumerate(ids):
            if len(sequence) > self.max_tokens:
                raise ValueError(
                    f"text {index} contains {len(sequence)} model tokens; the maximum is {self.max_tokens}"
                )
        vectors = np.empty((len(ids), self.dimension), dtype=np.float32)
        # Similar lengths share a batch so little compute is spent on padding.
        order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
        for batch in _batches(order, [len(sequence) for sequence in ids]):
            vectors[batch] = self._run([ids[index] for index in batch])
        return vectors

    def _run(self, batch: list[list[int]]) -> np.ndarray:
        width = max(len(sequence) for sequence in batch)
        input_ids = np.zeros((len(batch), width), dtype=np.int64)  # 0 is [PAD]
        attention_mask = np.zeros_like(input_ids)
        for row, sequence in enumerate(batch):
            input_ids[row, : len(sequence)] = sequence
            attention_mask[row, : len(sequence)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
        try:
            (result,) = self._session.run([self._output], {name: feeds[name] for name in self._inputs})
        except Exception as exc:  # onnxruntime raises its own exception types
            raise EmbeddingFailed(f"the embedding model failed to run ({type(exc).__name__})") from exc
        if self._pool:
            result = mean_pool_l2(result, attention_mask)
        if result.shape != (len(batch), self.dimension) or not np.isfinite(result).all():
            raise EmbeddingFailed("the embedding model returned malformed vectors")
        return result


def _batches(order: list[int], lengths: list[int]) -> list[list[int]]:
    """`order` (indexes by ascending length) cut into batches whose padded tokens (texts × longest)
    fit `BATCH_TOKENS`; a text longer than the budget goes alone."""
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
    return Embedder(session, tokens, manifest, graph_file)
