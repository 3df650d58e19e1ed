"""The model's WordPiece tokenizer with truncation and padding disabled, for counting and encoding.

The shipped `tokenizer.json` truncates at 128 tokens and pads to 128; both would falsify counts
and waste compute, so they are switched off and batches are padded by the embedder instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .constants import DEFAULT_VARIANT
from .errors import EmbedderInitError, ModelUnavailable

if TYPE_CHECKING:
    from tokenizers import Tokenizer


class TokenCounter:
    """Counts model tokens, special tokens ([CLS], [SEP]) included."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer

    @classmethod
    def from_json(cls, text: str) -> TokenCounter:
        """Build from the contents of a `tokenizer.json`; raises ValueError when it is not one."""
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_str(text))
        except Exception as exc:  # tokenizers raises plain Exception for malformed input
            raise ValueError("not a valid tokenizer.json") from exc

    def token_count(self, text: str) -> int:
        return len(self._tokenizer.encode(text).ids)

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, special tokens included, neither truncated nor padded."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]

    def token_spans(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple[int, int] | None]]]:
        """Token ids of each text (as `token_ids`) and, per token, the characters of the text it came
        from as (start, end); None for a special token."""
        return [
            (encoding.ids, [None if special else (start, end)
                            for (start, end), special in zip(encoding.offsets, encoding.special_tokens_mask,
                                                             strict=True)])
            for encoding in self._tokenizer.encode_batch(list(texts))
        ]  # fmt: skip


def load_tokenizer(cache_dir: Path | None = None) -> TokenCounter:
    """The pinned tokenizer from an installed model package, else from the model cache in `cache_dir`."""
    from .sources import PINNED_SHA256, find_offline_sources

    for source in find_offline_sources():
        try:
            data = (source.directory / "tokenizer.json").read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == PINNED_SHA256["tokenizer.json"]:
            return TokenCounter.from_json(data.decode("utf-8"))
    if cache_dir is None:
        raise ModelUnavailable("no verified tokenizer is installed; install the model package or run `sbuf init`")
    from .cache import TOKENIZER_FILE, installed_model, reading

    with reading(cache_dir):
        directory, _ = installed_model(cache_dir, DEFAULT_VARIANT)
        try:
            return TokenCounter.from_json((directory / TOKENIZER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EmbedderInitError("the cached tokenizer cannot be read; run `sbuf init` to repair it") from exc
