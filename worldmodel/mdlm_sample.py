"""Sampling from the MDLM, and the MDLM as a text engine behind `TextWorldModel`.

    engine = MDLMEngine(model, tokenizer, steps=4)               # K denoising steps
    wm = TextWorldModel(engine, budget, GenerationConfig(max_new_tokens=113))
    wm.predict([ctx])        # what load_world_model("an MDLM checkpoint") returns
    engine.last_passes       # forward passes per observation of the last call

The engine takes the same plain prompts (`render_prompt`) and returns the same target text
as the AR engines, so everything that takes a world model (eval, the router, the server,
the batching layer) takes an MDLM checkpoint unchanged.

`sample_tokens`, for a batch:
    1. encode every row's prefix once (`MDLM.encode_prefix`: one forward pass);
    2. start from an all-mask target of L = min(target_len, max_new_tokens) positions;
    3. K steps: predict every position (`MDLM.denoise`, one forward pass over the L target
       positions only), then commit some masked positions:
       - "confidence" (default): the most confident ones, ceil(masked / steps left) of
         them, so the positions still masked are spread evenly over the steps left; greedy
         takes the argmax, sampling draws from the temperature/top-p distribution and ranks
         by the drawn token's probability;
       - "ancestral": each masked position is committed with probability 1 / (K - k) (the
         linear schedule's reveal probability from t = 1 - k/K to 1 - (k+1)/K), drawn with
         the row's own generator;
       the last step commits every position left, so no mask survives;
    4. once a row commits `<eos>` at j, every later position becomes `<pad>` (what training
       taught after the end): fewer positions are left to commit, and the loop ends before
       K steps once no row has a mask left;
    5. with `trim`, the next steps compute only the window up to the batch's last committed
       `<eos>` (pads alike after it), and each row attends only to its own positions up to
       its own `<eos>`, so a row samples the same alone or in a batch. This drops keys the
       model saw in training (the pads after the end), an approximation: `simworld bench
       mdlm --trim` measures what it costs and saves.
The output is each row's tokens before its first `<eos>` or `<pad>`.

Rows may have prefixes of different lengths: they are right-padded, masked as keys, and
rotary positions count only real tokens, so a row samples the same alone or in a batch.
Row i of a request uses generator seed `cfg.row_seed(i)`; greedy is deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch
from torch import Tensor
from transformers import PreTrainedTokenizerBase

from simworld.worldmodel.engines.base import GenerationConfig, truncate_at_stop
from simworld.worldmodel.mdlm import MDLM
from simworld.worldmodel.tokenizer import decode, encode

Order = Literal["confidence", "ancestral"]
ORDERS: tuple[Order, ...] = ("confidence", "ancestral")


@dataclass
class Sampled:
    """Generated tokens per row (before the end), the forward passes the call took (one
    prefix encoding plus one per denoising step run; shared by the batch's rows), and the
    seconds the prefix encoding took."""

    tokens: list[list[int]]
    passes: int
    prefix_seconds: float = 0.0


def _pick(
    logits: Tensor, cfg: GenerationConfig, gens: list[torch.Generator], draws: int
) -> tuple[Tensor, Tensor]:
    """Token (B, W) and its probability (B, W) at every position of the window: argmax, or
    a draw from the temperature-scaled, top-p-cut distribution with each row's own
    generator (`draws` >= W numbers per row, the first W used, so that a row's random
    stream does not depend on the window)."""
    probs = torch.softmax(logits.float() / (cfg.temperature if cfg.do_sample else 1.0), -1)
    if not cfg.do_sample:
        conf, token = probs.max(-1)  # (B, L) each
        return token, conf
    L, V = probs.shape[1:]
    sorted_p, order = probs.sort(-1, descending=True)  # (B, L, V)
    cum = sorted_p.cumsum(-1)
    sorted_p = sorted_p.masked_fill(cum - sorted_p >= cfg.top_p, 0.0)  # keeps the top token
    cum = sorted_p.cumsum(-1)  # (B, L, V)
    u = torch.stack([torch.rand(draws, generator=g)[:L] for g in gens]).to(cum.device)
    idx = torch.searchsorted(cum, (u * cum[..., -1])[..., None]).clamp(max=V - 1)  # (B, L, 1)
    token = order.gather(-1, idx).squeeze(-1)  # (B, L)
    return token, probs.gather(-1, token[..., None]).squeeze(-1)


def _choose(
    masked: Tensor,
    conf: Tensor,
    step: int,
    steps: int,
    order: Order,
    gens: list[torch.Generator],
    draws: int | None = None,
) -> Tensor:
    """Which masked positions (B, W) to commit at `step` of `steps` (ancestral: from
    `draws` >= W numbers per row, as `_pick`)."""
    B, L = masked.shape
    if step == steps - 1:
        return masked
    if order == "ancestral":
        count = draws or L
        u = torch.stack([torch.rand(count, generator=g)[:L] for g in gens]).to(masked.device)
        return masked & (u < 1.0 / (steps - step))
    # the masked positions left, spread evenly over the steps left (>= 1 while any is left)
    n = (masked.sum(1) + (steps - step - 1)) // (steps - step)  # (B,) ceil division
    ranked = conf.masked_fill(~masked, -1.0).argsort(1, descending=True)  # (B, L)
    rank = torch.empty_like(ranked).scatter_(1, ranked, torch.arange(L).expand(B, L))
    return masked & (rank < n[:, None])


@torch.no_grad()
def sample_tokens(
    model: MDLM,
    prefixes: Sequence[Sequence[int]],
    cfg: GenerationConfig,
    steps: int,
    eos_id: int,
    pad_id: int,
    order: Order = "confidence",
    trim: bool = False,
) -> Sampled:
    """Sample a target for each prefix (token lists) in `steps` denoising steps (`trim`:
    step 5 of the module docstring)."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}: choose one of {ORDERS}")
    if any(not p for p in prefixes):
        raise ValueError("every prompt must have at least one token")
    dev = model.embed.weight.device
    B, L = len(prefixes), min(model.cfg.target_len, cfg.max_new_tokens)
    P = max(len(p) for p in prefixes)
    ids = torch.full((B, P), pad_id, dtype=torch.long, device=dev)  # (B, P) right-padded
    valid = torch.zeros(B, P, dtype=torch.bool, device=dev)  # (B, P)
    for b, p in enumerate(prefixes):
        ids[b, : len(p)] = torch.tensor(list(p), device=dev)
        valid[b, : len(p)] = True
    # === 1. the prefix, once
    started = time.perf_counter()
    prefix = model.encode_prefix(ids, valid)
    prefix_seconds, passes = time.perf_counter() - started, 1
    gens = [torch.Generator().manual_seed(cfg.row_seed(b)) for b in range(B)]
    # === 2. an all-mask target
    x = torch.full((B, L), model.mask_id, dtype=torch.long, device=dev)  # (B, L)
    after = torch.arange(L, device=dev)  # (L,)
    own = torch.full((B,), L, device=dev)  # (B,) each row's window (trim: to its <eos>)
    for step in range(steps):
        masked = x == model.mask_id  # (B, L)
        if not masked.any():
            break
        # === 3. predict every position of the window, commit some masked ones
        width = int(own.max())
        seen = after[None, :width] < own[:, None] if trim else None  # (B, width)
        logits = model.denoise(x[:, :width], prefix, seen)  # (B, width, V)
        passes += 1
        token, conf = _pick(logits, cfg, gens, L)
        commit = _choose(masked[:, :width], conf, step, steps, order, gens, L)  # (B, width)
        x[:, :width] = torch.where(commit, token, x[:, :width])
        # === 4. after a committed <eos>, only <pad>
        is_eos = x == eos_id  # (B, L)
        first = torch.where(is_eos.any(1), is_eos.int().argmax(1), L)  # (B,)
        x = torch.where(after[None] > first[:, None], pad_id, x)
        if trim:  # === 5. the window ends at each row's <eos>
            own = (first + 1).clamp(max=L)
    out = []
    for row in x.tolist():
        ends = [i for i, tok in enumerate(row) if tok in (eos_id, pad_id)]
        out.append(row[: ends[0]] if ends else row)
    return Sampled(out, passes, prefix_seconds)


class MDLMEngine:
    """An `Engine` (plain prompts in, generated text out) over an MDLM and its tokenizer.

    `steps` (K), `order` and `trim` are the sampler's knobs; `last_passes` holds the forward passes
    per observation of the last `generate` call (one entry per prompt); `passes`,
    `observations` and `prefix_seconds` (time spent encoding prefixes) add up over the
    engine's life."""

    independent_rows = True  # a row samples the same alone or in a batch, with its seed

    def __init__(
        self,
        model: MDLM,
        tokenizer: PreTrainedTokenizerBase,
        *,
        steps: int = 8,
        order: Order = "confidence",
        batch_size: int = 32,
        device: str | torch.device | None = None,
        trim: bool = False,
    ) -> None:
        if steps < 1 or batch_size < 1:
            raise ValueError(f"steps and batch_size must be at least 1, got {steps}, {batch_size}")
        if order not in ORDERS:
            raise ValueError(f"unknown order {order!r}: choose one of {ORDERS}")
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs an eos and a pad token (end and padding)")
        if tokenizer.eos_token_id == tokenizer.pad_token_id:
            raise ValueError("the MDLM needs distinct eos and pad tokens")
        self.model = model.to(device) if device is not None else model
        self.model.train(False)
        self.tokenizer = tokenizer
        self.steps, self.order, self.batch_size, self.trim = steps, order, batch_size, trim
        self.last_passes: list[int] = []
        self.passes = self.observations = 0
        self.prefix_seconds = 0.0

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
        """Sampled target text per prompt; a prompt longer than the model's prefix room loses
        its start (the action sits at the end), as in training."""
        room = self.model.cfg.max_positions - self.model.cfg.target_len
        rows = [encode(self.tokenizer, p)[-room:] for p in prompts]
        texts: list[str] = []
        self.last_passes = []
        for lo in range(0, len(rows), self.batch_size):
            chunk = rows[lo : lo + self.batch_size]
            # row i of the request keeps seed cfg.row_seed(i) whatever chunk it lands in
            seeds = tuple(cfg.row_seed(lo + b) for b in range(len(chunk)))
            chunk_cfg = replace(cfg, row_seeds=seeds)
            got = sample_tokens(
                self.model,
                chunk,
                chunk_cfg,
                self.steps,
                int(self.tokenizer.eos_token_id),
                int(self.tokenizer.pad_token_id),
                self.order,
                self.trim,
            )
            self.last_passes += [got.passes] * len(chunk)
            self.prefix_seconds += got.prefix_seconds
            texts += [truncate_at_stop(decode(self.tokenizer, t), cfg.stop)[0] for t in got.tokens]
        self.passes += sum(self.last_passes)
        self.observations += len(rows)
        return texts


__all__ = ["ORDERS", "MDLMEngine", "Order", "Sampled", "sample_tokens"]
