"""`simworld eval`: a world model (a checkpoint, the shipped default, or a prompted LLM) and
three baselines on the same held-out transitions, scored by every metric, broken down by
env, tool, step index and outcome, replayed closed-loop, and written as a report.

A tiny run (seconds), as its test does:

    from simworld.eval.run import EvalConfig, evaluate
    report = evaluate(EvalConfig(out="out/eval", model="out/tiny", envs=("frozenlake",),
                                 limit=3, baselines=("copy-last",), embeddings=False))

The prompted-LLM baseline is slow on a CPU (seconds per observation), so it runs on a fixed,
seeded sample of `llm_sample` steps; the report states the sample's size and compares the
model with it on exactly those steps. Everything else runs on every step.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from simworld.data.bundle import load_bundled
from simworld.data.formats import read_episodes
from simworld.data.output_schemas import checked_output_schemas
from simworld.data.records import Episode
from simworld.eval.baselines import BASELINES, PromptedLLM, make_baselines, prompted_llm
from simworld.eval.breakdown import KEYS, Scored, by_group, summarize
from simworld.eval.closed_loop import compounding, divergence_curve, replay
from simworld.eval.embedding import Encoder, load_encoder
from simworld.eval.predictors import ModelPredictor, Predictor, StepRef
from simworld.eval.report import write_report
from simworld.eval.scoring import HEADLINE, METRICS, score
from simworld.worldmodel.world_model import load_world_model


@dataclass(frozen=True)
class EvalConfig:
    """One `simworld eval` run."""

    out: str | Path
    model: str = "default"  # a checkpoint directory, "default", "smollm2", or "URL#MODEL"
    data: tuple[str, ...] = ()  # dump files (any supported format); empty: a bundled split
    split: str = "test"
    train: tuple[str, ...] = ()  # what nearest-neighbour retrieves from; empty: bundled train
    envs: tuple[str, ...] = ()  # keep only these envs; empty: all
    apis: tuple[str, ...] = ()  # keep only scenarios involving one of these APIs
    baselines: tuple[str, ...] = BASELINES
    llm: str = "smollm2"  # the prompted-LLM baseline: "smollm2" or "URL#MODEL"
    llm_sample: int = 40
    closed_loop: bool = True
    embeddings: bool = True
    tau: float = 0.9  # cosine threshold of the binarized embedding metric
    limit: int | None = None  # first N episodes only
    batch_size: int = 32
    dtype: str | None = None  # a checkpoint's weights: "float32", "bfloat16", "auto"; None: f32
    seed: int = 0
    bootstrap: int = 1000
    progress: bool = True

    def __post_init__(self) -> None:
        unknown = sorted(set(self.baselines) - set(BASELINES))
        if unknown:
            raise ValueError(f"unknown baseline(s) {unknown}: choose from {list(BASELINES)}")
        if not 0 < self.tau <= 1:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        if self.llm_sample < 1:
            raise ValueError(f"llm_sample must be >= 1, got {self.llm_sample}")


def load_episodes(cfg: EvalConfig) -> list[Episode]:
    """The evaluated episodes: dump files (a bad record fails with its file and line) or a
    bundled split, filtered by env and API, cut to `limit`."""
    if cfg.data:
        episodes = [ep for f in cfg.data for ep in read_episodes(f, strict=True).episodes]
    else:
        episodes = load_bundled(cfg.split)
    if cfg.envs:
        episodes = [ep for ep in episodes if ep.env in cfg.envs]
    if cfg.apis:
        episodes = [ep for ep in episodes if set(cfg.apis) & set(ep.task.apis)]
    episodes = episodes[: cfg.limit] if cfg.limit is not None else episodes
    if not any(ep.steps for ep in episodes):
        raise ValueError("no steps to evaluate: check --data/--split, --env and --api")
    return episodes


def load_predictor(spec: str, dtype: str | None = None) -> Predictor:
    """The evaluated model: "default", a checkpoint directory, "smollm2" (SmolLM2-135M-Instruct
    prompted), or an OpenAI-compatible endpoint as "URL#MODEL". `dtype` casts a checkpoint's
    weights (the transformers engine's `dtype`)."""
    if spec == "smollm2" or spec.startswith(("http://", "https://")):
        if dtype is not None:
            raise ValueError(f"dtype applies to checkpoints, not to {spec!r}")
        return prompted_llm(spec)
    return ModelPredictor(load_world_model(spec, dtype=dtype))


def output_schemas(
    train: Sequence[Episode], evaluated: Sequence[Episode]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """env → tool → output schema, from the train episodes (never the evaluated ones: that
    would use the answers): declared schemas that the recorded results follow, else
    inferred ones. Also env → the declared schemas replaced, which the report lists."""
    schemas: dict[str, Any] = {}
    replaced: dict[str, list[str]] = {}
    for env in sorted({ep.env for ep in evaluated}):
        schemas[env], replaced[env] = checked_output_schemas(ep for ep in train if ep.env == env)
    return schemas, {env: names for env, names in replaced.items() if names}


def evaluate(cfg: EvalConfig) -> dict[str, Any]:
    """Run the evaluation and write report.json, report.md and the plots to `cfg.out`."""
    started = time.monotonic()
    episodes = load_episodes(cfg)
    refs: list[StepRef] = [(ep, i) for ep in episodes for i in range(len(ep.steps))]
    train = _train_episodes(cfg)
    schemas, replaced = output_schemas(train, episodes)
    encoder: Encoder | None = load_encoder() if cfg.embeddings else None
    model = load_predictor(cfg.model, cfg.dtype)
    timing: dict[str, float] = {}

    def run(predictor: Predictor, subset: Sequence[StepRef]) -> list[Scored]:
        t0 = time.monotonic()
        with tqdm(total=len(subset), desc=predictor.name, disable=not cfg.progress) as bar:
            predictions = _predict(predictor, subset, cfg.batch_size, bar.update)
        timing[predictor.name] = round(time.monotonic() - t0, 1)
        return score(subset, predictions, schemas=schemas, encoder=encoder, tau=cfg.tau)

    rows = {"model": run(model, refs)}
    sample_idx = sorted(
        random.Random(cfg.seed).sample(range(len(refs)), min(cfg.llm_sample, len(refs)))
    )
    llm_rows: list[Scored] = []
    for baseline in make_baselines(cfg.baselines, train, cfg.llm):
        if isinstance(baseline, PromptedLLM):
            llm_rows = run(baseline, [refs[i] for i in sample_idx])
        else:
            rows[baseline.name] = run(baseline, refs)
    report: dict[str, Any] = {
        "model": cfg.model,
        "dtype": cfg.dtype or "float32",
        # Where the report is written is not part of it (the same run reproduces it anywhere).
        "config": {
            k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items() if k != "out"
        },
        "data": _data_summary(episodes, refs),
        "schemas_replaced": replaced,
        "metrics": list(METRICS),
        "headline": HEADLINE,
        "results": {name: _summaries(r, cfg) for name, r in rows.items()},
        "results_by_env": {name: _by_env(r, cfg) for name, r in rows.items()},
        "breakdowns": _breakdowns(rows["model"], cfg),
    }
    if llm_rows:
        report["llm_sample"] = {
            "size": len(llm_rows),
            "llm": cfg.llm,
            "results": {
                "model": _summaries([rows["model"][i] for i in sample_idx], cfg),
                "prompted-llm": _summaries(llm_rows, cfg),
            },
        }
    if cfg.closed_loop and isinstance(model, ModelPredictor):
        report["closed_loop"] = _closed_loop(model, episodes, rows["model"], schemas, encoder, cfg)
    timing["total"] = round(time.monotonic() - started, 1)
    report["seconds"] = timing
    write_report(report, Path(cfg.out))
    return report


def _train_episodes(cfg: EvalConfig) -> list[Episode]:
    if cfg.train:
        return [ep for f in cfg.train for ep in read_episodes(f, strict=True).episodes]
    return load_bundled("train")


def _predict(predictor: Predictor, refs: Sequence[StepRef], batch: int, update: Any) -> list[Any]:
    out = []
    for k in range(0, len(refs), batch):
        out.extend(predictor.predict_steps(refs[k : k + batch]))
        update(len(refs[k : k + batch]))
    return out


def _summaries(rows: Sequence[Scored], cfg: EvalConfig) -> dict[str, Any]:
    return {
        name: summarize(
            [r.metrics.get(name) for r in rows], samples=cfg.bootstrap, seed=cfg.seed
        ).to_json()
        for name in METRICS
        if any(r.metrics.get(name) is not None for r in rows)
    }


def _by_env(rows: Sequence[Scored], cfg: EvalConfig) -> dict[str, Any]:
    groups = by_group(rows, "env", HEADLINE, samples=cfg.bootstrap, seed=cfg.seed)
    return {env: summary.to_json() for env, summary in groups.items()}


def _breakdowns(rows: Sequence[Scored], cfg: EvalConfig) -> dict[str, Any]:
    metrics = [
        m
        for m in (HEADLINE, "cosine", "state_match")
        if any(r.metrics.get(m) is not None for r in rows)
    ]
    return {
        grouping: {
            metric: {
                k: s.to_json()
                for k, s in by_group(
                    rows, grouping, metric, samples=cfg.bootstrap, seed=cfg.seed
                ).items()
            }
            for metric in metrics
        }
        for grouping in KEYS
    }


def _data_summary(episodes: Sequence[Episode], refs: Sequence[StepRef]) -> dict[str, Any]:
    per_env: dict[str, dict[str, int]] = {}
    for ep in episodes:
        entry = per_env.setdefault(ep.env, {"episodes": 0, "steps": 0})
        entry["episodes"] += 1
        entry["steps"] += len(ep.steps)
    return {"episodes": len(episodes), "steps": len(refs), "per_env": per_env}


def _closed_loop(
    model: ModelPredictor,
    episodes: Sequence[Episode],
    one_step: Sequence[Scored],
    schemas: Any,
    encoder: Encoder | None,
    cfg: EvalConfig,
) -> dict[str, Any]:
    """Replay every episode's actions through the model on its own predictions; compare
    per step index with the one-step (teacher-forced) scores of the same steps."""
    total = sum(len(ep.steps) for ep in episodes)
    with tqdm(total=total, desc="closed loop", disable=not cfg.progress) as bar:
        rollouts = replay(model.model, episodes, batch_size=cfg.batch_size, progress=bar.update)
    one_iter = iter(one_step)
    one, closed, one_state, closed_state = [], [], [], []
    for rollout in rollouts:
        ep = rollout.episode
        refs = [(ep, i) for i in range(len(ep.steps))]
        rows = score(
            refs,
            rollout.predictions,
            schemas=schemas,
            encoder=None,
            tau=cfg.tau,
            states=rollout.states,
        )
        firsts = [next(one_iter) for _ in refs]
        one.append([float(r.metrics[HEADLINE] or 0.0) for r in firsts])
        closed.append([float(r.metrics[HEADLINE] or 0.0) for r in rows])
        one_state.append([r.metrics.get("state_match") for r in firsts])
        closed_state.append([r.metrics.get("state_match") for r in rows])
    curve = divergence_curve(rollouts, one, closed, one_state, closed_state)
    return {
        "metric": HEADLINE,
        "curve": [asdict(point) for point in curve],
        "summary": compounding(curve),
        "patch_failures": sum(r.patch_failures for r in rollouts),
    }


__all__ = ["BASELINES", "EvalConfig", "evaluate", "load_episodes", "load_predictor"]
