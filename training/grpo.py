"""GRPO on the world model: RL on sim-to-real rewards (RWML) with error-aware weighting of
the contexts it gets wrong (DSWorld), starting from any SFT checkpoint.

A tiny CPU run (seconds; `grpo_run` loads the start and builds the items from episodes):

    from simworld.training.grpo_run import GRPORun, run_grpo
    run_grpo(GRPORun(init="out/tiny", out="out/tiny-grpo", preset="tiny", limit=8,
                     envs=("frozenlake",), embeddings=False, rewards=("json_canonical",)))

The command: `simworld train grpo --init default --out out/grpo --minutes 30`.

One step, top to bottom (`_step`):
  1. Pick B contexts of real trajectories with probability 1 + boost * (share of the last
     group that was wrong; unseen contexts count as wrong): DSWorld's error-aware
     optimization, as resampling. A retired context is never picked again.
  2. Roll out G sampled predictions per context with the project's engine (its own decode
     path: the prompt is prefilled once per group, every row has its own seeded generator).
  3. Reward each by the sim-to-real gap (`training/rewards.py`: the eval metrics, weighted)
     and record whether it is right and, if not, the kind of error.
  4. Curriculum: a group right in all G samples is dropped and its context retired (RWML's
     filter); a group whose rewards are all equal carries no gradient and is left out too.
  5. Group-relative advantages (`grpo_maths.group_advantages`).
  6. Update: one forward per kept group over its prompt and all G completions packed in one
     row (each completion sees the shared prompt and itself; positions restart after the
     prompt), so the prompt is computed once, not G times, and the gradient is exact. The
     loss is the token-level clipped policy gradient plus a KL penalty (k3) to the frozen
     starting checkpoint, averaged over every completion token of the step; AdamW, warmup,
     gradient clipping.
Every `eval_every` steps, at step 0 and at the end: greedy decoding of a fixed val subset,
scored by the same functions (JSON-canonical, cosine, ...), and the val loss.

Why a compact loop of our own, not TRL's GRPOTrainer: TRL is not installed here, and its
trainer samples with `model.generate` or vLLM from chat prompts and hands reward functions
completion strings. Our model has its own serialization and a faster seeded decode path,
our rewards need the real step (volatile fields, states, output schemas), and the
shared-prompt packing above (G times fewer prompt tokens per update, which is what a CPU
run can afford) has no hook there. The loop stays readable in one file.

Simplifications (as nanochat lists its own): one process; the reference is the starting
checkpoint, frozen; no value model, no entropy bonus; `updates_per_rollout` > 1 reuses a
rollout under the clipped ratio, 1 (default) is plain on-policy; the engine is rebuilt after
every update (its decode path keeps concatenated copies of the weights); resuming restores
weights, optimizer, curriculum and RNG, so it continues the same run (sampling is seeded per
step and row), though CPU kernels keep it from matching bit for bit across thread counts.
"""

from __future__ import annotations

import copy
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.optim.lr_scheduler import LambdaLR
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from simworld.eval.embedding import Encoder
from simworld.eval.predictors import StepRef
from simworld.training.batching import Encoded
from simworld.training.grpo_maths import (
    Packed,
    chosen_logprobs,
    group_advantages,
    informative_groups,
    kl_to_reference,
    masked_mean,
    pack_group,
    policy_loss,
    weighted_sample,
)
from simworld.training.rewards import (
    DEFAULT_WEIGHTS,
    CachedEncoder,
    RewardSet,
    Schemas,
    Transitions,
    choose_tau,
)
from simworld.training.sft import STATE_FILE, _load_state, _save_state, lr_factor
from simworld.training.sft_eval import val_loss
from simworld.worldmodel.checkpoint import META_FILE, CheckpointMeta, save_checkpoint
from simworld.worldmodel.context import Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.render import parse_target
from simworld.worldmodel.tokenizer import decode
from simworld.worldmodel.world_model import Prediction

MAX_ROWS = 4096  # seed offsets per step: contexts_per_step * group_size must stay below


@dataclass
class GRPOConfig:
    """Everything one GRPO run needs besides its start, its data and its output directory."""

    group_size: int = 8  # G predictions sampled per context
    contexts_per_step: int = 8  # B contexts per update
    temperature: float = 0.8  # below 1: a weak model's samples stay near its greedy output
    lr: float = 5e-5
    warmup_steps: int = 5
    kl_beta: float = 0.02  # weight of the KL penalty to the starting checkpoint
    clip: float = 0.2  # ratio clipping (binds only when updates_per_rollout > 1)
    updates_per_rollout: int = 1
    scale_advantages: bool = True  # divide by the group's std (False: Dr. GRPO's centring)
    grad_clip: float = 1.0
    rewards: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    tau: float | None = None  # cosine threshold; None: chosen on val predictions
    tau_contexts: int = 32  # val contexts (x G samples) the threshold is chosen on
    boost: float = 2.0  # error-aware resampling: weight 1 + boost * wrong share
    filter_solved: bool = True  # retire a context right in all G samples (RWML)
    max_steps: int | None = None
    time_budget_min: float | None = None  # stop (saving) after this many minutes
    eval_every: int = 50  # steps between val evaluations (also at step 0 and at the end)
    eval_contexts: int = 64  # fixed val subset decoded greedily
    save_every: int = 20  # steps between resumable states
    max_new_tokens: int = 128  # the checkpoint's decode bound; the caller fills it
    batch_tokens: int = 4096  # val-loss batches
    seed: int = 0
    threads: int = 2
    progress: bool = True

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"group_size={self.group_size}: a group needs >= 2 samples to compare")
        if self.contexts_per_step < 1 or self.updates_per_rollout < 1 or self.threads < 1:
            raise ValueError("contexts_per_step, updates_per_rollout and threads must be >= 1")
        if self.contexts_per_step * self.group_size >= MAX_ROWS:
            raise ValueError(f"contexts_per_step * group_size must stay below {MAX_ROWS}")
        if self.lr <= 0 or self.temperature <= 0 or self.kl_beta < 0:
            raise ValueError("lr and temperature must be positive, kl_beta >= 0")
        if self.max_steps is None and self.time_budget_min is None:
            raise ValueError("set max_steps or time_budget_min: GRPO has no epochs to end it")

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> GRPOConfig:
        """Preset "tiny" (tests: seconds) or "default" (the 2-core CPU run), by keyword."""
        if name not in GRPO_PRESETS:
            raise ValueError(f"unknown GRPO preset {name!r}: choose one of {sorted(GRPO_PRESETS)}")
        return replace(GRPO_PRESETS[name], **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GRPO_PRESETS = {
    "tiny": GRPOConfig(
        group_size=4,
        contexts_per_step=2,
        lr=1e-3,
        warmup_steps=1,
        tau_contexts=4,
        eval_every=0,
        eval_contexts=4,
        save_every=0,
        max_steps=2,
        threads=1,
    ),
    "default": GRPOConfig(max_steps=None, time_budget_min=30.0),
}


class Start(NamedTuple):
    """The checkpoint a run starts from (also its frozen reference)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    meta: CheckpointMeta
    directory: Path


class Learner(NamedTuple):
    """What an update changes (the model, its optimizer and schedule) and what it reads."""

    model: PreTrainedModel
    reference: PreTrainedModel  # the start, frozen: the KL anchor
    tok: PreTrainedTokenizerBase
    opt: torch.optim.Optimizer
    sched: LambdaLR


@dataclass(frozen=True)
class Item:
    """One real transition to predict: where it is, its context, the prompt's token ids and
    the target text with its encoding (prompt + target + eos, for the val loss)."""

    ref: StepRef
    ctx: Context
    prompt_ids: list[int]
    encoded: Encoded


@dataclass
class GRPOData:
    """What a run trains on and is measured with."""

    train: list[Item]
    val: list[Item]  # the fixed val subset decoded greedily at each evaluation
    tau: list[Item]  # the val subset the cosine threshold is chosen on
    schemas: Schemas  # env -> tool -> output schema, from the train episodes


@dataclass
class Rollout:
    """G sampled completions of one context: tokens (the end token kept when it was
    generated, since stopping is learned too) and what they parse to."""

    index: int  # the context's index in the train items
    tokens: list[list[int]]
    predictions: list[Prediction]


@dataclass
class Curriculum:
    """Which contexts come next: DSWorld-style weights from each context's last wrong share,
    RWML's retirement of contexts right in every sample, and the error kinds seen."""

    size: int
    boost: float
    wrong: dict[int, float] = field(default_factory=dict)
    last_kind: dict[int, str] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)
    kinds: Counter[str] = field(default_factory=Counter)

    def weights(self) -> list[float]:
        return [
            0.0 if i in self.retired else 1.0 + self.boost * self.wrong.get(i, 1.0)
            for i in range(self.size)
        ]

    def record(self, i: int, correct: list[bool], kinds: list[str | None], retire: bool) -> None:
        self.wrong[i] = 1.0 - sum(correct) / len(correct)
        seen = Counter(k for k in kinds if k is not None)
        self.kinds.update(seen)
        if seen:
            self.last_kind[i] = seen.most_common(1)[0][0]
        if retire and all(correct):
            self.retired.add(i)


def _engine(model: PreTrainedModel, tok: PreTrainedTokenizerBase) -> TransformersEngine:
    """A fresh engine over the current weights; no prefix cache (its keys would go stale)."""
    return TransformersEngine(model, tok, prefix_cache_size=0)


def _prediction(tok: PreTrainedTokenizerBase, ids: list[int], ctx: Context) -> Prediction:
    text = decode(tok, ids)
    parsed = parse_target(text, ctx.action_record, expect_patch=ctx.tracks_state)
    return Prediction(parsed.observation, parsed.patch, text, list(parsed.problems))


def rollout(
    engine: TransformersEngine,
    items: list[Item],
    indices: list[int],
    cfg: GRPOConfig,
    seed: int,
) -> list[Rollout]:
    """Step 2: G seeded samples per context (row j of context b: seed + b * G + j)."""
    gen = GenerationConfig(
        cfg.max_new_tokens, do_sample=True, temperature=cfg.temperature, seed=seed
    )
    eos, G = engine.tokenizer.eos_token_id, cfg.group_size
    out = []
    for b, i in enumerate(indices):
        item = items[i]
        new = engine.generate_tokens([item.prompt_ids] * G, gen, [b * G + j for j in range(G)])
        # a row shorter than the bound stopped at an end token (the tokenizer's eos for our
        # checkpoints; a base whose generation config adds others is scored with its eos)
        tokens = [[*ids, eos] if len(ids) < cfg.max_new_tokens else ids for ids in new]
        predictions = [_prediction(engine.tokenizer, ids, item.ctx) for ids in new]
        out.append(Rollout(i, tokens, predictions))
    return out


def group_logprobs(
    model: PreTrainedModel, packed: Packed, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of every completion token (G, L) under `model`, and their mask (G, L)."""
    logits = model(**packed.inputs).logits[0]  # (T, V)
    flat = chosen_logprobs(logits, packed.positions, packed.tokens, temperature)  # (K,)
    rows = pad_sequence(list(torch.split(flat, packed.lengths)), batch_first=True)  # (G, L)
    lengths = torch.tensor(packed.lengths)  # (G,)
    mask = (torch.arange(rows.shape[1])[None, :] < lengths[:, None]).float()  # (G, L)
    return rows, mask


def update(
    learner: Learner, groups: list[tuple[Packed, torch.Tensor]], cfg: GRPOConfig
) -> dict[str, float]:
    """Step 6 for (packed group, advantages (G,)) pairs; returns the mean loss and KL."""
    n_tokens = float(sum(sum(p.lengths) for p, _ in groups))
    model, opt = learner.model, learner.opt
    with torch.no_grad():
        ref = [group_logprobs(learner.reference, p, cfg.temperature)[0] for p, _ in groups]
    old: list[torch.Tensor] = []
    loss_sum = kl_sum = 0.0
    model.train()
    for u in range(cfg.updates_per_rollout):
        opt.zero_grad(set_to_none=True)
        loss_sum = kl_sum = 0.0
        for g, (packed, adv) in enumerate(groups):
            logp, mask = group_logprobs(model, packed, cfg.temperature)  # (G, L) each
            if u == 0:
                old.append(logp.detach())  # the rollout's weights: ratio 1 on the first pass
            per_token = policy_loss(logp, old[g], ref[g], adv, cfg.kl_beta, cfg.clip)  # (G, L)
            loss = masked_mean(per_token, mask, denominator=n_tokens)
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += loss.item()
            kl_sum += float((kl_to_reference(logp.detach(), ref[g]) * mask).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        learner.sched.step()
    return {"loss": loss_sum, "kl": kl_sum / max(1.0, n_tokens)}


def _mean(values: Sequence[float | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return round(sum(known) / len(known), 5) if known else None


def _step(
    step: int,
    learner: Learner,
    data: GRPOData,
    rewards: RewardSet,
    cur: Curriculum,
    rng: random.Random,
    cfg: GRPOConfig,
) -> dict[str, Any]:
    """One GRPO step (steps 1 to 6 of the module docstring); returns its log entry."""
    # === 1. Pick contexts, error-aware
    picked = weighted_sample(cur.weights(), cfg.contexts_per_step, rng)
    if not picked:
        return {"step": step, "done": "every context is solved"}
    # === 2. Roll out G predictions per context
    engine = _engine(learner.model, learner.tok)
    groups = rollout(engine, data.train, picked, cfg, _seed(cfg.seed, step))
    # === 3. Reward them against the real transitions
    refs = [data.train[g.index].ref for g in groups for _ in g.predictions]
    preds = [p for g in groups for p in g.predictions]
    scores = rewards.score(Transitions(refs, preds, data.schemas))
    G = cfg.group_size
    R = torch.tensor(scores.total).view(len(groups), G)  # (B, G)
    # === 4. Curriculum: record errors, retire solved contexts, keep informative groups
    for b, g in enumerate(groups):
        rows = slice(b * G, (b + 1) * G)
        cur.record(g.index, scores.correct[rows], scores.kinds[rows], cfg.filter_solved)
    keep = informative_groups(R)  # (B,)
    # === 5. Group-relative advantages
    adv = group_advantages(R, scale=cfg.scale_advantages)  # (B, G)
    # === 6. Update on the kept groups
    packed = [
        (pack_group(data.train[g.index].prompt_ids, g.tokens), adv[b])
        for b, g in enumerate(groups)
        if keep[b]
    ]
    stats = update(learner, packed, cfg) if packed else {}
    return {
        "step": step,
        "reward": _mean(scores.total),
        "correct": _mean([float(c) for c in scores.correct]),
        "cosine": _mean(scores.columns["cosine"]) if "cosine" in scores.columns else None,
        "kept": len(packed),
        "retired": len(cur.retired),
        "kinds": dict(Counter(k for k in scores.kinds if k is not None)),
        **{k: round(v, 6) for k, v in stats.items()},
    }


def _seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step) * MAX_ROWS  # rows add b * G + j < MAX_ROWS


def evaluate(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    items: list[Item],
    data: GRPOData,
    rewards: RewardSet,
    cfg: GRPOConfig,
) -> dict[str, float | None]:
    """Greedy predictions of `items` scored by the reward functions, and the val loss."""
    engine = _engine(model, tok)
    greedy = GenerationConfig(cfg.max_new_tokens, do_sample=False)
    new = engine.generate_tokens([it.prompt_ids for it in items], greedy)
    preds = [_prediction(tok, ids, it.ctx) for ids, it in zip(new, items, strict=True)]
    scores = rewards.score(Transitions([it.ref for it in items], preds, data.schemas))
    loss = val_loss(model, [it.encoded for it in items], tok.pad_token_id, cfg.batch_tokens)
    point = {
        "val_reward": _mean(scores.total),
        "val_json_canonical": _mean(scores.columns["json_canonical"]),
        "val_correct": _mean([float(c) for c in scores.correct]),
        "val_readable": _mean([float(p.ok and p.observation is not None) for p in preds]),
        "val_state_match": _mean(scores.columns["state_match"]),
        "val_loss": round(loss, 5),
    }
    if "cosine" in scores.columns:
        point["val_cosine"] = _mean(scores.columns["cosine"])
    model.train()
    return point


def pick_tau(
    model: PreTrainedModel,
    tok: PreTrainedTokenizerBase,
    items: list[Item],
    data: GRPOData,
    rewards: RewardSet,
    cfg: GRPOConfig,
) -> tuple[float, float | None]:
    """τ and its agreement: G samples of each val item from the starting model, their
    cosine against JSON-canonical match (RWML binarizes the cosine; here the threshold is
    the one that best reproduces exact structured agreement). When no sample matches, or
    every one does, nothing separates them: τ stays `rewards.tau`, agreement None."""
    groups = rollout(_engine(model, tok), items, list(range(len(items))), cfg, _seed(cfg.seed, -1))
    refs = [items[g.index].ref for g in groups for _ in g.predictions]
    preds = [p for g in groups for p in g.predictions]
    probe = replace(rewards, weights={"cosine": 1.0})  # cosine and the match, nothing else
    scores = probe.score(Transitions(refs, preds, data.schemas))
    cosines = [float(c or 0.0) for c in scores.columns["cosine"]]
    matches = [float(m or 0.0) for m in scores.columns["json_canonical"]]
    if len(set(matches)) < 2:
        return rewards.tau, None
    return choose_tau(cosines, matches)


def _finish(
    out: Path, model: PreTrainedModel, start: Start, cfg: GRPOConfig, run: dict[str, Any],
    extra_args: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """Write the checkpoint (the start's layout and files, new weights, GRPO's arguments
    and metrics) and return its metrics."""
    cur: Curriculum = run["curriculum"]
    final = run["curve"][-1] if run["curve"] else {}
    metrics = {
        **{k: v for k, v in final.items() if k.startswith("val_")},
        "start": run["curve"][0] if run["curve"] else {},
        "step": run["step"],
        "train_minutes": round(run["seconds"] / 60, 3),
        "tau": run["tau"],
        "tau_agreement": run["tau_agreement"],
        "error_kinds": dict(cur.kinds),
        "retired_contexts": len(cur.retired),
        "curve": run["curve"],
        "log": run["log"],
    }
    for path in start.directory.iterdir():  # files the start carries beside the weights
        if path.is_file() and path.name != META_FILE:
            shutil.copy2(path, out / path.name)
    grpo_args = {**cfg.to_dict(), **extra_args, "init": str(start.directory)}
    args = {**start.meta.training_args, "grpo": grpo_args}
    meta = CheckpointMeta(start.meta.serialization_version, start.meta.kind, args, metrics)
    save_checkpoint(out, model, start.tokenizer, meta)
    return metrics


def _prepare(
    cfg: GRPOConfig, start: Start, data: GRPOData, encoder: Encoder | None, state_dir: Path,
    resume: bool,
) -> tuple[Learner, RewardSet, dict[str, Any]]:  # fmt: skip
    """The learner, the rewards (τ chosen on val unless given or resumed) and the run
    record (resumed from `state_dir`, or fresh with the step-0 evaluation)."""
    torch.manual_seed(cfg.seed)
    model, tok = start.model, start.tokenizer
    reference = copy.deepcopy(model).requires_grad_(False).train(False)  # before resuming
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0, foreach=False
    )
    sched = LambdaLR(opt, partial(lr_factor, warmup=cfg.warmup_steps, total=1, min_ratio=1.0))
    learner = Learner(model, reference, tok, opt, sched)
    cached = CachedEncoder(encoder) if encoder is not None else None
    rewards = RewardSet(cfg.rewards, cached, cfg.tau or 0.9)
    run: dict[str, Any] = {"step": 0, "seconds": 0.0, "curve": [], "log": [], "tau": cfg.tau,
                           "tau_agreement": None, "rng": random.Random(cfg.seed).getstate(),
                           "curriculum": Curriculum(len(data.train), cfg.boost)}  # fmt: skip
    if resume:
        run = _load_state(state_dir, model, opt, sched)
    if run["tau"] is None and cached is not None:
        run["tau"], run["tau_agreement"] = pick_tau(model, tok, data.tau, data, rewards, cfg)
        n, agreement = len(data.tau) * cfg.group_size, run["tau_agreement"]
        print(f"grpo: tau={run['tau']}: " + (
            f"cosine >= tau agrees with JSON-canonical match on {agreement:.1%} of {n} val samples"
            if agreement is not None else f"kept, as no two of {n} val samples differ in match"
        ))  # fmt: skip
    rewards = replace(rewards, tau=run["tau"] or rewards.tau)
    if not run["curve"]:
        point = evaluate(model, tok, data.val, data, rewards, cfg)
        run["curve"].append({"step": 0, "minutes": 0.0, **point})
    return learner, rewards, run


def train_grpo(
    cfg: GRPOConfig,
    start: Start,
    data: GRPOData,
    out_dir: str | Path,
    encoder: Encoder | None = None,
    resume: bool = False,
    extra_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train `start.model` on `data.train`, evaluate on `data.val`, write a checkpoint to
    `out_dir` that `load_world_model` serves; return its metrics. `encoder` is needed when
    a cosine term is weighted (and to choose τ)."""
    torch.set_num_threads(cfg.threads)
    out, state_dir = Path(out_dir), Path(out_dir) / "resume"
    if out.resolve() == start.directory.resolve():
        raise ValueError(f"--out {out} is the starting checkpoint: write to a new directory")
    if resume and not (state_dir / STATE_FILE).is_file():
        raise FileNotFoundError(f"resume=True but no {STATE_FILE} in {state_dir}: run without it")
    state_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()  # the budget counts the τ choice and every evaluation
    learner, rewards, run = _prepare(cfg, start, data, encoder, state_dir, resume)
    base_seconds = run["seconds"]
    rng = random.Random()
    rng.setstate(run["rng"])
    bar = tqdm(total=cfg.max_steps, initial=run["step"], disable=not cfg.progress, desc="grpo")
    while cfg.max_steps is None or run["step"] < cfg.max_steps:
        entry = _step(run["step"] + 1, learner, data, rewards, run["curriculum"], rng, cfg)
        elapsed = time.monotonic() - started
        run["step"], run["seconds"], run["rng"] = (
            entry["step"],
            base_seconds + elapsed,
            rng.getstate(),
        )
        entry["minutes"] = round(run["seconds"] / 60, 3)
        run["log"].append(entry)
        bar.update(1)
        bar.set_postfix({k: entry.get(k) for k in ("reward", "correct", "kl", "kept", "retired")})
        over = cfg.time_budget_min is not None and elapsed > 60 * cfg.time_budget_min
        done = over or "done" in entry or run["step"] == cfg.max_steps
        if done or (cfg.eval_every and run["step"] % cfg.eval_every == 0):
            point = evaluate(learner.model, learner.tok, data.val, data, rewards, cfg)
            run["curve"].append({"step": run["step"], "minutes": entry["minutes"], **point})
            bar.write(f"step {run['step']}: {run['curve'][-1]}")
        if done or (cfg.save_every and run["step"] % cfg.save_every == 0):
            _save_state(state_dir, learner.model, learner.opt, learner.sched, run)
        if done:
            break
    bar.close()
    return _finish(out, learner.model, start, cfg, run, extra_args or {})


__all__ = [
    "GRPO_PRESETS",
    "Curriculum",
    "GRPOConfig",
    "GRPOData",
    "Item",
    "Learner",
    "Rollout",
    "Start",
    "evaluate",
    "group_logprobs",
    "pick_tau",
    "rollout",
    "train_grpo",
    "update",
]
