"""An independent NumPy float64 forward pass of all-MiniLM-L6-v2 (BERT, mean pooling, L2 norm)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def pad(token_ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """input_ids and attention_mask, right-padded with 0 to the longest sequence."""
    width = max(len(ids) for ids in token_ids)
    input_ids = np.zeros((len(token_ids), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, ids in enumerate(token_ids):
        input_ids[row, : len(ids)] = ids
        mask[row, : len(ids)] = 1
    return input_ids, mask


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def sentence_embeddings(w: dict[str, np.ndarray], config: dict[str, Any], token_ids: list[list[int]]) -> np.ndarray:
    """[batch, hidden] sentence embeddings for already tokenized inputs, from float64 weights `w`."""
    input_ids, mask = pad(token_ids)
    batch, seq = input_ids.shape
    hidden, heads, eps = config["hidden_size"], config["num_attention_heads"], config["layer_norm_eps"]
    head_dim = hidden // heads

    x = (
        w["embeddings.word_embeddings.weight"][input_ids]
        + w["embeddings.position_embeddings.weight"][:seq][None, :, :]
        + w["embeddings.token_type_embeddings.weight"][np.zeros_like(input_ids)]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    bias = np.where(mask[:, None, None, :] == 1, 0.0, -1e30)

    def dense(t: np.ndarray, name: str) -> np.ndarray:
        return t @ w[name + ".weight"].T + w[name + ".bias"]

    def to_heads(t: np.ndarray) -> np.ndarray:
        return t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        q = to_heads(dense(x, p + "attention.self.query"))
        k = to_heads(dense(x, p + "attention.self.key"))
        v = to_heads(dense(x, p + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + bias
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = _layer_norm(
            dense(context, p + "attention.output.dense") + x,
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        h = dense(x, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(
            dense(h, p + "output.dense") + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps
        )

    m = mask[:, :, None].astype(np.float64)
    pooled = (x * m).sum(axis=1) / m.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
