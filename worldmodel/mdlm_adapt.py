"""An MDLM initialised from a trained autoregressive checkpoint (AR-to-diffusion adaptation,
the way DiffuLLaMA and Dream start a diffusion model from an AR one).

    model, tok = mdlm_from_ar("path/to/ar", target_len=113)   # then train it as an MDLM
    # model.cfg.shift and model.cfg.causal_prefix are on

Why: trained from scratch at the AR default's size and budget the MDLM learns the
observation's content far more slowly than the AR model does (README, "AR against MDLM").
An AR checkpoint already encodes the prefix and predicts observation tokens; adapting it
keeps that and only has to learn to fill masked positions in parallel.

What carries over: the AR model's weights one to one (embedding, every layer's attention
and SwiGLU, the norms, the copy head), its tokenizer, rotary base and norm epsilon. Two
switches make the fresh MDLM compute what the AR model computes where it can:
- `causal_prefix`: the prefix attends causally, so its keys and values are exactly the AR
  model's prefill of the prompt;
- `shift`: target position j is read from the hidden state at position j - 1 (target 0
  from the prompt's last token), the AR model's next-token alignment. So before any MDLM
  training, the first target position's distribution is the AR model's first-token
  distribution (a test checks this); the later positions differ only in that the target
  attends both ways and sees masks where AR saw tokens.
The mask token's embedding row is new (initialised as the MDLM's other weights are).

Accepted: a Llama (`model_type` "llama") or the project's copy-head Llama
("simworld_copy_llama") with tied input and output embeddings, SiLU, no biases and default
rotary positions, as `simworld train sft` writes them. Anything else is refused with the
field that differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from simworld.worldmodel.mdlm import MDLM, MDLMConfig
from simworld.worldmodel.tokenizer import load_tokenizer

AR_TYPES = ("llama", "simworld_copy_llama")


def mdlm_config_from_ar(ar_dir: str | Path, **overrides: Any) -> tuple[MDLMConfig, int]:
    """The MDLM shape matching the AR checkpoint in `ar_dir` (shift and causal prefix on),
    with fields overridden by keyword, and the AR model's vocabulary size."""
    path = Path(ar_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; an AR checkpoint directory has one")
    raw = json.loads(path.read_text())
    where = f"{path}"
    if raw.get("model_type") not in AR_TYPES:
        raise ValueError(f"{where}: model_type {raw.get('model_type')!r} is not one of {AR_TYPES}")
    wrong = {
        "tie_word_embeddings": (raw.get("tie_word_embeddings", False), True),
        "hidden_act": (raw.get("hidden_act", "silu"), "silu"),
        "attention_bias": (raw.get("attention_bias", False), False),
        "mlp_bias": (raw.get("mlp_bias", False), False),
    }
    for field, (got, want) in wrong.items():
        if got != want:
            raise ValueError(f"{where}: {field} is {got!r}; adapting needs {want!r}")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"{where}: rope_type {rope.get('rope_type')!r}; only 'default' adapts")
    hidden, heads = int(raw["hidden_size"]), int(raw["num_attention_heads"])
    if int(raw.get("head_dim") or hidden // heads) != hidden // heads:
        raise ValueError(f"{where}: head_dim {raw['head_dim']} is not hidden_size / heads")
    cfg = MDLMConfig(
        hidden_size=hidden,
        n_layers=int(raw["num_hidden_layers"]),
        n_heads=heads,
        n_kv_heads=int(raw.get("num_key_value_heads") or heads),
        intermediate_size=int(raw["intermediate_size"]),
        max_positions=int(raw.get("max_position_embeddings", 1024)),
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        copy_dim=int(raw.get("copy_dim", 0)),
        copy_next=bool(raw.get("copy_next", False)),
        shift=True,
        causal_prefix=True,
        norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
    )
    fields = {**cfg.to_dict(), **overrides}
    return MDLMConfig(**fields), int(raw["vocab_size"])


def ar_state_for_mdlm(ar: dict[str, Tensor], model: MDLM) -> dict[str, Tensor]:
    """The MDLM state dict holding the AR weights `ar` (a Hugging Face Llama state dict);
    the mask token's row keeps `model`'s own initialisation."""

    def take(name: str) -> Tensor:
        if name not in ar:
            raise ValueError(f"the AR weights have no {name!r}: not a Llama checkpoint")
        return ar[name]

    state = {k: v.clone() for k, v in model.state_dict().items()}
    embed = take("model.embed_tokens.weight")  # (V, D)
    if embed.shape[0] != model.vocab_size:
        raise ValueError(f"AR vocabulary {embed.shape[0]} != the MDLM's {model.vocab_size}")
    state["embed.weight"][: model.vocab_size] = embed
    for i in range(model.cfg.n_layers):
        a, m = f"model.layers.{i}.", f"layers.{i}."
        state[m + "attn_norm.weight"] = take(a + "input_layernorm.weight")
        state[m + "wq.weight"] = take(a + "self_attn.q_proj.weight")
        kv = (take(a + "self_attn.k_proj.weight"), take(a + "self_attn.v_proj.weight"))
        state[m + "wkv.weight"] = torch.cat(kv, 0)  # wkv's outputs: keys, then values
        state[m + "wo.weight"] = take(a + "self_attn.o_proj.weight")
        state[m + "mlp_norm.weight"] = take(a + "post_attention_layernorm.weight")
        gate_up = (take(a + "mlp.gate_proj.weight"), take(a + "mlp.up_proj.weight"))
        state[m + "w_gate_up.weight"] = torch.cat(gate_up, 0)  # chunked gate, then up
        state[m + "w_down.weight"] = take(a + "mlp.down_proj.weight")
    state["norm.weight"] = take("model.norm.weight")
    if model.cfg.copy_dim:
        for name in ("copy_q.weight", "copy_k.weight", "copy_gate.weight", "copy_gate.bias"):
            state[name] = take(name)
    for name, value in state.items():
        if value.shape != model.state_dict()[name].shape:
            raise ValueError(f"{name}: AR shape {tuple(value.shape)} does not fit the MDLM")
    return state


def mdlm_from_ar(ar_dir: str | Path, **overrides: Any) -> tuple[MDLM, PreTrainedTokenizerBase]:
    """An MDLM carrying the weights of the AR checkpoint in `ar_dir` (fields of its
    `MDLMConfig` overridden by keyword, e.g. `target_len`), and that checkpoint's
    tokenizer."""
    path = Path(ar_dir)
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: not found; adapting reads safetensors weights")
    cfg, vocab_size = mdlm_config_from_ar(path, **overrides)
    tokenizer = load_tokenizer(path)
    if len(tokenizer) > vocab_size:
        raise ValueError(f"{path}: the tokenizer has {len(tokenizer)} ids, the model {vocab_size}")
    model = MDLM(cfg, vocab_size)
    model.load_state_dict(ar_state_for_mdlm(load_file(str(weights)), model))
    return model, tokenizer


__all__ = ["AR_TYPES", "ar_state_for_mdlm", "mdlm_config_from_ar", "mdlm_from_ar"]
