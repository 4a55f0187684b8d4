"""Masked-diffusion training of the MDLM world model on (prompt, target) text pairs.

A tiny CPU run (seconds):

    from simworld.training.batching import Example
    from simworld.training.mdlm import MDLMTrainConfig, train_mdlm
    pairs = [Example(prompt=f'{{"ls": {i}}}', target=f"file_{i}.txt") for i in range(20)]
    metrics = train_mdlm(MDLMTrainConfig.preset("tiny"), pairs, pairs[:8], "out/mdlm-tiny")
    # out/mdlm-tiny is a checkpoint: simworld.worldmodel.load_world_model("out/mdlm-tiny")

The loop, top to bottom: tokenizer (given, or a byte-level BPE trained on the train texts),
model, a deterministic plan of length-bucketed batches over all epochs (cut where a token
budget is reached), AdamW with linear warmup and cosine decay (SFT's schedule), grad
clipping; each step:
    1. the clean target: `render_target` tokens + <eos> + <pad>s to L = target_len;
    2. t per row (stratified over the batch), each target position masked with prob. t;
    3. the prefix (never masked) encoded, the noisy target denoised against it;
    4. the MDLM ELBO: cross-entropy of masked positions weighted 1/t, over B * L (or, with
       `elbo_weighting=False`, the mean cross-entropy over masked positions).
With `target_copies` C > 1, step 2 noises C copies of each target and step 3 denoises all
of them against the one prefix encoding (measured on the bundled data, 8 minutes each on
one thread: no gain at equal wall time, mixed at equal steps, so the presets keep C = 1).
Periodic val loss (the same ELBO, with fixed noise) and val exact match (greedy sampling
in `sample_steps` steps), a progress bar with tokens/s, and the final checkpoint in
`out_dir` (kind "mdlm"), with the curve, train losses and tokens seen in its metrics.

Simplifications: one process, fp32, no packing (the prefix attends only to itself and
the target to everything, so a row holds one example); not resumable (an interrupted run
starts again). "Tokens seen" counts real tokens, prompt + target + <eos>, as SFT counts
them, so that a token budget means the same for both; the <pad> positions of the target
are computed on and learned but not counted.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from simworld.training.batching import Example, Plan, bucket_plan
from simworld.training.sft import cut_at_tokens, lr_factor
from simworld.worldmodel.checkpoint import CheckpointMeta
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.mdlm import MDLM, MDLMConfig, PrefixKV, mdlm_loss, noise, save_mdlm
from simworld.worldmodel.mdlm_sample import sample_tokens
from simworld.worldmodel.tokenizer import decode, encode, train_tokenizer


@dataclass
class MDLMTrainConfig:
    """Everything one MDLM run needs besides its data and output directory."""

    model: MDLMConfig = field(default_factory=MDLMConfig)
    vocab_size: int = 4096  # trained byte-level BPE size (when no tokenizer is given)
    batch_tokens: int = 4096  # prefix + target positions per batch, padding included
    epochs: int = 3
    max_tokens: int | None = None  # cut the schedule where this many real tokens are seen
    # True: the ELBO (1/t weights). False: the mean CE over masked positions, a biased but
    # lower-variance surrogate: at ~9 rows a batch, a row drawn at small t puts a 1/t
    # weight of tens to hundreds on one or two tokens, and clipping lets it steer the step.
    elbo_weighting: bool = True
    # Noised copies of each target per encoded prefix: the prefix (hundreds of tokens) is
    # encoded once and each copy costs only the L target positions, so C copies give C
    # times the loss terms for a fraction of the compute (and average out t's variance).
    target_copies: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int = 200  # steps between val evaluations (and one at the end)
    val_loss_examples: int = 256
    exact_samples: int = 64
    sample_steps: int = 8  # K for val exact match; recorded as the checkpoint's default K
    time_budget_min: float | None = None  # stop (saving) after this many minutes
    seed: int = 0
    threads: int = 2
    serialization_version: str = ""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.batch_tokens < self.model.max_positions:
            raise ValueError(
                f"batch_tokens={self.batch_tokens} < model.max_positions="
                f"{self.model.max_positions}: a batch must hold one full row"
            )
        if self.threads < 1 or self.epochs < 1 or self.lr <= 0 or self.sample_steps < 1:
            raise ValueError("threads, epochs and sample_steps must be at least 1, lr positive")
        if self.target_copies < 1:
            raise ValueError(f"target_copies must be at least 1, got {self.target_copies}")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> MDLMTrainConfig:
        """Preset "tiny" (tests: seconds) or "default", overridden by keyword."""
        if name not in MDLM_TRAIN_PRESETS:
            known = sorted(MDLM_TRAIN_PRESETS)
            raise ValueError(f"unknown MDLM preset {name!r}: choose one of {known}")
        return replace(MDLM_TRAIN_PRESETS[name], **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MDLM_TRAIN_PRESETS = {
    "tiny": MDLMTrainConfig(
        model=MDLMConfig.preset("tiny"),
        vocab_size=384,
        batch_tokens=1024,
        epochs=40,
        lr=3e-3,
        warmup_steps=5,
        eval_every=0,
        val_loss_examples=32,
        exact_samples=8,
        sample_steps=4,
        threads=1,
    ),
    "default": MDLMTrainConfig(model=MDLMConfig.preset("default")),
}


@dataclass(frozen=True)
class Pair:
    """One encoded example: the prefix ids, the full target (L ids: target, <eos>,
    <pad>s) and the real tokens it holds (prefix + target + <eos>)."""

    prefix: list[int]
    target: list[int]
    real: int


def encode_pair(tok: PreTrainedTokenizerBase, ex: Example, cfg: MDLMConfig) -> Pair:
    """`ex` as a Pair; the prompt loses its start to fit the model's prefix room, a target
    longer than target_len - 1 its tail (the recipes leave such steps out beforehand)."""
    L = cfg.target_len
    target = [*encode(tok, ex.target)[: L - 1], tok.eos_token_id]
    prefix = encode(tok, ex.prompt)[-(cfg.max_positions - L) :]
    return Pair(prefix, target + [tok.pad_token_id] * (L - len(target)), len(prefix) + len(target))


def collate_pairs(
    pairs: list[Pair], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prefix ids (B, P) right-padded, their validity (B, P), clean targets (B, L)."""
    P = max(len(p.prefix) for p in pairs)
    ids = torch.full((len(pairs), P), pad_id, dtype=torch.long)  # (B, P)
    valid = torch.zeros(len(pairs), P, dtype=torch.bool)  # (B, P)
    for b, p in enumerate(pairs):
        ids[b, : len(p.prefix)] = torch.tensor(p.prefix)
        valid[b, : len(p.prefix)] = True
    return ids, valid, torch.tensor([p.target for p in pairs])  # (B, L)


def step_loss(
    model: MDLM,
    pairs: list[Pair],
    pad_id: int,
    generator: torch.Generator | None = None,
    weighted: bool = True,
    copies: int = 1,
) -> torch.Tensor:
    """Steps 1-4 of the module docstring on one batch: the masked-diffusion loss (the ELBO,
    or with `weighted=False` the mean cross-entropy over masked positions). With `copies`
    C > 1 each row's prefix is encoded once and C independently noised copies of its target
    are denoised against it (t stratified over all B * C copies); the loss averages them."""
    ids, valid, target = collate_pairs(pairs, pad_id)
    prefix = model.encode_prefix(ids, valid)
    if copies > 1:
        prefix = repeat_prefix(prefix, copies)
        target = target.repeat_interleave(copies, 0)  # (B * C, L)
    noisy, masked, t = noise(target, model.mask_id, generator)  # (B*C, L), (B*C, L), (B*C,)
    logits = model.denoise(noisy, prefix)  # (B * C, L, V)
    return mdlm_loss(logits, target, masked, t, weighted)


def repeat_prefix(prefix: PrefixKV, copies: int) -> PrefixKV:
    """`prefix` with each row repeated `copies` times in place (row b becomes rows b*C to
    b*C + C - 1); gradients flow back to the one encoding."""
    return PrefixKV(
        [k.repeat_interleave(copies, 0) for k in prefix.k],
        [v.repeat_interleave(copies, 0) for v in prefix.v],
        prefix.valid.repeat_interleave(copies, 0),
        prefix.lengths.repeat_interleave(copies, 0),
        None if prefix.copy_keys is None else prefix.copy_keys.repeat_interleave(copies, 0),
        None if prefix.ids is None else prefix.ids.repeat_interleave(copies, 0),
        None if prefix.last is None else prefix.last.repeat_interleave(copies, 0),
    )


def plan_batches(cfg: MDLMTrainConfig, data: list[Pair]) -> Plan:
    """Every batch of the run, epoch after epoch (a pure function of the seed), cut at the
    token budget. A row costs its prefix plus L per target copy, so a batch's compute stays
    about `batch_tokens` whatever the copies."""
    cost = [len(p.prefix) + cfg.target_copies * cfg.model.target_len for p in data]
    plan: Plan = []
    for epoch in range(cfg.epochs):
        plan += bucket_plan(cost, cfg.batch_tokens, random.Random(cfg.seed * 1000 + epoch))
    return cut_at_tokens(plan, [p.real for p in data], cfg.max_tokens)


@torch.no_grad()
def val_loss(model: MDLM, data: list[Pair], pad_id: int, batch: int = 16) -> float:
    """The ELBO over `data` with fixed noise (seed 0): comparable across evaluations."""
    model.train(False)
    gen = torch.Generator().manual_seed(0)
    losses = [
        float(step_loss(model, data[lo : lo + batch], pad_id, gen)) * len(data[lo : lo + batch])
        for lo in range(0, len(data), batch)
    ]
    return sum(losses) / max(1, len(data))


@torch.no_grad()
def val_exact(
    model: MDLM, tok: PreTrainedTokenizerBase, examples: list[Example], steps: int
) -> float:
    """Fraction of examples whose greedy `steps`-step sample equals the target exactly."""
    if not examples:
        return 0.0
    model.train(False)
    cfg = GenerationConfig(max_new_tokens=model.cfg.target_len)
    room = model.cfg.max_positions - model.cfg.target_len
    hits = 0
    for lo in range(0, len(examples), 32):
        chunk = examples[lo : lo + 32]
        prefixes = [encode(tok, ex.prompt)[-room:] for ex in chunk]
        got = sample_tokens(model, prefixes, cfg, steps, tok.eos_token_id, tok.pad_token_id)
        hits += sum(decode(tok, g) == ex.target for g, ex in zip(got.tokens, chunk, strict=True))
    return hits / len(examples)


def _optimizer(model: MDLM, cfg: MDLMTrainConfig) -> torch.optim.AdamW:
    params = list(model.parameters())
    groups = [  # weight decay on matrices only (as SFT)
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), foreach=False)


def train_mdlm(
    cfg: MDLMTrainConfig,
    train: list[Example],
    val: list[Example],
    out_dir: str | Path,
    extra_args: dict[str, Any] | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    model: MDLM | None = None,
) -> dict[str, Any]:
    """Train on `train`, evaluate on `val`, write an MDLM checkpoint to `out_dir`; return
    its metrics. `extra_args` join the recorded training arguments; `tokenizer`: the one to
    use (else a byte-level BPE is trained on the train texts); `model`: the one to start
    from (e.g. `mdlm_adapt.mdlm_from_ar`; its config must be `cfg.model`), else a fresh
    one."""
    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    if tokenizer is None:
        texts = (t for ex in train for t in (ex.prompt, ex.target))
        tokenizer = train_tokenizer(texts, cfg.vocab_size)
    tok = tokenizer
    if model is None:
        model = MDLM(cfg.model, len(tok))
    elif model.cfg != cfg.model or model.vocab_size < len(tok):
        raise ValueError(
            "the starting model's config must be cfg.model, its vocabulary the tokenizer's"
        )
    data = [encode_pair(tok, ex, cfg.model) for ex in train]
    pick = random.Random(cfg.seed)  # fixed val subsets, as SFT's
    val_set = [
        encode_pair(tok, e, cfg.model)
        for e in pick.sample(val, min(len(val), cfg.val_loss_examples))
    ]
    exact_set = pick.sample(val, min(len(val), cfg.exact_samples))
    plan = plan_batches(cfg, data)
    opt = _optimizer(model, cfg)
    schedule = partial(
        lr_factor, warmup=cfg.warmup_steps, total=len(plan), min_ratio=cfg.min_lr_ratio
    )
    sched = LambdaLR(opt, schedule)
    gen = torch.Generator().manual_seed(cfg.seed)  # the noise of every step
    run: dict[str, Any] = {"step": 0, "tokens_seen": 0, "curve": [], "losses": []}
    bar = tqdm(total=len(plan), disable=not cfg.progress, desc="mdlm")
    started = time.monotonic()
    model.train()
    for rows in plan:
        batch = [data[i] for row in rows for i in row]
        loss = step_loss(model, batch, tok.pad_token_id, gen, cfg.elbo_weighting, cfg.target_copies)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        run["step"] += 1
        run["tokens_seen"] += sum(p.real for p in batch)
        run["losses"].append(round(loss.item(), 6))
        elapsed = time.monotonic() - started
        bar.update(1)
        bar.set_postfix(
            loss=f"{run['losses'][-1]:.3f}", tok_s=f"{run['tokens_seen'] / elapsed:.0f}"
        )
        stop = cfg.time_budget_min is not None and elapsed > 60 * cfg.time_budget_min
        done = stop or run["step"] == len(plan)
        run["seconds"] = elapsed
        if done or (cfg.eval_every and run["step"] % cfg.eval_every == 0):
            point = {
                "val_loss": round(val_loss(model, val_set, tok.pad_token_id), 5),
                "val_exact": round(val_exact(model, tok, exact_set, cfg.sample_steps), 5),
            }
            model.train()
            minutes, loss_now = round(elapsed / 60, 3), run["losses"][-1]
            run["curve"].append(
                {"step": run["step"], "minutes": minutes, "train_loss": loss_now, **point}
            )
            bar.write(f"step {run['step']}: {run['curve'][-1]}")
        if stop:
            break
    bar.close()
    return _finish(cfg, out_dir, model, tok, run, len(plan), extra_args or {})


def _finish(
    cfg: MDLMTrainConfig,
    out_dir: str | Path,
    model: MDLM,
    tok: PreTrainedTokenizerBase,
    run: dict[str, Any],
    total_steps: int,
    extra_args: dict[str, Any],
) -> dict[str, Any]:
    """Write the checkpoint (kind "mdlm") and return its metrics."""
    last = run["curve"][-1] if run["curve"] else {}
    metrics = {
        "val_loss": last.get("val_loss"),
        "val_exact": last.get("val_exact"),
        "step": run["step"],
        "total_steps": total_steps,
        "train_minutes": round(run.get("seconds", 0.0) / 60, 3),
        "tokens_seen": run["tokens_seen"],
        "curve": run["curve"],
        "train_losses": run["losses"],
    }
    args = {**cfg.to_dict(), **extra_args}
    meta = CheckpointMeta(
        cfg.serialization_version, kind="mdlm", training_args=args, metrics=metrics
    )
    save_mdlm(out_dir, model, tok, meta)
    return metrics


__all__ = [
    "MDLM_TRAIN_PRESETS",
    "MDLMTrainConfig",
    "Pair",
    "collate_pairs",
    "encode_pair",
    "plan_batches",
    "repeat_prefix",
    "step_loss",
    "train_mdlm",
    "val_exact",
    "val_loss",
]
