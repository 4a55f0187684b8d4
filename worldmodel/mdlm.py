"""The masked-diffusion world model (MDLM): a Llama-like transformer that denoises the target
span given a prefix it never masks, its loss, and its checkpoint format.

    model = MDLM(MDLMConfig.preset("default", target_len=113), vocab_size=len(tok))
    prefix = model.encode_prefix(prompt_ids, prompt_valid)    # once per observation
    logits = model.denoise(noisy_target, prefix)              # (B, L, V), once per step
    loss = mdlm_loss(logits, target, masked, t)               # the continuous-time ELBO

Attention is split as block-diffusion models split it: prefix positions (state, task,
tools, rules, steering, history, action: `render_prompt`'s text) attend only to the prefix,
bidirectionally; target positions attend to the whole prefix and the whole target. So the
prefix's keys and values do not depend on the target: `encode_prefix` computes them once
per observation (`PrefixKV`), and each denoising step runs only the L target positions
against them. Training runs the very same two calls, so what is trained is what is sampled.

The target is `render_target` + `<eos>`, then `<pad>` up to `target_len`; the model learns
the pads too, which is how a sampler ends an observation early (text after the first
`<eos>` is dropped). The mask token is one extra embedding row (id `vocab_size`); the output
head (tied to the embedding) covers the real vocabulary only, so a mask is never predicted.

Loss (absorbing-state MDLM, linear schedule alpha_t = 1 - t): each target position is
masked with probability t; the ELBO weight of a masked position's cross-entropy is
-alpha'_t / (1 - alpha_t) = 1/t, averaged over all target positions.

Decisions: RMSNorm, rotary positions (a row's positions count its real prefix tokens, so
left or right padding changes nothing), grouped-query attention and SwiGLU, as the AR
model; no biases; prefix padding attends to itself only (no empty softmax row). A copy
(pointer) head, as the AR model's (`copy_head.py`), when `copy_dim` > 0: each target
position's distribution mixes the vocabulary head with a pointer over the real prefix
tokens, whose keys come from the prefix's final hidden states and are cached with its
keys and values; without it the last layer's attention and MLP are not run on the prefix
(nothing reads them). With `shift` (an MDLM initialised from an AR checkpoint,
`mdlm_adapt.py`) target position j is read from the hidden state one position earlier, as
AR reads the next token, and `causal_prefix` lets the prefix attend causally, as AR's
prefill does. Checkpoints:
`model.safetensors` + `mdlm.json` (the config) + tokenizer files + `simworld.json` (kind
"mdlm").
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import PreTrainedTokenizerBase

from simworld.worldmodel.checkpoint import META_FILE, CheckpointMeta, read_meta
from simworld.worldmodel.copy_head import mixture_logprobs, offering_next
from simworld.worldmodel.tokenizer import load_tokenizer

CONFIG_FILE = "mdlm.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass
class MDLMConfig:
    """Shape of the MDLM (the vocabulary comes from the tokenizer) and its target bound."""

    hidden_size: int = 256
    n_layers: int = 6
    n_heads: int = 8
    n_kv_heads: int = 4
    intermediate_size: int = 688  # SwiGLU width
    max_positions: int = 1024  # prefix + target
    target_len: int = 113  # L: target tokens + <eos> + <pad>s
    rope_theta: float = 10000.0
    copy_dim: int = 0  # width of the copy (pointer) head over the prefix; 0: no head
    # AR alignment (`mdlm_adapt.py`, an MDLM initialised from an AR checkpoint): target
    # position j is predicted from the hidden state one position earlier (target 0 from the
    # prefix's last token), as an AR model predicts the next token; False: from position j.
    shift: bool = False
    causal_prefix: bool = False  # the prefix attends causally (as AR) instead of both ways
    norm_eps: float = 1e-6  # RMSNorm epsilon
    # the pointer offers the prefix token after the attended one (an AR checkpoint trained
    # with copy_next, adapted: `copy_head.py`); False: the attended token itself
    copy_next: bool = False

    def __post_init__(self) -> None:
        if self.hidden_size % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size}, n_heads={self.n_heads}, "
                f"n_kv_heads={self.n_kv_heads}: n_heads must divide hidden_size and "
                "n_kv_heads must divide n_heads"
            )
        if (self.hidden_size // self.n_heads) % 2:
            raise ValueError("rotary positions need an even head size: change n_heads")
        if self.target_len < 2 or self.target_len >= self.max_positions:
            raise ValueError(
                f"target_len={self.target_len} must be in [2, max_positions="
                f"{self.max_positions}): it holds the target, its <eos> and padding"
            )
        if self.copy_dim < 0:
            raise ValueError(f"copy_dim must be 0 (no copy head) or more, got {self.copy_dim}")
        if self.copy_next and not self.copy_dim:
            raise ValueError("copy_next needs a copy head: set copy_dim > 0")
        for name in ("n_layers", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> MDLMConfig:
        """A named preset ("tiny" or "default"), with fields overridden by keyword."""
        if name not in MDLM_PRESETS:
            raise ValueError(f"unknown MDLM preset {name!r}: choose one of {sorted(MDLM_PRESETS)}")
        return replace(MDLM_PRESETS[name], **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# "default" has the AR default's shape (6 x 256, GQA 8/4, SwiGLU 688, a 64-wide copy head):
# the same parameter count but for the mask token's embedding row, so the two compare at
# equal size.
MDLM_PRESETS = {
    "tiny": MDLMConfig(
        hidden_size=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        intermediate_size=128,
        max_positions=512,
        target_len=49,
        copy_dim=16,
    ),
    "default": MDLMConfig(copy_dim=64),
}


@dataclass
class PrefixKV:
    """The prefix's keys and values per layer, each (B, Hkv, P, hd), which real positions
    they hold (`valid`, (B, P)), and how many per row (`lengths`, (B,)); with a copy head,
    its pointer keys (B, P, copy_dim) and the prefix tokens (B, P) they copy; with `shift`,
    the final (normed) hidden state of each row's last real prefix token (B, D), which
    predicts target position 0."""

    k: list[Tensor]
    v: list[Tensor]
    valid: Tensor
    lengths: Tensor
    copy_keys: Tensor | None = None
    ids: Tensor | None = None
    last: Tensor | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * scale * self.weight


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, rotate-half convention; x (B, h, T, hd), cos/sin (B, 1, T, hd)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Block(nn.Module):
    """Pre-norm attention (GQA, rotary) and SwiGLU MLP."""

    def __init__(self, cfg: MDLMConfig) -> None:
        super().__init__()
        self.h, self.hkv = cfg.n_heads, cfg.n_kv_heads
        self.hd = cfg.hidden_size // cfg.n_heads
        D, inner = cfg.hidden_size, cfg.intermediate_size
        self.attn_norm = RMSNorm(D, cfg.norm_eps)
        self.wq = nn.Linear(D, self.h * self.hd, bias=False)
        self.wkv = nn.Linear(D, 2 * self.hkv * self.hd, bias=False)
        self.wo = nn.Linear(self.h * self.hd, D, bias=False)
        self.mlp_norm = RMSNorm(D, cfg.norm_eps)
        self.w_gate_up = nn.Linear(D, 2 * inner, bias=False)
        self.w_down = nn.Linear(inner, D, bias=False)

    def kv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (rotated) and values of `x` (B, T, D): each (B, Hkv, T, hd)."""
        B, T, _ = x.shape
        k, v = self.wkv(self.attn_norm(x)).view(B, T, 2, self.hkv, self.hd).unbind(2)
        return _rotate(k.transpose(1, 2), cos, sin), v.transpose(1, 2)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, past: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x (B, T, D) attends to `past` keys (B, Hkv, P, hd) then its own; mask
        (B, 1, T, P + T). Returns the new x and x's own keys and values."""
        B, T, _ = x.shape
        k, v = self.kv(x, cos, sin)  # (B, Hkv, T, hd) each
        q = self.wq(self.attn_norm(x)).view(B, T, self.h, self.hd).transpose(1, 2)  # (B,H,T,hd)
        q = _rotate(q, cos, sin)
        keys, values = (
            (k, v) if past is None else (torch.cat((past[0], k), 2), torch.cat((past[1], v), 2))
        )
        att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        x = x + self.wo(att.transpose(1, 2).reshape(B, T, -1))  # (B, T, D)
        gate, up = self.w_gate_up(self.mlp_norm(x)).chunk(2, dim=-1)  # (B, T, I) each
        return x + self.w_down(F.silu(gate) * up), (k, v)


class MDLM(nn.Module):
    """The masked-diffusion transformer; see the module docstring."""

    def __init__(self, cfg: MDLMConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg, self.vocab_size = cfg, vocab_size
        self.mask_id = vocab_size  # the extra embedding row
        self.embed = nn.Embedding(vocab_size + 1, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.norm_eps)
        if cfg.copy_dim:
            self.copy_q = nn.Linear(cfg.hidden_size, cfg.copy_dim, bias=False)
            self.copy_k = nn.Linear(cfg.hidden_size, cfg.copy_dim, bias=False)
            self.copy_gate = nn.Linear(cfg.hidden_size, 1)
        hd = cfg.hidden_size // cfg.n_heads
        inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)  # (hd/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.apply(_init)

    @property
    def blocks(self) -> list[Block]:
        """The layers, typed."""
        return [cast(Block, m) for m in self.layers]

    def _rope(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin (B, 1, T, hd) for positions (B, T)."""
        inv_freq: Tensor = self.inv_freq  # type: ignore[assignment]
        angles = pos[..., None].float() * inv_freq  # (B, T, hd/2)
        angles = torch.cat((angles, angles), dim=-1)[:, None]  # (B, 1, T, hd)
        return angles.cos(), angles.sin()

    def encode_prefix(self, ids: Tensor, valid: Tensor) -> PrefixKV:
        """Keys and values of the prefix `ids` (B, P), real where `valid` (B, P). The prefix
        attends to its own real tokens only, so these never depend on any target."""
        P, room = ids.shape[1], self.cfg.max_positions - self.cfg.target_len
        if room < P:
            raise ValueError(
                f"prefix of {P} tokens leaves no room for the {self.cfg.target_len}-token "
                f"target within max_positions={self.cfg.max_positions}"
            )
        pos = (valid.long().cumsum(1) - 1).clamp(min=0)  # (B, P)
        cos, sin = self._rope(pos)
        own = torch.eye(P, dtype=torch.bool, device=ids.device)  # (P, P)
        sees = valid[:, None, :]  # (B, 1, P): every real prefix token
        if self.cfg.causal_prefix:
            sees = sees & torch.ones_like(own).tril()  # (B, P, P): the real tokens so far
        mask = (sees | own)[:, None]  # (B, 1, P, P) pads see themselves only
        x = self.embed(ids)  # (B, P, D)
        ks, vs = [], []
        needs_top = bool(self.cfg.copy_dim) or self.cfg.shift  # the final hidden states
        for i, layer in enumerate(self.blocks):
            if i == len(self.layers) - 1 and not needs_top:  # its output would be unused
                k, v = layer.kv(x, cos, sin)
            else:
                x, (k, v) = layer(x, cos, sin, mask, None)
            ks.append(k)
            vs.append(v)
        lengths = valid.long().sum(1)  # (B,)
        kv = PrefixKV(ks, vs, valid, lengths)
        if not needs_top:
            return kv
        h = self.norm(x)  # (B, P, D)
        if self.cfg.shift:
            kv.last = h[torch.arange(len(h), device=h.device), (lengths - 1).clamp(min=0)]
        if self.cfg.copy_dim:
            kv.copy_keys, kv.ids = self.copy_k(h), ids  # (B, P, copy_dim), (B, P)
        return kv

    def denoise(
        self, target: Tensor, prefix: PrefixKV, target_valid: Tensor | None = None
    ) -> Tensor:
        """Logits (B, L, V) over the real vocabulary for every target position, given the
        partly masked `target` (B, L) and the prefix's cached keys and values;
        `target_valid` (B, L), when given, says which target positions are attended to as
        keys (the sampler's trimmed window; training attends to all L). With a copy
        head they are the log-probabilities of the generate-or-copy mixture (copying from
        the real prefix tokens; `copy_head.mixture_logprobs`), which every consumer of
        logits (softmax, cross-entropy, argmax) reads as the same distribution."""
        B, L = target.shape
        pos = prefix.lengths[:, None] + torch.arange(L, device=target.device)  # (B, L)
        cos, sin = self._rope(pos)
        sees = (
            torch.ones(B, L, dtype=torch.bool, device=target.device)
            if target_valid is None
            else target_valid
        )  # (B, L)
        mask = torch.cat((prefix.valid, sees), 1)[:, None, None]  # (B, 1, 1, P + L)
        x = self.embed(target)  # (B, L, D)
        for layer, k, v in zip(self.blocks, prefix.k, prefix.v, strict=True):
            x, _ = layer(x, cos, sin, mask, (k, v))
        h = self.norm(x)  # (B, L, D)
        if self.cfg.shift:  # position j reads the state one earlier; 0 the prefix's last
            if prefix.last is None:
                raise ValueError("a shift MDLM needs the prefix's last state (encode_prefix)")
            h = torch.cat((prefix.last[:, None], h[:, :-1]), 1)  # (B, L, D)
        head = self.embed.weight[: self.vocab_size]  # (V, D) tied; no logit for the mask
        logits: Tensor = h @ head.T  # (B, L, V)
        if prefix.copy_keys is None or prefix.ids is None:
            return logits
        keys, ids, valid = prefix.copy_keys, prefix.ids, prefix.valid  # over P positions
        if self.cfg.copy_next:  # prefix position j offers the token at j + 1
            keys, ids, valid = offering_next(keys, ids, valid)
        allowed = valid[:, None, :].expand(B, L, -1)  # (B, L, P | P - 1): real prefix tokens
        return mixture_logprobs(logits, self.copy_q(h), keys, self.copy_gate(h), ids, allowed)


def _init(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------- loss


def mdlm_loss(
    logits: Tensor, target: Tensor, masked: Tensor, t: Tensor, weighted: bool = True
) -> Tensor:
    """The masked-diffusion loss of one batch.

    logits (B, L, V), target (B, L) the clean tokens, masked (B, L) which positions were
    masked, t (B,) the noise level each row was masked at. Weighted (the training ELBO):
    sum over masked positions of CE / t, divided by all B * L target positions. Unweighted:
    the mean CE over masked positions."""
    ce = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="none")
    ce = ce.view_as(target) * masked  # (B, L), zero where not masked
    if not weighted:
        return ce.sum() / masked.sum().clamp(min=1)
    return (ce.sum(1) / t).sum() / target.numel()


def noise(
    target: Tensor, mask_id: int, generator: torch.Generator | None = None, eps: float = 1e-3
) -> tuple[Tensor, Tensor, Tensor]:
    """Mask a batch of clean targets (B, L): t stratified over the batch in [eps, 1] (one
    shared uniform offset, rows evenly spaced: lower-variance than i.i.d.), each position
    masked with probability t. Returns the noisy target, the mask (B, L) and t (B,)."""
    B, L = target.shape
    u = torch.rand((), generator=generator)
    t = (u + torch.arange(B) / B) % 1.0  # (B,)
    t = (eps + (1 - eps) * t).to(target.device)
    masked = torch.rand(B, L, generator=generator).to(target.device) < t[:, None]  # (B, L)
    return torch.where(masked, mask_id, target), masked, t


# ---------------------------------------------------------------------------- checkpoints


def save_mdlm(
    directory: str | Path, model: MDLM, tokenizer: PreTrainedTokenizerBase, meta: CheckpointMeta
) -> Path:
    """Weights (safetensors), config, tokenizer and meta (kind "mdlm", written last)."""
    if meta.kind != "mdlm":
        raise ValueError(f"an MDLM checkpoint has kind 'mdlm', not {meta.kind!r}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(out / WEIGHTS_FILE))
    config = {**model.cfg.to_dict(), "vocab_size": model.vocab_size}
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tokenizer.save_pretrained(str(out))
    (out / META_FILE).write_text(json.dumps(asdict(meta), indent=2, sort_keys=True) + "\n")
    return out


def load_mdlm(directory: str | Path) -> tuple[MDLM, PreTrainedTokenizerBase, CheckpointMeta]:
    """Model (eval mode), tokenizer and meta of the MDLM checkpoint in `directory`."""
    path = Path(directory)
    meta = read_meta(path)
    if meta.kind != "mdlm":
        raise ValueError(f"{path} holds a {meta.kind!r} checkpoint, not an MDLM")
    missing = [
        n for n in (WEIGHTS_FILE, CONFIG_FILE, "tokenizer_config.json") if not (path / n).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"{path} is not a complete MDLM checkpoint: missing {', '.join(missing)}"
        )
    raw = json.loads((path / CONFIG_FILE).read_text())
    vocab_size = int(raw.pop("vocab_size"))
    model = MDLM(MDLMConfig(**raw), vocab_size)
    model.load_state_dict(load_file(str(path / WEIGHTS_FILE)))
    model.train(False)
    return model, load_tokenizer(path), meta


__all__ = [
    "MDLM",
    "MDLM_PRESETS",
    "MDLMConfig",
    "PrefixKV",
    "count_parameters",
    "load_mdlm",
    "mdlm_loss",
    "noise",
    "save_mdlm",
]
