"""Sentence embeddings for semantic recall: all-MiniLM-L6-v2 on onnxruntime from a verified local cache.

Importing this package is cheap: numpy, onnx, onnxruntime and tokenizers load on first use.
`acquire_model` prepares the cache (`sbuf init`), `load_embedder` opens it with a cheap manifest check,
`verify_model` re-hashes it (`doctor`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .constants import DEFAULT_VARIANT, DIMENSION, MAX_TOKENS, MODEL_ID, VARIANTS
from .errors import EmbedderInitError, EmbeddingFailed, ModelUnavailable
from .manifest import ModelManifest

if TYPE_CHECKING:
    from .embedder import Embedder
    from .tokens import TokenCounter

__all__ = [
    "DEFAULT_VARIANT",
    "DIMENSION",
    "MAX_TOKENS",
    "MODEL_ID",
    "VARIANTS",
    "EmbedderInitError",
    "EmbeddingFailed",
    "ModelUnavailable",
    "Embedder",
    "ModelManifest",
    "TokenCounter",
    "acquire_model",
    "load_embedder",
    "open_embedder",
    "load_tokenizer",
    "verify_model",
    "verify_optimized_graph",
]


def acquire_model(
    cache_dir: Path,
    *,
    variant: str = DEFAULT_VARIANT,
    progress: Callable[[str], None] | None = None,
    base_url: str | None = None,
) -> ModelManifest:
    """Build (from an installed model package) or download the model into `<cache_dir>/models/`.

    Safe to call repeatedly and from several processes; a ready model is only re-verified.
    `base_url` replaces the pinned download location. Raises ModelUnavailable.
    """
    from .cache import acquire

    return acquire(cache_dir, variant, progress=progress, base_url=base_url)


def load_embedder(cache_dir: Path, *, variant: str = DEFAULT_VARIANT) -> Embedder:
    """Open the acquired model (the built `variant`, else a downloaded one) without hashing it.

    Raises ModelUnavailable when nothing was acquired, EmbedderInitError when the cache is damaged.
    """
    from .embedder import load

    return load(cache_dir, variant)


def open_embedder(cache_dir: Path) -> tuple[Embedder | None, str | None]:
    """The local model, or None with the semantic fallback reason (`model_unavailable` when it was
    never acquired, `embedder_initialization_failed` when the cache is damaged). Never acquires."""
    try:
        return load_embedder(cache_dir), None
    except ModelUnavailable:
        return None, "model_unavailable"
    except EmbedderInitError:
        return None, "embedder_initialization_failed"


def verify_model(cache_dir: Path, *, variant: str = DEFAULT_VARIANT) -> list[str]:
    """Fully re-hash the model `load_embedder` would open; returns the problems (empty when ready)."""
    from .cache import verify

    return verify(cache_dir, variant)


def verify_optimized_graph(cache_dir: Path, *, variant: str = DEFAULT_VARIANT) -> str | None:
    """Why the model would open from `model.onnx`, about twice as slowly, instead of its saved
    optimized graph (`sbuf init` saves one); None when the graph is used."""
    from .cache import verify_optimized

    return verify_optimized(cache_dir, variant)


def load_tokenizer(cache_dir: Path | None = None) -> TokenCounter:
    """The pinned tokenizer (truncation and padding disabled) for counting model tokens.

    Taken from an installed model package, else from the model cache in `cache_dir`.
    """
    from .tokens import load_tokenizer as load

    return load(cache_dir)


def __getattr__(name: str) -> Any:
    if name == "Embedder":
        from .embedder import Embedder

        return Embedder
    if name == "TokenCounter":
        from .tokens import TokenCounter

        return TokenCounter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
