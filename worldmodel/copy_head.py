"""A Llama with a copy (pointer) head: the next token is either generated from the
vocabulary or copied from a position of the sequence so far.

    model = build_model(ARConfig.preset("default"), vocab_size=len(tok))   # copy_head=True
    logp = model(input_ids=ids).logits        # (B, T, V): log-probabilities, normalized

Why: a tool result mostly repeats what its context holds: file and folder names, ids,
message texts, prices from the state. A small model trained from scratch on a few hundred
scenarios learns to *recall* the names of its train scenarios long before it learns to
*copy* (an induction head); measured on BFCL val pairs after 600 steps, whole-target exact
match went from 0.04 without the head to 0.19 with it. The pointer-generator idea (See et
al., 2017) applied to a decoder-only model:

    p(w | x_<=t) = g_t * softmax(W h_t)[w] + (1 - g_t) * sum_{j <= t, x_j = w} a_tj
    a_t = softmax_j((Q h_t) . (K h_j) / sqrt(d)),  g_t = sigmoid(G h_t + b)

where h is the final (normed) hidden state, and j ranges over the positions the token at
t may attend to (causal, within its own packed example; `pointer_mask`). The model's
`logits` are log p, so every consumer that takes log_softmax or softmax of logits (the SFT
loss, GRPO's log-probs, samplers) sees exactly this distribution.

`copy_next=True` (a config field; False in checkpoints from before it) points at the token
*after* the attended position instead: the sum runs over j < t with x_{j+1} = w. Copying
a span then means matching the token just written with its earlier occurrence and taking
what followed it there, which the pointer can do from the current token alone. With
`x_j = w` (the original form) the key at j has to carry the token before j. A position
with no earlier position in its example copies nothing (the mixture is the vocabulary
head's distribution there). Measured once on the default recipe (README, "The copy head
pointing at the next token"): lower val loss and more FrozenLake boards right, fewer BFCL
results, and the loops inside copied spans that motivated it (`'report.pdfdfdf…`) stayed;
so it is off by default.

Decoding: the own decode path (`engines/lean.py`) caches each position's pointer key and
token beside its attention keys and values. HF `generate` has no place for them in its
cache, so this model refuses incremental decoding (a past cache with content) and the
transformers engine runs `generate` without a cache for it (every step recomputes the
sequence: correct, slow; the own path is the one to use).

The checkpoint is a normal Hugging Face directory with `model_type` "simworld_copy_llama";
`register()` (called by the loaders) makes `AutoModelForCausalLM` know it.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard

import torch
from torch import Tensor, nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "simworld_copy_llama"
EPS = 1e-9  # floor under p before the log: a token neither generated nor copied


class CopyLlamaConfig(LlamaConfig):  # type: ignore[no-untyped-call]
    """A LlamaConfig with the copy head's width."""

    model_type = MODEL_TYPE

    def __init__(self, copy_dim: int = 64, copy_next: bool = False, **kwargs: Any) -> None:
        self.copy_dim = copy_dim
        self.copy_next = copy_next
        super().__init__(**kwargs)


class CopyLlamaForCausalLM(LlamaForCausalLM):  # type: ignore[no-untyped-call]
    """LlamaForCausalLM whose logits are the log-probabilities of the generate-or-copy
    mixture (module docstring)."""

    config_class = CopyLlamaConfig

    def __init__(self, config: CopyLlamaConfig) -> None:
        super().__init__(config)
        D, dc = config.hidden_size, config.copy_dim
        self.copy_q = nn.Linear(D, dc, bias=False)
        self.copy_k = nn.Linear(D, dc, bias=False)
        self.copy_gate = nn.Linear(D, 1)
        self.post_init()  # type: ignore[no-untyped-call]

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        if cache is not None and cache.get_seq_length() > 0:
            raise NotImplementedError(
                "the copy head needs every position's hidden state: decode with the own "
                "path (engines/lean.py) or generate(use_cache=False)"
            )
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=use_cache,
            **kwargs,
        )
        h = out.last_hidden_state  # (B, T, D), after the final norm
        allowed = pointer_mask(attention_mask, input_ids.shape[1], input_ids.device)
        keys, ids = self.copy_k(h), input_ids
        if self.config.copy_next:  # key j offers the token at j + 1
            keys, ids, allowed = offering_next(keys, ids, allowed)
        logp = mixture_logprobs(
            self.lm_head(h), self.copy_q(h), keys, self.copy_gate(h), ids, allowed
        )  # (B, T, V)
        return CausalLMOutputWithPast(logits=logp, cache=out.cache)


def mixture_logprobs(
    logits: Tensor, query: Tensor, keys: Tensor, gate: Tensor, ids: Tensor, allowed: Tensor
) -> Tensor:
    """log p of the mixture for T query positions over S key positions.

    logits (B, T, V) from the vocabulary head; query (B, T, dc); keys (B, S, dc); gate
    (B, T, 1) before the sigmoid; ids (B, S) the token each key position offers; allowed
    (B, T, S) which positions each query may copy from (a row that allows none copies
    nothing: its distribution is the vocabulary head's)."""
    with torch.autocast(logits.device.type, enabled=False):  # the mixture stays in fp32
        return _mixture(logits.float(), query.float(), keys.float(), gate.float(), ids, allowed)


def _mixture(
    logits: Tensor, query: Tensor, keys: Tensor, gate: Tensor, ids: Tensor, allowed: Tensor
) -> Tensor:
    p_vocab = torch.softmax(logits, dim=-1)  # (B, T, V)
    scores = query @ keys.transpose(1, 2) / math.sqrt(query.shape[-1])
    attn = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # (B, T, S)
    B, T, S = attn.shape
    index = ids[:, None, :].expand(B, T, S)  # (B, T, S)
    g = torch.sigmoid(gate)  # (B, T, 1)
    anything = allowed.any(dim=-1, keepdim=True)  # (B | 1, T, 1)
    if not bool(anything.all()):  # a row that may copy nothing generates: g = 1, no NaN
        attn, g = attn.masked_fill(~allowed, 0.0), torch.where(anything, g, 1.0)
    p_copy = torch.zeros_like(p_vocab).scatter_add_(2, index, attn)  # (B, T, V)
    return torch.log(g * p_vocab + (1 - g) * p_copy + EPS)  # (B, T, V)


def pointer_mask(attention_mask: Tensor | None, T: int, device: torch.device) -> Tensor:
    """(B or 1, T, T) boolean: which positions each position may copy from. A 4-D boolean
    mask (packed rows) is used as is; a 2-D padding mask (B, T) becomes causal over its
    valid keys; None is causal. A position always sees itself, so no row is empty."""
    eye = torch.eye(T, dtype=torch.bool, device=device)  # (T, T)
    if attention_mask is not None and attention_mask.dim() == 4:
        if attention_mask.dtype != torch.bool:  # an additive float mask: 0 where allowed
            return (attention_mask[:, 0] == 0) | eye
        return attention_mask[:, 0] | eye
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None]  # (1, T, T)
    if attention_mask is None:
        return causal
    valid = attention_mask.bool()[:, None, :]  # (B, 1, T)
    return (causal & valid) | eye


def next_token_mask(allowed: Tensor) -> Tensor:
    """(.., T, S) pointer mask -> (.., T, S - 1) for a pointer at the next token: position
    j offers token j + 1, so both must be visible (j + 1 <= t, one packed example)."""
    return allowed[..., :-1] & allowed[..., 1:]


def offering_next(keys: Tensor, ids: Tensor, allowed: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The pointer's keys (B, S, dc), tokens (B, S) and mask (.., S) over S positions ->
    the same over S - 1, position j offering the token at j + 1 (`copy_next`)."""
    return keys[:, :-1], ids[:, 1:], next_token_mask(allowed)


def is_copy_model(model: Any) -> TypeGuard[CopyLlamaForCausalLM]:
    return isinstance(model, CopyLlamaForCausalLM)


def without_copy_head(model: CopyLlamaForCausalLM) -> LlamaForCausalLM:
    """The same Llama without the copy head (its weights shared, not copied): what HF
    `generate` with a KV cache can run, as a baseline of decode machinery at equal size."""
    drop = ("copy_dim", "copy_next", "model_type")
    shape = {k: v for k, v in model.config.to_dict().items() if k not in drop}
    plain = LlamaForCausalLM(LlamaConfig(**shape))
    plain.model, plain.lm_head = model.model, model.lm_head
    plain.train(model.training)
    return plain


_REGISTERED = False


def register() -> None:
    """Make `AutoConfig`/`AutoModelForCausalLM` load "simworld_copy_llama" checkpoints
    (idempotent)."""
    global _REGISTERED
    if not _REGISTERED:
        AutoConfig.register(MODEL_TYPE, CopyLlamaConfig)
        AutoModelForCausalLM.register(CopyLlamaConfig, CopyLlamaForCausalLM)
        _REGISTERED = True


__all__ = [
    "MODEL_TYPE",
    "CopyLlamaConfig",
    "CopyLlamaForCausalLM",
    "is_copy_model",
    "mixture_logprobs",
    "next_token_mask",
    "offering_next",
    "pointer_mask",
    "register",
    "without_copy_head",
]
