"""The `simworld train mdlm` recipe: episodes → the one serialization → (prompt, target)
pairs → `train_mdlm` → an MDLM checkpoint that `load_world_model` serves.

A tiny CPU run (seconds), as its test does:

    from simworld.training.mdlm_run import MDLMRun, run_mdlm
    metrics = run_mdlm(MDLMRun(preset="tiny", out="out/mdlm-tiny", envs=("frozenlake",),
                               limit=40))

The data path is SFT's (`sft_run.build_pairs`, same `RECIPES`: prompt budget, env caps,
example block) with MDLM's own longest target (`MDLM_TARGET_TOKENS`: 112 in `default`, where
the AR preset now learns up to 192), so an MDLM learns the AR pairs whose targets fit its
bound, and with the plain state view (`MDLM_STATE_FOCUS`). The target bound L is that
longest target + 1 (its <eos>). The tokenizer is trained the same way (byte-level BPE of
the preset's size), or taken from an AR checkpoint (`tokenizer`, e.g. "default") so that
both models see identical tokens. `init` starts from an AR checkpoint instead of a fresh
model (`worldmodel/mdlm_adapt.py`: its weights and tokenizer, the AR alignment switched
on) and takes its prompts: prompt and example budgets, example count, state view, the
result keys its targets leave out (`--drop-result-field`) and how its train steps'
examples were chosen. `tokens` is a budget of real training tokens: the schedule ends
there (as `simworld train sft --tokens`), which is how the comparison matches training
tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from simworld.training.mdlm import MDLMTrainConfig, train_mdlm
from simworld.training.sft_run import RECIPES, build_pairs, prompt_args, with_prompt_args
from simworld.worldmodel.checkpoint import read_meta
from simworld.worldmodel.mdlm import MDLM
from simworld.worldmodel.mdlm_adapt import mdlm_config_from_ar, mdlm_from_ar
from simworld.worldmodel.render import SERIALIZATION_VERSION
from simworld.worldmodel.tokenizer import load_tokenizer
from simworld.worldmodel.world_model import default_checkpoint

# MDLM denoises its whole target span at every step, so it keeps the 112-token bound its
# figures were measured with; the AR default preset learns targets of up to 192 tokens
MDLM_TARGET_TOKENS = {"tiny": 48, "default": 112}
# From scratch MDLM also keeps the plain state view its figures were measured with; adapted
# from an AR checkpoint (`init`) it renders states as that checkpoint was trained to
MDLM_STATE_FOCUS = False


@dataclass(frozen=True)
class MDLMRun:
    """One `simworld train mdlm` invocation."""

    out: str | Path
    preset: str = "default"
    data: tuple[str, ...] = ()  # dump files; empty: the bundled train split
    val_data: tuple[str, ...] = ()  # dump files; empty: the bundled val split
    envs: tuple[str, ...] = ()
    exclude_apis: tuple[str, ...] = ()
    minutes: float | None = None  # time budget; the run stops (saving) after it
    tokens: int | None = None  # token budget: the schedule ends after this many real tokens
    threads: int | None = None  # torch CPU threads (None: the preset's)
    elbo: bool = True  # False: the mean CE over masked positions (see MDLMTrainConfig)
    copies: int | None = None  # noised target copies per encoded prefix (None: the preset's)
    seed: int = 0
    limit: int | None = None  # first N training examples only (smoke runs)
    steps: int | None = None  # K for val exact match and the checkpoint's default K
    tokenizer: str | None = None  # a checkpoint directory (or "default") to take it from
    init: str | None = None  # an AR checkpoint (or "default") to adapt: its weights, tokenizer
    lr: float | None = None  # peak learning rate (None: the preset's)

    def __post_init__(self) -> None:
        if self.preset not in RECIPES:
            raise ValueError(f"unknown preset {self.preset!r}: choose one of {sorted(RECIPES)}")
        if self.tokens is not None and self.tokens < 1:
            raise ValueError(f"tokens must be at least 1, got {self.tokens}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.init is not None and self.tokenizer is not None:
            raise ValueError("init takes the AR checkpoint's tokenizer: leave tokenizer out")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


def run_mdlm(run: MDLMRun) -> dict[str, Any]:
    """Build the pairs, train, write the checkpoint to `run.out`; return its metrics."""
    recipe = replace(
        RECIPES[run.preset],
        max_target_tokens=MDLM_TARGET_TOKENS[run.preset],
        state_focus=MDLM_STATE_FOCUS,
    )
    if run.init is not None:
        recipe = with_prompt_args(recipe, read_meta(_checkpoint(run.init)).training_args)
    cfg = MDLMTrainConfig.preset(run.preset)
    tokenizer: PreTrainedTokenizerBase | int = cfg.vocab_size
    source = run.tokenizer or run.init
    if source is not None:
        tokenizer = load_tokenizer(_checkpoint(source))
    pairs = build_pairs(run, recipe, tokenizer)
    L = recipe.max_target_tokens + 1  # the target and its <eos>
    span = recipe.budget_tokens + recipe.example_tokens + L + 8
    start: MDLM | None = None
    if run.init is not None:
        ar_cfg, _ = mdlm_config_from_ar(_checkpoint(run.init))
        room = max(ar_cfg.max_positions, span)
        start, _ = mdlm_from_ar(_checkpoint(run.init), target_len=L, max_positions=room)
        model = start.cfg
    else:
        model = replace(cfg.model, target_len=L, max_positions=max(cfg.model.max_positions, span))
    cfg = replace(
        cfg,
        model=model,
        batch_tokens=max(cfg.batch_tokens, model.max_positions),
        max_tokens=run.tokens,
        threads=run.threads or cfg.threads,
        elbo_weighting=run.elbo,
        target_copies=run.copies or cfg.target_copies,
        time_budget_min=run.minutes,
        seed=run.seed,
        sample_steps=run.steps or cfg.sample_steps,
        lr=run.lr or cfg.lr,
        serialization_version=str(SERIALIZATION_VERSION),
    )
    report = pairs.train_report
    print(
        f"mdlm: {len(pairs.train)} train / {len(pairs.val)} val examples; left out (train): "
        f"{report.over_budget} over the {recipe.budget_tokens}-token prompt budget, "
        f"{report.long_target} with targets over {recipe.max_target_tokens} tokens"
    )
    extra = {
        **prompt_args(recipe),
        "budget_count": "tokenizer",
        "max_new_tokens": L,
        "tokenizer_from": run.tokenizer or run.init,
        "init_from": run.init,
        "data": list(run.data) or ["bundled:train"],
        "val_data": list(run.val_data) or ["bundled:val"],
        "exclude_apis": list(run.exclude_apis),
        "envs": list(run.envs),
        "examples": {"train": report.as_dict(), "val": pairs.val_report.as_dict()},
    }
    return train_mdlm(cfg, pairs.train, pairs.val, run.out, extra, pairs.tokenizer, start)


def _checkpoint(name: str) -> Path:
    """A checkpoint directory, or the shipped default for "default"."""
    return default_checkpoint() if name == "default" else Path(name)


__all__ = ["MDLMRun", "run_mdlm"]
