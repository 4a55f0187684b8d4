"""A lean forward pass over a Hugging Face Llama's weights, for the own decode path.

HF's modules cost about 15 ms of Python per decode step for a 5M-parameter model (masks,
cache objects, hooks, per-module dispatch), against about 0.1 ms of arithmetic. This module
reads the same weight tensors (no copy, except q/k/v and gate/up which are concatenated so
each is one matmul) and runs the Llama block as a handful of torch ops per layer, writing
keys and values into preallocated cache tensors. Same maths as `LlamaForCausalLM`: RMSNorm,
rotary embeddings (rotate-half convention, the model's own `inv_freq` and scaling), grouped
query attention, SiLU-gated MLP.

Supported: `model_type == "llama"` without attention or MLP biases, with a rotary scaling
that only changes `inv_freq` (default, linear, llama3), and the same Llama with a copy head
(`copy_head.py`, "simworld_copy_llama"): then the cache also keeps each slot's pointer key
and token, and `logits` are the log-probabilities of the generate-or-copy mixture. Anything
else raises `NotImplementedError` naming the reason; the engine's `decode="generate"` still
runs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel

from simworld.worldmodel.copy_head import MODEL_TYPE as COPY_MODEL_TYPE
from simworld.worldmodel.copy_head import is_copy_model, mixture_logprobs, offering_next

STATIC_ROPE_TYPES = ("default", "linear", "llama3")
PREFILL_BLOCK = 32  # prefill attention runs in query blocks aligned to this many slots
DECODE_BLOCK = 64  # a decode row attends to its span rounded up to this many slots


@dataclass
class KVCache:
    """Per-layer key and value tensors, each (B, n_kv_heads, capacity, head_dim); with a
    copy head also each slot's pointer key (B, 1, capacity, copy_dim) and token
    (B, 1, capacity, 1). Every tensor keeps its slots on dim 2."""

    k: list[Tensor]
    v: list[Tensor]
    copy_k: Tensor | None = None
    ids: Tensor | None = None

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    def tensors(self) -> list[Tensor]:
        """Every tensor of the cache (slots on dim 2), for copying slots between caches."""
        extra = [t for t in (self.copy_k, self.ids) if t is not None]
        return [*self.k, *self.v, *extra]

    def select(self, rows: Tensor) -> KVCache:
        """The cache of batch rows `rows` only."""
        pick = [t[rows] for t in self.tensors()]
        n = len(self.k)
        copy_k, ids = (pick[2 * n], pick[2 * n + 1]) if self.copy_k is not None else (None, None)
        return KVCache(k=pick[:n], v=pick[n : 2 * n], copy_k=copy_k, ids=ids)


@dataclass
class PrefillPart:
    """One prompt of `LeanLlama.prefill`: `ids` go to slots [start, end) of `cache` (batch
    1); with a `donor` (an earlier part's cache), its slots [0, start) are copied in."""

    cache: KVCache
    start: int
    ids: list[int]
    donor: KVCache | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.ids)


def _copy_donor(part: PrefillPart, layers: Iterable[int], with_copy_head: bool) -> None:
    """Copy slots [0, part.start) of the given layers (and the copy head's keys and tokens)
    from the part's donor, if it has one."""
    src, dst, n = part.donor, part.cache, part.start
    if src is None or n == 0:
        return
    for i in layers:
        dst.k[i][:, :, :n] = src.k[i][:, :, :n]
        dst.v[i][:, :, :n] = src.v[i][:, :, :n]
    if with_copy_head and dst.copy_k is not None:
        assert src.copy_k is not None and src.ids is not None and dst.ids is not None
        dst.copy_k[:, :, :n] = src.copy_k[:, :, :n]
        dst.ids[:, :, :n] = src.ids[:, :, :n]


@dataclass
class _Copy:
    query: Tensor  # (dc, D)
    key: Tensor  # (dc, D)
    gate: Tensor  # (1, D)
    gate_bias: Tensor  # (1,)
    next: bool  # slot j offers the token at j + 1 (copy_head.py's copy_next)


@dataclass
class _Layer:
    in_norm: Tensor  # (D,)
    wqkv: Tensor  # ((H + 2 * Hkv) * hd, D)
    wo: Tensor  # (D, H * hd)
    post_norm: Tensor  # (D,)
    wgu: Tensor  # (2 * I, D)
    wdown: Tensor  # (D, I)


def unsupported_reason(model: PreTrainedModel) -> str | None:
    """Why the lean forward cannot run `model`, or None when it can."""
    cfg = model.config
    if cfg.model_type not in ("llama", COPY_MODEL_TYPE):
        return f"model_type {cfg.model_type!r} (only 'llama' and {COPY_MODEL_TYPE!r} are supported)"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "attention or MLP biases"
    if cfg.hidden_act != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    rope_type = model.model.rotary_emb.rope_type
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope type {rope_type!r} (supported: {', '.join(STATIC_ROPE_TYPES)})"
    return None


class LeanLlama:
    """The weights of a `LlamaForCausalLM` and a forward pass without module overhead."""

    def __init__(self, model: PreTrainedModel) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise NotImplementedError(f"the own decode path cannot run this model: {reason}")
        cfg = model.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        inner = model.model
        self.embed = inner.embed_tokens.weight.detach()  # (V, D)
        self.final_norm = inner.norm.weight.detach()  # (D,)
        self.lm_head = model.lm_head.weight.detach()  # (V, D)
        self.layers = [_extract_layer(block) for block in inner.layers]
        rotary = inner.rotary_emb
        self.inv_freq = rotary.inv_freq.detach().float()  # (hd / 2,)
        self.rope_scale = float(rotary.attention_scaling)
        self.device, self.dtype = self.embed.device, self.embed.dtype
        # (cos, sin), replaced as one tuple: threads that run the model at once (continuous
        # batching's prefill and decode) never read a cos and a sin of different tables
        empty = torch.empty(0, self.head_dim, device=self.device)
        self._rope_table: tuple[Tensor, Tensor] = (empty, empty)
        self.copy: _Copy | None = None
        if is_copy_model(model):
            head: Any = model  # typed Any: the copy head's layers are untyped attributes
            self.copy = _Copy(
                query=head.copy_q.weight.detach(),
                key=head.copy_k.weight.detach(),
                gate=head.copy_gate.weight.detach(),
                gate_bias=head.copy_gate.bias.detach(),
                next=bool(getattr(head.config, "copy_next", False)),
            )

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        shape = (batch, self.n_kv_heads, capacity, self.head_dim)
        n = len(self.layers)
        empty = [torch.empty(shape, dtype=self.dtype, device=self.device) for _ in range(2 * n)]
        cache = KVCache(k=empty[:n], v=empty[n:])
        if self.copy is not None:
            dc = self.copy.key.shape[0]
            cache.copy_k = torch.empty(batch, 1, capacity, dc, dtype=self.dtype, device=self.device)
            cache.ids = torch.zeros(batch, 1, capacity, 1, dtype=torch.long, device=self.device)
        return cache

    def _rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin for positions `pos` (B, T), each (B, 1, T, hd); tables grow on demand."""
        need = int(pos.max()) + 1
        cos, sin = self._rope_table
        if need > cos.shape[0]:
            size = max(need, 2 * cos.shape[0], 256)
            t = torch.arange(size, device=self.device, dtype=torch.float32)
            freqs = t[:, None] * self.inv_freq[None, :]  # (size, hd / 2)
            emb = torch.cat((freqs, freqs), dim=-1)  # (size, hd)
            cos = (emb.cos() * self.rope_scale).to(self.dtype)
            sin = (emb.sin() * self.rope_scale).to(self.dtype)
            self._rope_table = (cos, sin)
        return cos[pos].unsqueeze(1), sin[pos].unsqueeze(1)  # (B, 1, T, hd)

    @torch.inference_mode()
    def forward(
        self,
        ids: Tensor,
        pos: Tensor,
        cache: KVCache,
        start: int,
        key_valid: Tensor,
        firsts: list[int] | None = None,
    ) -> Tensor:
        """Run tokens `ids` (B, T) at rotary positions `pos` (B, T), writing their keys and
        values to cache slots [start, start + T). `key_valid` (B, >= start + T) marks the
        slots a row may attend to (its padding is False); `firsts` (one decode token a row,
        T == 1), when given, is each row's first valid slot, its valid slots then running
        to the end, with `decode_margin(span)` slots of finite numbers before it (see
        `_attend_decode`). Returns the last position's hidden state after the final norm, (B, D);
        with a copy head every position's pointer key and token go to the cache too."""
        B, T = ids.shape
        end = start + T
        gqa = self.n_kv_heads != self.n_heads
        if firsts is None:
            mask = _attention_mask(key_valid[:, :end], start, T)  # (B, 1, T, end)
        else:  # decode: an additive mask, built once for every layer's calls
            mask = torch.zeros(B, 1, 1, end, dtype=self.dtype, device=self.device)
            mask.masked_fill_(~key_valid[:, None, None, :end], float("-inf"))  # (B, 1, 1, end)
        cos, sin = self._rope(pos)
        x = F.embedding(ids, self.embed)  # (B, T, D)
        for layer, k_cache, v_cache in zip(self.layers, cache.k, cache.v, strict=True):
            q, k_cache[:, :, start:end], v_cache[:, :, start:end] = self._qkv(layer, x, cos, sin)
            a = _attend(q, k_cache, v_cache, mask, start, firsts, gqa)  # (B, H, T, hd)
            x = self._rest_of_layer(layer, x, a)  # (B, T, D)
        if self.copy is None:
            return F.rms_norm(x[:, -1], (self.hidden,), self.final_norm, self.eps)  # (B, D)
        assert cache.copy_k is not None and cache.ids is not None
        h = F.rms_norm(x, (self.hidden,), self.final_norm, self.eps)  # (B, T, D)
        cache.copy_k[:, 0, start:end] = F.linear(h, self.copy.key)  # (B, T, dc)
        cache.ids[:, 0, start:end, 0] = ids
        return h[:, -1]  # (B, D)

    @torch.inference_mode()
    def prefill(self, parts: Sequence[PrefillPart]) -> None:
        """Prefill several prompts in one pass: part p's tokens go to slots [p.start,
        p.start + len(p.ids)) of its batch-1 cache at rotary positions equal to their slots,
        the slots before p.start holding the prompt's earlier keys (or copied from
        `p.donor`, an earlier part's cache, layer by layer as they are computed). The
        matmuls, norms and rotary run over every part's tokens at once; attention runs per
        part, as `forward` runs one prompt alone (query blocks aligned to PREFILL_BLOCK), so
        each part gets the bits it gets prefilled alone."""
        spans = list(pairwise(accumulate((len(p.ids) for p in parts), initial=0)))
        n = spans[-1][1] if spans else 0
        if n == 0:
            for p in parts:
                _copy_donor(p, range(len(self.layers)), with_copy_head=True)
            return
        gqa = self.n_kv_heads != self.n_heads
        dev = self.device
        ids = torch.tensor([[t for p in parts for t in p.ids]], device=dev)  # (1, N)
        pos = torch.cat([torch.arange(p.start, p.start + len(p.ids), device=dev) for p in parts])[
            None
        ]  # (1, N)
        masks = [
            _attention_mask(torch.ones(1, p.end, dtype=torch.bool, device=dev), p.start, len(p.ids))
            for p in parts
        ]  # (1, 1, T_p, end_p) each
        cos, sin = self._rope(pos)
        x = F.embedding(ids, self.embed)  # (1, N, D)
        for layer_no, layer in enumerate(self.layers):
            q, k, v = self._qkv(layer, x, cos, sin)  # (1, H | Hkv, N, hd)
            outs = []
            for p, (a, b), mask in zip(parts, spans, masks, strict=True):
                p.cache.k[layer_no][:, :, p.start : p.end] = k[:, :, a:b]
                p.cache.v[layer_no][:, :, p.start : p.end] = v[:, :, a:b]
                _copy_donor(p, (layer_no,), with_copy_head=False)
                if b > a:
                    k_cache, v_cache = p.cache.k[layer_no], p.cache.v[layer_no]
                    outs.append(_attend(q[:, :, a:b], k_cache, v_cache, mask, p.start, None, gqa))
            x = self._rest_of_layer(layer, x, torch.cat(outs, dim=2))  # (1, N, D)
        if self.copy is None:
            return
        h = F.rms_norm(x, (self.hidden,), self.final_norm, self.eps)  # (1, N, D)
        copy_k = F.linear(h, self.copy.key)  # (1, N, dc)
        for p, (a, b) in zip(parts, spans, strict=True):
            assert p.cache.copy_k is not None and p.cache.ids is not None
            p.cache.copy_k[:, 0, p.start : p.end] = copy_k[:, a:b]
            p.cache.ids[:, 0, p.start : p.end, 0] = ids[:, a:b]
            _copy_donor(p, (), with_copy_head=True)

    def _qkv(
        self, layer: _Layer, x: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """A layer's queries (B, H, T, hd) and keys (B, Hkv, T, hd), rotated, and values
        (B, Hkv, T, hd) for inputs x (B, T, D)."""
        B, T, _ = x.shape
        H, Hkv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        h = F.rms_norm(x, (self.hidden,), layer.in_norm, self.eps)
        qkv = F.linear(h, layer.wqkv)  # (B, T, (H + 2 * Hkv) * hd)
        q, k, v = torch.split(qkv, [H * hd, Hkv * hd, Hkv * hd], dim=-1)
        q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        v = v.view(B, T, Hkv, hd).transpose(1, 2)  # (B, Hkv, T, hd)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def _rest_of_layer(self, layer: _Layer, x: Tensor, a: Tensor) -> Tensor:
        """The residual stream x (B, T, D) after a layer whose attention gave a (B, H, T,
        hd): the output projection, then the SiLU-gated MLP."""
        B, T, _ = x.shape
        x = x + F.linear(a.transpose(1, 2).reshape(B, T, -1), layer.wo)  # (B, T, D)
        h = F.rms_norm(x, (self.hidden,), layer.post_norm, self.eps)
        gate, up = F.linear(h, layer.wgu).chunk(2, dim=-1)  # (B, T, I) each
        return x + F.linear(F.silu(gate) * up, layer.wdown)  # (B, T, D)

    def logits(self, hidden: Tensor, cache: KVCache, key_valid: Tensor, end: int) -> Tensor:
        """Next-token logits (B, V) from the last hidden states (B, D); with a copy head the
        log-probabilities of the mixture, pointing at the valid slots before `end`."""
        logits = F.linear(hidden, self.lm_head).float()  # (B, V)
        if self.copy is None:
            return logits
        assert cache.copy_k is not None and cache.ids is not None
        c = self.copy
        query = F.linear(hidden, c.query)[:, None]  # (B, 1, dc)
        gate = F.linear(hidden, c.gate, c.gate_bias)[:, None]  # (B, 1, 1)
        keys = cache.copy_k[:, 0, :end]  # (B, S, dc)
        ids = cache.ids[:, 0, :end, 0]  # (B, S)
        allowed = key_valid[:, None, :end]  # (B, 1, S)
        if c.next:  # slot j offers the token at slot j + 1: S - 1 slots
            keys, ids, allowed = offering_next(keys, ids, allowed)
        return mixture_logprobs(logits[:, None], query, keys, gate, ids, allowed)[:, 0]


def _extract_layer(block: Any) -> _Layer:
    """One `LlamaDecoderLayer`'s weights (typed Any: HF submodules are untyped attributes)."""
    attn, mlp = block.self_attn, block.mlp
    wqkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight], dim=0)
    wgu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], dim=0)
    return _Layer(
        in_norm=block.input_layernorm.weight.detach(),
        wqkv=wqkv.detach(),
        wo=attn.o_proj.weight.detach(),
        post_norm=block.post_attention_layernorm.weight.detach(),
        wgu=wgu.detach(),
        wdown=mlp.down_proj.weight.detach(),
    )


def decode_margin(span: int) -> int:
    """Slots a decode row of `span` slots needs free before its first: its attention window
    is the span rounded up to DECODE_BLOCK slots (see `_attend_decode`)."""
    return -span % DECODE_BLOCK


def _attend(
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    mask: Tensor,
    start: int,
    firsts: list[int] | None,
    gqa: bool,
) -> Tensor:
    """Attention of queries q (B, H, T, hd) at slots [start, start + T) over the cache, so
    that a row's result never depends on the rest of its batch or on where its prompt's
    cached prefix ended (bfloat16 rounds the attention kernels' blocking into the output):
    - `firsts` (decode, T == 1): `_attend_decode`, each row over a window that depends on
      its own span only;
    - one row of several tokens (prefill): queries in blocks aligned to PREFILL_BLOCK
      slots, each over the keys up to its end, so a prompt prefilled from slot 0 and one
      continued from a cached prefix (cut at a block boundary) compute the same blocks;
    - otherwise (one token of one prefill, or a caller's padded batch; the decode loops
      prefill each prompt alone and pass `firsts`): one call under `mask` (B, 1, T, end)."""
    B, _, T, _ = q.shape
    end = start + T
    if firsts is not None:
        return _attend_decode(q, k_cache, v_cache, mask, end, firsts)
    if B == 1 and T > 1:
        cuts = [0, *range(PREFILL_BLOCK - start % PREFILL_BLOCK, T, PREFILL_BLOCK), T]
        blocks = [
            F.scaled_dot_product_attention(
                q[:, :, i:j], k_cache[:, :, : start + j], v_cache[:, :, : start + j],
                attn_mask=mask[:, :, i:j, : start + j], enable_gqa=gqa,
            )
            for i, j in pairwise(cuts)
            if j > i
        ]  # fmt: skip
        return torch.cat(blocks, dim=2)
    return F.scaled_dot_product_attention(
        q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask, enable_gqa=gqa
    )


def _attend_decode(
    q: Tensor, k_cache: Tensor, v_cache: Tensor, mask: Tensor, end: int, firsts: list[int]
) -> Tensor:
    """One decode query per row, q (B, H, 1, hd), over slots before `end`. Row b attends
    to the window [end - W, end), W its span end - firsts[b] rounded up to DECODE_BLOCK,
    under its row of the additive `mask` (B, 1, 1, end): -inf on the slots before its
    first (they must hold finite numbers: 0 × NaN is NaN), 0 on its own. Adjacent rows of
    one window width run as one attention call (`lean_generate` holds its rows longest
    first, so its widths sit together; the continuous batch's rows are in arrival order),
    the query heads that share a key/value head folded into that head's query positions.
    The kernel computes each (row, key/value head) on its own over a window whose width
    depends on the row only, so a row gets the same bits in any batch, alone included;
    one call over the batch's widest span would not (bfloat16 shows it)."""
    B, H, _, hd = q.shape
    Hkv = k_cache.shape[1]
    qg = q.reshape(B, Hkv, H // Hkv, hd)  # (B, Hkv, H / Hkv, hd)
    groups: dict[int, list[int]] = {}
    for b, first in enumerate(firsts):
        span = end - first
        width = span + decode_margin(span)
        if width > end:
            raise ValueError(
                f"decode row {b} spans {span} slots from slot {first}: it needs "
                f"{decode_margin(span)} free slots before its first (DECODE_BLOCK windows)"
            )
        groups.setdefault(width, []).append(b)
    out = torch.empty_like(qg)  # (B, Hkv, H / Hkv, hd)
    for width, rows in groups.items():
        lo = end - width
        for a, b in _runs(rows):
            out[a:b] = F.scaled_dot_product_attention(
                qg[a:b], k_cache[a:b, :, lo:end], v_cache[a:b, :, lo:end],
                attn_mask=mask[a:b, :, :, lo:end],
            )  # fmt: skip
    return out.view(B, H, 1, hd)


def _runs(rows: list[int]) -> list[tuple[int, int]]:
    """Ascending row numbers as [a, b) runs of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for r in rows:
        if runs and runs[-1][1] == r:
            runs[-1] = (runs[-1][0], r + 1)
        else:
            runs.append((r, r + 1))
    return runs


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)  # (..., hd / 2) each
    return torch.cat((-x2, x1), dim=-1)  # (..., hd)


def _attention_mask(key_valid: Tensor, start: int, T: int) -> Tensor:
    """Boolean mask (B, 1, T, start + T): causal, restricted to valid keys; every query also
    sees its own slot so a padding query never has an empty row (its output is unused)."""
    end = start + T
    if T == 1:
        return key_valid[:, None, None, :]  # (B, 1, 1, end)
    keys = torch.arange(end, device=key_valid.device)  # (end,)
    queries = torch.arange(start, end, device=key_valid.device)[:, None]  # (T, 1)
    causal = keys[None, :] <= queries  # (T, end)
    diagonal = keys[None, :] == queries  # (T, end)
    return (key_valid[:, None, None, :] & causal) | diagonal  # (B, 1, T, end)
