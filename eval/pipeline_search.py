"""`simworld bench pipeline`: a random pipeline search on a big table, run all-real and then
cost-routed (cheap operations real, train_cv predicted by a world model) in one process;
and the world model's transition accuracy on a recorded datascience dump.

    simworld bench pipeline --model out/ds/wm --table make_classification-50000x20-s0 \\
        --pipelines 40 --seed 0 --test out/ds/test.jsonl.gz --json out/ds/bench.json

    from simworld.eval.pipeline_search import SearchConfig, pipeline_search
    report = pipeline_search(SearchConfig(table="iris", pipelines=4), model)

The search: `pipelines` random pipelines, drawn with `seed` before anything is timed:
impute (a random strategy), encode the categoricals (onehot or ordinal) or drop them, up to
two of scale / select_features / filter_rows, then one train_cv with a random model of the
table's task and random hyper-parameters (redrawn while its estimated cost exceeds
`max_seconds`). Each pipeline is one session of the datascience env, reset to the table:
- all-real: a router with every tool routed to the real backend;
- routed: a router with `max_real_cost = threshold` seconds, so every call estimated
  cheaper runs for real and the rest (train_cv on the big table) goes to the world model,
  whose predictions are really made and timed (no cache: `use_cache=False` in both runs).
Each run gets a fresh real backend (no frames kept from the other run). Reported: the
wall-clock of each run and the speedup, the absolute error of each routed cv_mean against
the real one, the Spearman rank correlation of the pipelines' scores (pipelines with a
real score and a readable routed one), the same two over the pipelines whose train_cv the
model answered (`model_*`: a cheap train_cv runs for real in both runs and agrees
exactly), whether both runs pick the same best pipeline, and the regret: the best real
score minus the real score of the routed pick.

With `--samples K` the model's floats (cv_mean, cv_std, ...) are the mean of K sampled
predictions instead of greedy's digits (`simworld.worldmodel.sample_mean.SampleMean`), in
both the search and the transition accuracy; the K rows are decoded in one batched call,
and their time counts in the routed run. `--ensemble DIR...` adds other trainings of the
model's recipe: each decodes the same K samples and they all join the mean (with
`--samples 0`, the greedy predictions of every model are averaged).

Training overlap (`--train DUMP...`, the model's training dumps): how many of the
model-answered pipelines were recorded in training exactly (same table, pipeline and
train_cv arguments, a successful result) or with the same train_cv call after another
pipeline, and the error and Spearman over those never seen exactly (`training_overlap`);
and a baseline without a model over the same pipelines, the mean recorded cv_mean of the
same table and model kind (`lookup_baseline`), to say whether the model beats a lookup.

Transition accuracy (`--test`): every step of the dump predicted from its recorded context,
within the model's budget (steps that do not fit are counted, not scored): the error flag
accuracy; on train_cv results, the absolute error of cv_mean and cv_std; on operations that
changed the table, the exact match of the result and the profile-field accuracy, the share
of the real next state's profile leaves (shape, every column statistic, sample cells) that
the predicted patch, applied to the state, reproduces exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simworld.data.canonical import parse
from simworld.data.datascience_costs import estimate
from simworld.data.datascience_tables import build_table, source_for
from simworld.data.envs.datascience import apply_call, initial_state, model_call, tidy_call
from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Episode,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.simulators.envs.datascience import DataScienceReal, datascience_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session
from simworld.worldmodel.context import build_context
from simworld.worldmodel.patch import PatchError, apply
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import WorldModel

Handler = Callable[[argparse.Namespace], int]
Call = tuple[str, dict[str, JSON]]


@dataclass(frozen=True)
class SearchConfig:
    """One pipeline search (see the module docstring)."""

    table: str = "make_classification-50000x20-s0"
    pipelines: int = 40
    seed: int = 0
    threshold: float = 1.0  # seconds: calls estimated at most this run for real when routed
    max_seconds: float = 30.0  # a drawn train_cv estimated dearer is drawn again

    def __post_init__(self) -> None:
        source_for(self.table)  # SourceError names a bad table
        if self.pipelines < 2:
            raise ValueError(f"pipelines must be >= 2 (a ranking needs two), got {self.pipelines}")
        if self.threshold <= 0 or self.max_seconds <= 0:
            raise ValueError("threshold and max_seconds must be positive seconds")


def draw_pipelines(cfg: SearchConfig) -> list[list[Call]]:
    """The search's pipelines, from `cfg.seed` alone (the table is built to draw valid
    arguments: columns, thresholds)."""
    source = source_for(cfg.table)
    base = build_table(source)
    pipelines = []
    for index in range(cfg.pipelines):
        rng = random.Random(derive_seed("pipeline-search", cfg.seed, index))
        state = initial_state(source, base)
        frame, calls = base, list[Call]()
        prep: list[Call] = [("impute", {"strategy": rng.choice(("mean", "median"))})]
        if rng.random() < 0.8:
            prep.append(("encode", {"method": rng.choice(("onehot", "ordinal"))}))
        else:
            prep.append(("drop_columns", {"columns": ["band", "site"]}))
        for name, args in prep:
            frame, state = _kept(frame, state, name, args, calls)
        for _ in range(rng.randint(0, 2)):
            frame, state = _kept(frame, state, *tidy_call(rng, frame), calls)
        while True:
            call = model_call(rng, source)
            if estimate(state["profile"], "train_cv", call) <= cfg.max_seconds:
                break
        calls.append(("train_cv", call))
        pipelines.append(calls)
    return pipelines


def _kept(
    frame: Any, state: dict[str, JSON], name: str, args: dict[str, JSON], calls: list[Call]
) -> Any:
    """Apply one table call; keep it in `calls` only when it applies, so that the calls
    before a pipeline's train_cv are exactly the pipeline its state records."""
    applied = apply_call(frame, state, name, args)
    if applied.is_error:
        return frame, state
    calls.append((name, args))
    return applied.frame, applied.state


def run_search(
    cfg: SearchConfig, pipelines: Sequence[Sequence[Call]], model: WorldModel | None
) -> dict[str, Any]:
    """Run every pipeline once (all-real when `model` is None, else routed); the
    wall-clock, each pipeline's train_cv result and who answered each call."""
    whole = datascience_env()
    task = whole.task_for(cfg.table)
    # One task (the router lists every task's tools: the others' tables need not be built).
    env = dataclasses.replace(whole, tasks={task.id: task}, real=DataScienceReal())
    if model is None:
        config = RouterConfig(real_tools=frozenset(t.name for t in task.tools), use_cache=False)
    else:
        config = RouterConfig(max_real_cost=cfg.threshold, use_cache=False, output_retries=0)
    router = Router(env, model, config)
    results: list[JSON] = []
    answered: list[str] = []  # who answered each pipeline's train_cv
    sources: dict[str, int] = {}
    model_seconds = 0.0
    start = time.perf_counter()
    for index, calls in enumerate(pipelines):
        session = Session(env, router, episode_id=f"pipeline-{index}")
        session.reset(cfg.table, seed=index)
        for step, (name, args) in enumerate(calls):
            action = ToolCallsAction([ToolCall(f"call_{step}_0", name, args, json.dumps(args))])
            began = time.perf_counter()
            outcome = session.step(action)
            source = str(outcome.info.get("source"))
            sources[source] = sources.get(source, 0) + 1
            if source == "model":
                model_seconds += time.perf_counter() - began
        assert isinstance(outcome.observation, ToolResultsObservation)
        (result,) = outcome.observation.results
        ok, value = parse(result.text)
        results.append(value if ok and not result.is_error else None)
        answered.append(source)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "model_seconds": model_seconds, "sources": sources,
            "results": results, "answered": answered}  # fmt: skip


def pipeline_search(cfg: SearchConfig, model: WorldModel) -> dict[str, Any]:
    """Draw the pipelines, run them all-real and routed, and compare (module docstring)."""
    pipelines = draw_pipelines(cfg)
    real = run_search(cfg, pipelines, None)
    routed = run_search(cfg, pipelines, model)
    real_scores = [_score(r) for r in real["results"]]
    predicted = [_score(r) for r in routed["results"]]
    both = [
        (r, p)
        for r, p in zip(real_scores, predicted, strict=True)
        if r is not None and p is not None
    ]
    errors = [abs(r - p) for r, p in both]
    # the same figures over the pipelines whose train_cv the model answered
    modelled = [
        (r, p)
        for r, p, by in zip(real_scores, predicted, routed["answered"], strict=True)
        if r is not None and p is not None and by == "model"
    ]
    model_errors = [abs(r - p) for r, p in modelled]
    best_real = _argmax(real_scores)
    best_routed = _argmax(predicted)
    top = real_scores[best_real] if best_real is not None else None
    picked = real_scores[best_routed] if best_routed is not None else None
    regret = None if picked is None or top is None else top - picked
    return {
        "table": cfg.table,
        "pipelines": cfg.pipelines,
        "seed": cfg.seed,
        "threshold_s": cfg.threshold,
        "real_seconds": round(real["seconds"], 2),
        "routed_seconds": round(routed["seconds"], 2),
        "speedup": round(real["seconds"] / routed["seconds"], 2),
        "routed_model_seconds": round(routed["model_seconds"], 2),
        "routed_sources": routed["sources"],
        "scored": len(both),
        "real_errors": sum(r is None for r in real_scores),
        "unreadable_predictions": sum(p is None for p in predicted),
        "cv_mean_mae": _round(sum(errors) / len(errors)) if errors else None,
        "cv_mean_max_error": _round(max(errors)) if errors else None,
        "spearman": _round(spearman([r for r, _ in both], [p for _, p in both])),
        "model_answered": len(modelled),
        "model_cv_mean_mae": _round(sum(model_errors) / len(model_errors)) if modelled else None,
        "model_spearman": _round(spearman([r for r, _ in modelled], [p for _, p in modelled])),
        "same_best": best_real is not None and best_real == best_routed,
        "best_real": top,
        "regret": _round(regret),
        "per_pipeline": [
            {"calls": [[n, a] for n, a in calls], "real": r, "predicted": p, "by": by}
            for calls, r, p, by in zip(
                pipelines, real_scores, predicted, routed["answered"], strict=True
            )
        ],
    }  # fmt: skip


def training_overlap(report: dict[str, Any], training: Sequence[Episode]) -> dict[str, Any]:
    """Which of the pipelines the model answered were in its training data: `seen_exact`,
    a successful train_cv step with the same table, pipeline and train_cv arguments (the
    model may have learnt that answer); `seen_call`, the same table and train_cv arguments
    after any pipeline. The error and Spearman over the model-answered pipelines not seen
    exactly say how the model does on what it never saw."""
    exact: set[tuple[str, str, str]] = set()
    steps = 0
    for state, call, _ in _successful_train_cv(training):
        exact.add(_key(state.get("source"), state.get("pipeline"), call.arguments))
        steps += 1
    by_call = {(source, args) for source, _, args in exact}
    source = source_for(report["table"])
    rows = []
    for entry in report["per_pipeline"]:
        if entry["by"] != "model":
            continue
        *table_ops, (_, train_args) = entry["calls"]
        key = _key(source, [{"op": n, "args": a} for n, a in table_ops], train_args)
        rows.append((key in exact, (key[0], key[2]) in by_call, entry["real"], entry["predicted"]))
    unseen = [(r, p) for seen, _, r, p in rows if not seen and r is not None and p is not None]
    errors = [abs(r - p) for r, p in unseen]
    return {
        "training_train_cv_steps": steps,
        "model_answered": len(rows),
        "seen_exact": sum(seen for seen, _, _, _ in rows),
        "seen_call": sum(call for _, call, _, _ in rows),
        "unseen_scored": len(unseen),
        "unseen_cv_mean_mae": _round(sum(errors) / len(errors)) if errors else None,
        "unseen_spearman": _round(spearman([r for r, _ in unseen], [p for _, p in unseen])),
    }


def lookup_baseline(report: dict[str, Any], training: Sequence[Episode]) -> dict[str, Any]:
    """A baseline without a model, for the pipelines the model answered: the mean cv_mean
    of the successful train_cv steps recorded in `training` on the same table with the same
    model kind (`by_kind`), else of every one on the same table (`by_table`); a table never
    recorded is `unknown` and not scored. Its error and Spearman against the real scores
    come with the model's over the same pipelines, so the two compare like for like."""
    kinds: dict[tuple[str, str], list[float]] = {}
    tables: dict[str, list[float]] = {}
    for state, call, result in _successful_train_cv(training):
        score = _score(result.structured)
        if score is None:
            continue
        table = json.dumps(state.get("source"), sort_keys=True)
        kinds.setdefault((table, str((call.arguments or {}).get("model"))), []).append(score)
        tables.setdefault(table, []).append(score)
    table = json.dumps(source_for(report["table"]), sort_keys=True)
    rows, found = [], {"by_kind": 0, "by_table": 0, "unknown": 0}
    for entry in report["per_pipeline"]:
        if entry["by"] != "model":
            continue
        kind = str(entry["calls"][-1][1].get("model"))
        recorded = kinds.get((table, kind)) or tables.get(table)
        found["by_kind" if (table, kind) in kinds else "by_table" if recorded else "unknown"] += 1
        if recorded and entry["real"] is not None and entry["predicted"] is not None:
            rows.append((entry["real"], sum(recorded) / len(recorded), entry["predicted"]))
    real = [r for r, _, _ in rows]
    return {
        "model_answered": sum(found.values()),
        **found,
        "scored": len(rows),
        "cv_mean_mae": _round(sum(abs(r - b) for r, b, _ in rows) / len(rows)) if rows else None,
        "spearman": _round(spearman(real, [b for _, b, _ in rows])),
        "model_cv_mean_mae": (
            _round(sum(abs(r - m) for r, _, m in rows) / len(rows)) if rows else None
        ),
        "model_spearman": _round(spearman(real, [m for _, _, m in rows])),
    }


def _successful_train_cv(
    training: Sequence[Episode],
) -> Iterator[tuple[dict[str, JSON], ToolCall, ToolResult]]:
    """Every recorded train_cv step of `training` that succeeded: its state (the table's
    source and pipeline), its call and its result."""
    for episode in training:
        for step in episode.steps:
            call = step.action.calls[0] if isinstance(step.action, ToolCallsAction) else None
            result = step.observation
            if call is None or call.name != "train_cv" or not isinstance(step.state, dict):
                continue
            if not isinstance(result, ToolResultsObservation) or result.results[0].is_error:
                continue
            yield step.state, call, result.results[0]


def _key(source: JSON, pipeline: JSON, args: JSON) -> tuple[str, str, str]:
    def text(part: JSON) -> str:
        return json.dumps(part, sort_keys=True)

    return text(source), text(pipeline), text(args)


def _score(result: JSON) -> float | None:
    if isinstance(result, dict) and isinstance(result.get("cv_mean"), int | float):
        return float(result["cv_mean"])
    return None


def _argmax(scores: Sequence[float | None]) -> int | None:
    known = [(s, -i) for i, s in enumerate(scores) if s is not None]
    return -max(known)[1] if known else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None with fewer than 3 pairs
    or a constant side."""
    if len(a) != len(b):
        raise ValueError(f"spearman needs pairs, got {len(a)} and {len(b)} values")
    if len(a) < 3:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return float(cov / (va * vb) ** 0.5)


def _ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


# ---------------------------------------------------------------------------- transitions


def transition_accuracy(
    model: WorldModel, episodes: Sequence[Episode], limit: int | None = None, batch: int = 8
) -> dict[str, Any]:
    """How well `model` predicts the recorded steps (see the module docstring)."""
    items, over = [], 0
    for episode in episodes:
        for index in range(len(episode.steps)):
            try:
                items.append((episode.steps[index], build_context(episode, index, model.budget)))
            except BudgetError:
                over += 1
    items = items[:limit] if limit is not None else items
    flags: list[bool] = []
    cv_mean: list[float | None] = []
    cv_std: list[float | None] = []
    exact: list[bool] = []
    fields: list[float] = []
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        predictions = model.predict([ctx for _, ctx in chunk])
        for (step, _), prediction in zip(chunk, predictions, strict=True):
            real = step.observation
            assert isinstance(real, ToolResultsObservation) and isinstance(
                step.action, ToolCallsAction
            )
            (truth,) = real.results
            guess = prediction.observation
            got = (
                guess.results[0]
                if isinstance(guess, ToolResultsObservation) and guess.results
                else None
            )
            flags.append(got is not None and got.is_error == truth.is_error)
            if truth.is_error:
                continue
            want, have = truth.structured, (parse(got.text)[1] if got is not None else None)
            if step.action.calls[0].name == "train_cv":
                for key, out in (("cv_mean", cv_mean), ("cv_std", cv_std)):
                    value = have.get(key) if isinstance(have, dict) else None
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        out.append(abs(float(value) - float(want[key])))
                    else:
                        out.append(None)
            elif step.next_state != step.state:
                exact.append(have == want)
                fields.append(_profile_accuracy(step.state, prediction.patch, step.next_state))
    return {
        "steps": len(items),
        "over_budget": over,
        "error_flag_accuracy": _mean(flags),
        "train_cv": {"steps": len(cv_mean), **_errors("cv_mean", cv_mean),
                     **_errors("cv_std", cv_std)},
        "table_ops": {"steps": len(exact), "result_exact": _mean(exact),
                      "profile_field_accuracy": _mean(fields)},
    }  # fmt: skip


def _errors(name: str, values: list[float | None]) -> dict[str, Any]:
    known = [v for v in values if v is not None]
    return {
        f"{name}_mae": _round(sum(known) / len(known)) if known else None,
        f"{name}_unreadable": len(values) - len(known),
    }


def _mean(values: Sequence[bool | float]) -> float | None:
    return round(sum(float(v) for v in values) / len(values), 4) if values else None


def _profile_accuracy(state: JSON, patch: list[JSON] | None, after: JSON) -> float:
    """The share of `after`'s profile leaves that `patch` applied to `state` reproduces."""
    want = _leaves(after.get("profile"))
    try:
        predicted = apply(state, patch) if patch is not None else None
    except PatchError:
        predicted = None
    have = _leaves(predicted.get("profile")) if isinstance(predicted, dict) else {}
    if not want:
        return 1.0
    same = sum(have.get(path, _MISSING) == value for path, value in want.items())
    return float(same / len(want))


_MISSING = object()


def _leaves(value: JSON, path: str = "") -> dict[str, JSON]:
    if isinstance(value, dict):
        return {
            k: v for key, item in value.items() for k, v in _leaves(item, f"{path}/{key}").items()
        }
    if isinstance(value, list):
        return {
            k: v for i, item in enumerate(value) for k, v in _leaves(item, f"{path}/{i}").items()
        }
    return {path: json.dumps(value)}


# ---------------------------------------------------------------------------- command


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """`simworld bench pipeline`'s arguments; returns its handler."""
    if command != "bench pipeline":
        raise ValueError(f"unknown command {command!r}")
    defaults = SearchConfig()
    parser.add_argument("--model", required=True, help="a world model checkpoint directory")
    parser.add_argument("--table", default=defaults.table, help="the table to search on")
    parser.add_argument("--pipelines", type=int, default=defaults.pipelines)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold,
        help="seconds: a call estimated at most this runs for real when routed",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=defaults.max_seconds,
        help="redraw a train_cv estimated dearer than this",
    )
    parser.add_argument("--test", type=Path, help="a recorded dump: also measure transitions")
    parser.add_argument("--limit", type=int, help="at most this many test steps")
    parser.add_argument(
        "--train",
        type=Path,
        nargs="+",
        default=[],
        metavar="DUMP",
        help="the model's training dumps: count the predicted pipelines seen in training "
        "and score a lookup baseline",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=0,
        help="answer each float (cv_mean, ...) with the mean of this many sampled "
        "predictions (simworld.worldmodel.sample_mean); 0: greedy alone",
    )
    parser.add_argument(
        "--ensemble",
        nargs="+",
        default=[],
        metavar="DIR",
        help="other trainings of the model's recipe: their predictions join the mean "
        "(--samples K each, or their greedy ones with --samples 0)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: robust on a shared CPU)"
    )
    parser.add_argument("--json", type=Path, help="write the report here too")  # fmt: skip
    return _run


def _run(args: argparse.Namespace) -> int:
    import torch

    from simworld.data.formats import DumpError, read_episodes
    from simworld.worldmodel.sample_mean import SampleMean
    from simworld.worldmodel.world_model import load_world_model

    torch.set_num_threads(args.threads)
    try:
        cfg = SearchConfig(args.table, args.pipelines, args.seed, args.threshold, args.max_seconds)
        began = time.perf_counter()
        if args.samples < 0:
            raise ValueError(f"--samples must be >= 0, got {args.samples}")
        model: WorldModel = load_world_model(args.model)
        members = [load_world_model(path) for path in args.ensemble]
        if args.samples or members:
            model = SampleMean(model, samples=args.samples, members=members)
        loaded = time.perf_counter() - began
        test = read_episodes(args.test).episodes if args.test else []
        training = [e for path in args.train for e in read_episodes(path).episodes]
    except (ValueError, OSError, DumpError) as exc:
        print(f"simworld bench pipeline: {exc}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "model": args.model,
        "samples": args.samples,
        "ensemble": args.ensemble,
        "model_load_seconds": round(loaded, 2),
    }
    report.update(pipeline_search(cfg, model))
    if args.train:
        report["training_overlap"] = training_overlap(report, training)
        report["lookup_baseline"] = lookup_baseline(report, training)
    if test:
        report["transitions"] = transition_accuracy(model, test, args.limit)
    short = {k: v for k, v in report.items() if k != "per_pipeline"}
    print(json.dumps(short, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


__all__ = [
    "SearchConfig",
    "configure",
    "draw_pipelines",
    "lookup_baseline",
    "pipeline_search",
    "run_search",
    "spearman",
    "training_overlap",
    "transition_accuracy",
]
