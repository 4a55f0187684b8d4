"""The `datascience` real env: data-preparation pipelines and cross-validated models run on
real tables with pandas and scikit-learn, recorded as ground-truth episodes.

    from simworld.data.envs import load_env
    env = load_env("datascience", scripted=0.7, max_seconds=5.0)
    episodes = list(env.record(episodes=200, seed=0))

    simworld record --env datascience --episodes 400 --seed 0 --out out/ds/train.jsonl.gz

Each episode draws a table from `tables` (task ids of `datascience_tables.source_for`:
the five toy datasets and generated tables) and a policy, then takes `steps` tool calls,
one per step, from the vocabulary of `datascience_ops`:
- scripted (probability `scripted`): a sensible pipeline: impute, encode (or drop) the
  categoricals, then train_cv calls with assorted models and hyper-parameters between
  optional scale / select_features / filter_rows steps;
- random: any operation with plausible arguments, some of them wrong (an unknown column,
  a model of the other task, training before encoding), which record as error results.

What a step holds:
- `state` / `next_state`: {"source": the table's source, "pipeline": [{"op", "args"}, …]
  (the successful table operations so far, in order), "profile": the compact profile of
  the table now (see `datascience_tables`)}. The source and the pipeline determine the
  table: replaying the pipeline on the source rebuilds it exactly (`replay`);
- `action`: one call, id "call_<step>_0", arguments as a JSON object;
- `observation`: the call's JSON result (compact), or `{"error": "..."}` with is_error.
train_cv and failed calls leave the state unchanged.

Decisions:
- Calls whose estimated cost (`datascience_costs.estimate`) exceeds `max_seconds` are not
  recorded: the policy draws again (cheaper models or fewer trees), so a recording stays
  within minutes while still covering the big tables.
- No timing enters a record: a result holds only values of the table and the model.
- Seeds: the table, the policy and every draw come from `derive_seed(seed, index, ...)`;
  the same options and seed give byte-identical records on one machine (scikit-learn's
  estimators all run with random_state 0 and one thread).
"""

from __future__ import annotations

import importlib.metadata
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simworld.data.datascience_costs import estimate
from simworld.data.datascience_ops import MODELS, TOOLS, OpError, run_op
from simworld.data.datascience_tables import (
    TARGET,
    build_table,
    profile,
    source_for,
    task_id_for,
    task_kind,
)
from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Episode,
    Outcome,
    Provenance,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    VolatileField,
)

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_TABLES = (
    "iris",
    "wine",
    "breast_cancer",
    "diabetes",
    "digits",
    *(f"make_classification-{n}x{f}-s{s}" for n in (2000, 10000) for f in (10, 20) for s in (0, 1)),
    *(f"make_regression-{n}x{f}-s{s}" for n in (2000, 10000) for f in (10, 20) for s in (0, 1)),
    "make_classification-50000x20-s0",
    "make_classification-50000x20-s1",
    "make_regression-50000x20-s0",
)
RULES = (
    "The state is a table's profile: shape, task (classification or regression), the target"
    " column, per column [dtype, missing, mean, std, min, max] for numbers or"
    " ['category', missing, distinct, top counts] for categories, the first rows, and the"
    " pipeline of operations applied so far to the source table.",
    "An operation that changes the table returns {ok, shape, changed, ...} counts and adds"
    " itself to the pipeline; train_cv returns {cv_mean, cv_std, folds, metric} rounded to 4"
    " decimals (accuracy for classification, r2 for regression) and changes nothing.",
    "A call the table cannot take returns {error} and changes nothing: unknown columns,"
    " changing the target, a model of the other task, category columns or missing values"
    " left when training.",
    "Cross-validation is shuffled (stratified for classification) with random_state 0.",
)
POLICY = "scripted pipelines (impute, encode, train_cv, optional scale/select/filter) or random"
_PARAMS: dict[str, tuple[JSON, ...]] = {
    "n_estimators": (10, 20, 50, 100),
    "max_depth": (2, 4, 8, 16),
    "C": (0.01, 0.1, 1.0, 10.0),
    "alpha": (0.1, 1.0, 10.0, 100.0),
    "n_neighbors": (3, 5, 15, 31),
    "learning_rate": (0.05, 0.1, 0.3),
}


@dataclass
class Applied:
    """One call run on a table: the table after it, its result, and the state after."""

    frame: pd.DataFrame
    result: dict[str, JSON]
    is_error: bool
    state: dict[str, JSON]


def initial_state(source: dict[str, JSON], frame: pd.DataFrame) -> dict[str, JSON]:
    """The state of an untouched table."""
    return {"source": source, "pipeline": [], "profile": profile(frame, source)}


def apply_call(frame: pd.DataFrame, state: dict[str, JSON], name: str, args: JSON) -> Applied:
    """Run one call on `frame` (the table `state` describes); errors become results."""
    source = state["source"]
    try:
        after, result = run_op(frame, source, name, args)
    except OpError as exc:
        return Applied(frame, {"error": str(exc)}, True, state)
    if name == "train_cv":
        return Applied(frame, result, False, state)
    pipeline = [*state["pipeline"], {"op": name, "args": args}]
    new_state = {"source": source, "pipeline": pipeline, "profile": profile(after, source)}
    return Applied(after, result, False, new_state)


def replay(source: dict[str, JSON], pipeline: Sequence[JSON]) -> pd.DataFrame:
    """The table `source` after `pipeline`; ValueError when an entry no longer applies."""
    frame = build_table(source)
    for index, entry in enumerate(pipeline):
        if not isinstance(entry, dict) or set(entry) != {"op", "args"}:
            raise ValueError(f"pipeline[{index}] must be {{'op', 'args'}}, got {entry!r}")
        try:
            frame, _ = run_op(frame, source, str(entry["op"]), entry["args"])
        except OpError as exc:
            raise ValueError(f"pipeline[{index}] does not replay: {exc}") from exc
    return frame


def result_text(result: dict[str, JSON]) -> str:
    """A result as the recorded text: compact JSON, keys in their order."""
    return json.dumps(result, separators=(",", ":"))


class DataScienceEnv:
    """Records datascience episodes; see the module docstring."""

    name = "datascience"

    def __init__(
        self,
        tables: Sequence[str] | str = DEFAULT_TABLES,
        scripted: float = 0.7,
        steps: Sequence[int] = (4, 10),
        max_seconds: float = 5.0,
    ) -> None:
        names = tuple(tables.split(",")) if isinstance(tables, str) else tuple(tables)
        if not names:
            raise ValueError("tables must name at least one table")
        self.sources = [source_for(name) for name in names]  # SourceError names a bad one
        if not 0.0 <= scripted <= 1.0:
            raise ValueError(f"scripted is a probability in [0, 1]; got {scripted}")
        low, high = tuple(steps)
        if not 1 <= low <= high:
            raise ValueError(f"steps is (fewest, most) with 1 <= fewest <= most; got {steps}")
        if max_seconds <= 0:
            raise ValueError(f"max_seconds must be positive, got {max_seconds}")
        self.scripted, self.steps, self.max_seconds = scripted, (low, high), max_seconds
        self.version = "scikit-learn=={},pandas=={}".format(
            importlib.metadata.version("scikit-learn"), importlib.metadata.version("pandas")
        )
        self.volatile: list[VolatileField] = []
        self._tables: dict[str, pd.DataFrame] = {}

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes determined by `seed`."""
        if episodes is None:
            raise ValueError("the datascience env's episodes are unbounded: give a count")
        for index in range(episodes):
            yield self._episode(seed, index)

    def _table(self, source: dict[str, JSON]) -> pd.DataFrame:
        key = task_id_for(source)
        if key not in self._tables:
            self._tables[key] = build_table(source)
        return self._tables[key]

    def _episode(self, seed: int, index: int) -> Episode:
        rng = random.Random(derive_seed("datascience", seed, index, "policy"))
        source = self.sources[derive_seed("datascience", seed, index, "table") % len(self.sources)]
        frame = self._table(source)
        state = initial_state(source, frame)
        scripted = rng.random() < self.scripted
        policy = _Scripted(rng) if scripted else _Random(rng)
        steps: list[Step] = []
        best: float | None = None
        for step in range(rng.randint(*self.steps)):
            name, args = self._affordable(policy, frame, state)
            call_id = f"call_{step}_0"
            applied = apply_call(frame, state, name, args)
            text = result_text(applied.result)
            steps.append(
                Step(
                    action=ToolCallsAction([ToolCall(call_id, name, args, json.dumps(args))]),
                    observation=ToolResultsObservation(
                        [ToolResult(call_id, text, applied.result, applied.is_error)]
                    ),
                    state=state,
                    next_state=applied.state,
                )
            )
            if name == "train_cv" and not applied.is_error:
                score = float(applied.result["cv_mean"])
                best = score if best is None else max(best, score)
            frame, state = applied.frame, applied.state
        task_id = task_id_for(source)
        return Episode(
            episode_id=f"datascience-{seed}-{index}",
            env=self.name,
            task=Task(id=task_id, instruction=instruction(source)),
            steps=steps,
            tools=list(TOOLS),
            rules=list(RULES),
            initial_state=initial_state(source, self._table(source)),
            seed=derive_seed("datascience", seed, index, "policy"),
            provenance=Provenance(
                source=self.name,
                version=self.version,
                origin=f"record(seed={seed}) episode {index}",
                policy="scripted" if scripted else "random",
            ),
            outcome=Outcome(score=best, detail="best cv_mean" if best is not None else ""),
            volatile=list(self.volatile),
        )

    def _affordable(
        self, policy: _Scripted | _Random, frame: pd.DataFrame, state: dict[str, JSON]
    ) -> tuple[str, dict[str, JSON]]:
        """The policy's next call whose estimated cost is within max_seconds (redrawn)."""
        for _ in range(50):
            name, args = policy.next(frame, state)
            if estimate(state["profile"], name, args) <= self.max_seconds:
                return name, args
        return "train_cv", {"model": _cheapest(state["source"])}


def instruction(source: dict[str, JSON]) -> str:
    """The task of a table: find the pipeline and model with the best CV score."""
    metric = "accuracy" if task_kind(source) == "classification" else "R²"
    return (
        f"Prepare the table {task_id_for(source)} and find the model with the best"
        f" cross-validated {metric} on its target column {TARGET!r}."
    )


def _cheapest(source: dict[str, JSON]) -> str:
    return "logistic" if task_kind(source) == "classification" else "ridge"


def model_call(rng: random.Random, source: dict[str, JSON], wrong: float = 0.0) -> dict[str, JSON]:
    """A train_cv call: a model of the table's task (of the other with probability `wrong`),
    each of its hyper-parameters set with probability 1/2, 5 folds (3 one time in 5)."""
    task = task_kind(source)
    if rng.random() < wrong:
        task = "regression" if task == "classification" else "classification"
    kinds = [kind for kind, (solves, _) in MODELS.items() if solves == task]
    kind = rng.choice(kinds)
    params = {p: rng.choice(_PARAMS[p]) for p in MODELS[kind][1] if rng.random() < 0.5}
    call: dict[str, JSON] = {"model": kind}
    if params:
        call["params"] = params
    if rng.random() < 0.2:
        call["folds"] = 3
    return call


def _features(frame: pd.DataFrame, numeric: bool | None = None) -> list[str]:
    import pandas as pd

    out = [str(c) for c in frame.columns if c != TARGET]
    if numeric is None:
        return out
    return [c for c in out if pd.api.types.is_numeric_dtype(frame[c]) == numeric]


class _Scripted:
    """Prepare the table (impute, then encode or drop the categoricals), then alternate
    train_cv with optional scale / select_features / filter_rows."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def next(self, frame: pd.DataFrame, state: dict[str, JSON]) -> tuple[str, dict[str, JSON]]:
        rng, source = self.rng, state["source"]
        if frame.isna().to_numpy().any():
            return "impute", {"strategy": rng.choice(("mean", "median", "most_frequent"))}
        categories = _features(frame, numeric=False)
        if categories:
            if rng.random() < 0.7:
                return "encode", {"method": rng.choice(("onehot", "ordinal"))}
            return "drop_columns", {"columns": categories}
        if rng.random() < 0.65:
            return "train_cv", model_call(rng, source)
        return tidy_call(rng, frame)


def tidy_call(rng: random.Random, frame: pd.DataFrame) -> tuple[str, dict[str, JSON]]:
    """One optional step on a ready table: scale, select_features or filter_rows."""
    choice = rng.random()
    features = _features(frame, numeric=True)
    if choice < 0.45 or len(features) < 3:
        return "scale", {"method": rng.choice(("standard", "minmax", "robust"))}
    if choice < 0.8:
        k = rng.randint(2, max(2, len(features) - 1))
        return "select_features", {"k": k, "method": rng.choice(("f_test", "variance"))}
    column = rng.choice(features)
    value = rounded_value(float(frame[column].quantile(rng.choice((0.05, 0.1, 0.9, 0.95)))))
    op = ">=" if value <= float(frame[column].median()) else "<="
    return "filter_rows", {"column": column, "op": op, "value": value}


def rounded_value(value: float) -> float:
    """A threshold as a caller would type it: 3 decimals."""
    return round(value, 3)


class _Random:
    """Any operation, arguments plausible for the table now, some of them wrong."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def next(self, frame: pd.DataFrame, state: dict[str, JSON]) -> tuple[str, dict[str, JSON]]:
        rng, source = self.rng, state["source"]
        features = _features(frame)
        pick = rng.random()
        if pick < 0.35:
            return "train_cv", model_call(rng, source, wrong=0.15)
        if pick < 0.5:
            args: dict[str, Any] = {"strategy": rng.choice(("mean", "median", "most_frequent"))}
            if rng.random() < 0.3 and features:
                args["columns"] = rng.sample(features, k=min(len(features), rng.randint(1, 2)))
            return "impute", args
        if pick < 0.62:
            args = {"method": rng.choice(("onehot", "ordinal"))}
            if rng.random() < 0.3 and features:
                args["columns"] = [rng.choice(features)]
            return "encode", args
        if pick < 0.72:
            pool = [*features, "price", TARGET]  # an unknown column and the target, sometimes
            return "drop_columns", {"columns": [rng.choice(pool)]}
        return tidy_call(rng, frame)


__all__ = [
    "DEFAULT_TABLES",
    "RULES",
    "Applied",
    "DataScienceEnv",
    "apply_call",
    "initial_state",
    "instruction",
    "model_call",
    "replay",
    "result_text",
    "tidy_call",
]
