"""The `simworld train grpo` recipe: an SFT checkpoint and real episodes → the one
serialization → `train_grpo` → a checkpoint that `load_world_model` serves.

A tiny CPU run (seconds), as its test does:

    from simworld.training.grpo_run import GRPORun, run_grpo
    metrics = run_grpo(GRPORun(init="out/tiny", out="out/tiny-grpo", preset="tiny",
                               envs=("frozenlake",), limit=8, embeddings=False,
                               rewards=("json_canonical=1", "state_match=1")))

The start is any checkpoint directory (or "default", the shipped model), loaded as
`load_world_model` loads it: its recorded training arguments fix the prompt budget (counted
as it was counted in training), the decode bound and the longest target, and a checkpoint
trained with retrieved examples brings its memory (train steps see neighbours from other
scenarios only, as in SFT), so GRPO's prompts are the ones the model learned. The GRPO
checkpoint keeps the start's files (the memory included) and training arguments, and adds
its own under `training_args["grpo"]`.
Episodes come from the bundled splits or dump files, the same way SFT reads them
(`training.data.load_split`, `exclude_apis` for the held-out-API experiment); output
schemas for the schema-validity reward come from the train episodes, as `simworld eval`
takes them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from transformers import PreTrainedTokenizerBase

from simworld.data.records import Episode
from simworld.eval.predictors import StepRef
from simworld.eval.run import output_schemas
from simworld.training.batching import Example, encode_example
from simworld.training.data import ExampleReport, load_split
from simworld.training.grpo import GRPO_PRESETS, GRPOConfig, GRPOData, Item, Start, train_grpo
from simworld.training.rewards import RewardSet, parse_weights
from simworld.worldmodel.checkpoint import META_FILE, CheckpointMeta
from simworld.worldmodel.context import Budget, build_context, with_example
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.render import render_prompt, render_target
from simworld.worldmodel.retrieval import Retriever
from simworld.worldmodel.tokenizer import encode
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import default_checkpoint, load_world_model


@dataclass(frozen=True)
class GRPORun:
    """One `simworld train grpo` invocation; None leaves the preset's value."""

    out: str | Path
    init: str | Path = "default"  # the SFT checkpoint to start from
    preset: str = "default"
    data: tuple[str, ...] = ()  # dump files; empty: the bundled train split
    val_data: tuple[str, ...] = ()  # dump files; empty: the bundled val split
    envs: tuple[str, ...] = ()
    exclude_apis: tuple[str, ...] = ()
    minutes: float | None = None
    max_steps: int | None = None
    threads: int | None = None  # torch CPU threads (None: the preset's)
    resume: bool = False
    seed: int = 0
    # The train steps contexts are drawn from: a seeded sample of this many (None: all).
    # Building a context costs ~10-20 ms on 2 cores, all ~12,000 bundled train steps some
    # minutes, while a 30-minute run visits ~700 of them.
    pool: int | None = 4000
    limit: int | None = None  # the first N training transitions only (smoke runs)
    group_size: int | None = None
    contexts_per_step: int | None = None
    lr: float | None = None
    kl_beta: float | None = None
    rewards: tuple[str, ...] = ()  # "name=weight" specs; empty: the preset's
    tau: float | None = None  # fixed cosine threshold; None: chosen on val
    embeddings: bool = True  # False: no sentence encoder (no cosine terms, no τ choice)

    def __post_init__(self) -> None:
        if self.preset not in GRPO_PRESETS:
            raise ValueError(
                f"unknown preset {self.preset!r}: choose one of {sorted(GRPO_PRESETS)}"
            )

    def config(self, max_new_tokens: int) -> GRPOConfig:
        """The preset with this run's overrides and the checkpoint's decode bound."""
        overrides: dict[str, Any] = {
            "group_size": self.group_size,
            "contexts_per_step": self.contexts_per_step,
            "lr": self.lr,
            "kl_beta": self.kl_beta,
            "tau": self.tau,
        }
        cfg = GRPOConfig.preset(
            self.preset, **{k: v for k, v in overrides.items() if v is not None}
        )
        if self.minutes is not None or self.max_steps is not None:
            cfg = replace(cfg, time_budget_min=self.minutes, max_steps=self.max_steps)
        if self.threads is not None:
            cfg = replace(cfg, threads=self.threads)
        rewards = parse_weights(self.rewards) if self.rewards else cfg.rewards
        return replace(cfg, rewards=rewards, max_new_tokens=max_new_tokens, seed=self.seed)


def make_items(
    refs: Sequence[StepRef],
    budget: Budget,
    tok: PreTrainedTokenizerBase,
    max_new_tokens: int,
    max_len: int,
    memory: Retriever | None = None,
    exclude_own: bool = False,
    limit: int | None = None,
) -> tuple[list[Item], ExampleReport]:
    """Each step as an Item, as SFT makes its pairs (`training.data.to_examples`, the
    example block from `memory` included, from other scenarios only with `exclude_own`)
    but keeping where each came from; steps that cannot fit the budget, or whose target is
    longer than the model learned to write, are counted in the report, not dropped
    silently. `limit`: stop after that many items."""
    items: list[Item] = []
    report = ExampleReport()
    keep = max_len - max_new_tokens  # prompt tokens that fit beside a full-length target
    for episode, index in refs:
        if limit is not None and len(items) >= limit:
            break
        try:
            ctx = build_context(episode, index, budget)
        except BudgetError:
            report.over_budget += 1
            continue
        if memory is not None and budget.example > 0:
            own = episode.task.id if exclude_own else None
            found = memory.neighbours(
                episode.env, ctx.action_record, ctx.previous, budget.examples, own
            )
            ctx = with_example(ctx, found, budget)
        target = render_target(ctx)
        if budget.count(target) > max_new_tokens - 1:  # the eos takes the last slot
            report.long_target += 1
            continue
        prompt = render_prompt(ctx)
        encoded = encode_example(
            tok, Example(prompt, target, episode.task.id, episode.env), max_len
        )
        items.append(Item((episode, index), ctx, encode(tok, prompt)[-keep:], encoded))
        report.kept += 1
        report.per_env[episode.env] += 1
    return items, report


def _refs(episodes: Sequence[Episode]) -> list[StepRef]:
    return [(ep, i) for ep in episodes for i in range(len(ep.steps))]


class Loaded(NamedTuple):
    start: Start
    budget: Budget  # the prompt budget the start was trained with
    memory: Retriever | None  # its retrieval memory, when it was trained with examples


def load_start(init: str | Path) -> Loaded:
    """The checkpoint to start from ("default": the shipped one), loaded as the world
    model loader loads it (serialization version checked, budget, retrieval memory)."""
    directory = default_checkpoint() if str(init) == "default" else Path(init)
    wm = load_world_model(directory)
    if not isinstance(wm.engine, TransformersEngine):
        raise ValueError(
            f"{directory} is not an autoregressive transformers checkpoint (an MDLM?): "
            "GRPO trains an AR world model"
        )
    meta = CheckpointMeta.from_dict(json.loads((directory / META_FILE).read_text()), directory)
    start = Start(wm.engine.model, wm.engine.tokenizer, meta, directory)
    return Loaded(start, wm.budget, wm.memory)


def run_grpo(run: GRPORun) -> dict[str, Any]:
    """Load the start and the data, train, write the checkpoint to `run.out`; return its
    metrics."""
    start, budget, memory = load_start(run.init)
    args = start.meta.training_args
    max_new, max_len = int(args.get("max_new_tokens", 256)), int(args.get("max_len", 512))
    cfg = run.config(max_new)
    encoder = None
    if run.embeddings:
        from simworld.eval.embedding import load_encoder

        encoder = load_encoder()
    RewardSet(cfg.rewards, encoder)  # fail now, not after loading the data, on bad weights
    train_eps = load_split("train", run.data, run.envs, run.exclude_apis)
    val_eps = load_split("val", run.val_data, run.envs)
    tok = start.tokenizer
    refs = _refs(train_eps)
    if run.pool is not None and len(refs) > run.pool:
        drawn = sorted(random.Random(run.seed).sample(range(len(refs)), run.pool))
        refs = [refs[i] for i in drawn]
    train, train_report = make_items(
        refs, budget, tok, max_new, max_len, memory, exclude_own=True, limit=run.limit
    )
    # Only fixed seeded subsets of val are ever decoded: build just those.
    val_refs = _refs(val_eps)
    pick = random.Random(cfg.seed)
    subsets = [
        pick.sample(val_refs, min(n, len(val_refs))) for n in (cfg.eval_contexts, cfg.tau_contexts)
    ]
    (val, val_report), (tau, _) = [
        make_items(refs, budget, tok, max_new, max_len, memory) for refs in subsets
    ]
    if not train or not val or not tau:
        raise ValueError(f"no transitions to train on ({len(train)}) or validate with ({len(val)})")
    schemas, _ = output_schemas(train_eps, [*train_eps, *val_eps])
    print(
        f"grpo: {len(train)} train / {len(val)} val transitions from {start.directory}; left "
        f"out (train): {train_report.over_budget} over the prompt budget, "
        f"{train_report.long_target} with targets longer than the model writes"
    )
    extra = {
        "data": list(run.data) or ["bundled:train"],
        "val_data": list(run.val_data) or ["bundled:val"],
        "envs": list(run.envs),
        "exclude_apis": list(run.exclude_apis),
        "pool": run.pool,
        "limit": run.limit,
        "examples": {"train": train_report.as_dict(), "val": val_report.as_dict()},
    }
    data = GRPOData(train, val, tau, schemas)
    return train_grpo(cfg, start, data, run.out, encoder, run.resume, extra)


__all__ = ["GRPORun", "Loaded", "load_start", "make_items", "run_grpo"]
