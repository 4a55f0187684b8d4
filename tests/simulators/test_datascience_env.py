"""The datascience simulated env: tasks, the real backend rebuilding tables from JSON states,
cost-aware routing (cheap calls real, dear ones to the model), and validation."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import pytest

from simworld.data.datascience_ops import OPS
from simworld.data.envs.datascience import apply_call, initial_state, replay
from simworld.data.records import (
    JSON,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.simulators.env import SimEnv
from simworld.simulators.envs import SIM_ENVS, load_sim_env
from simworld.simulators.envs.datascience import DataScienceReal, datascience_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.patch import apply
from simworld.worldmodel.world_model import Prediction

BIG = "make_classification-50000x20-s0"
PREDICTED = {"cv_mean": 0.5, "cv_std": 0.01, "folds": 5, "metric": "accuracy"}


def call(name: str, step: int = 0, **args: JSON) -> ToolCallsAction:
    return ToolCallsAction([ToolCall(f"call_{step}_0", name, args, json.dumps(args))])


class FixedModel:
    """A world model stub: every call gets PREDICTED and an empty patch; counts its calls."""

    budget = Budget(total=4096)

    def __init__(self) -> None:
        self.asked: list[str] = []

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        out = []
        for ctx in batch:
            assert isinstance(ctx.action_record, ToolCallsAction)
            (asked,) = ctx.action_record.calls
            self.asked.append(asked.name)
            text = json.dumps(PREDICTED)
            result = ToolResult(asked.id, text, PREDICTED)
            out.append(Prediction(ToolResultsObservation([result]), [], text))
        return out


def small_env(*tables: str) -> SimEnv:
    """The env with only `tables` as tasks (a router lists every task's tools)."""
    env = datascience_env()
    tasks = {t: env.tasks[t] for t in tables}
    return dataclasses.replace(env, tasks=tasks, real=DataScienceReal())


def test_env_is_registered_with_tasks_and_tools() -> None:
    assert "datascience" in SIM_ENVS
    env = load_sim_env("datascience")
    assert {"iris", "digits", BIG, "make_classification-200000x20-s0"} <= set(env.tasks)
    task = env.task_for("iris")
    assert {t.name for t in task.tools} == set(OPS)
    assert set(task.initial_state) == {"source", "pipeline", "profile"}
    assert task.initial_state["pipeline"] == [] and task.initial_state["profile"]["shape"] == [
        150,
        7,
    ]


def test_real_backend_answers_as_the_recorder_does() -> None:
    env = datascience_env()
    state = env.task_for("iris").initial_state
    real = DataScienceReal()
    answer = real.execute(state, call("impute", strategy="median"))
    after = apply(state, answer.patch)
    frame = replay(state["source"], [])
    expected = apply_call(frame, state, "impute", {"strategy": "median"})
    assert after == expected.state
    (result,) = answer.observation.results
    assert result.structured == expected.result and not result.is_error
    # a fresh backend rebuilds the table from the JSON state alone (source + pipeline)
    answer2 = DataScienceReal().execute(after, call("encode", method="ordinal"))
    assert answer2.observation.results[0].structured["changed"] == 2
    # an error is a result, the state unchanged
    bad = real.execute(after, call("drop_columns", columns=["nope"]))
    assert bad.observation.results[0].is_error and bad.patch == []
    assert "unknown columns ['nope']" in bad.observation.results[0].text


def test_frames_are_cached_by_pipeline_prefix() -> None:
    state = datascience_env().task_for("wine").initial_state
    real = DataScienceReal(keep=4)
    step1 = apply(state, real.execute(state, call("impute", strategy="mean")).patch)
    step2 = apply(step1, real.execute(step1, call("encode", method="onehot")).patch)
    assert real.frame(step2) is real.frame(step2)  # kept, not rebuilt
    longer = {
        **step2,
        "pipeline": [*step2["pipeline"], {"op": "scale", "args": {"method": "minmax"}}],
    }
    frame = real.frame(longer)  # one operation beyond a kept prefix
    assert frame.equals(replay(longer["source"], longer["pipeline"]))
    broken = {**step2, "pipeline": [{"op": "drop_columns", "args": {"columns": ["ghost"]}}]}
    with pytest.raises(ValueError, match="does not replay"):
        DataScienceReal().frame(broken)


def test_cost_is_the_estimate_in_seconds() -> None:
    env = small_env("iris", BIG)
    real = env.real
    assert real is not None
    big = env.task_for(BIG).initial_state
    iris = env.task_for("iris").initial_state
    forest = call("train_cv", model="forest_clf")
    assert real.cost(big, forest) > 10.0  # 50,000 rows, 100 trees, 5 folds
    assert real.cost(iris, forest) < 0.5
    assert real.cost(big, call("scale", method="standard")) < 0.5


def test_router_sends_cheap_calls_to_real_and_dear_ones_to_the_model() -> None:
    env = small_env("iris", BIG)
    model = FixedModel()
    router = Router(env, model, RouterConfig(max_real_cost=1.0, use_cache=False))
    session = Session(env, router, episode_id="big")
    session.reset(BIG)
    sources = []
    for step, (name, args) in enumerate(
        [
            ("impute", {"strategy": "median"}),
            ("encode", {"method": "onehot"}),
            ("train_cv", {"model": "forest_clf"}),  # ~tens of seconds: simulated
            ("train_cv", {"model": "logistic"}),  # ~0.05 s: real
        ]
    ):
        outcome = session.step(call(name, step, **args))
        sources.append(outcome.info["source"])
        if name == "train_cv" and outcome.info["source"] == "model":
            assert outcome.observation.results[0].structured == PREDICTED
    assert sources == ["real", "real", "model", "real"]
    assert model.asked == ["train_cv"]
    # on a toy table every call is cheap: all real, the model never asked
    session.reset("iris")
    for step, name in enumerate(("impute", "encode", "train_cv")):
        args = {"impute": {"strategy": "mean"}, "encode": {"method": "ordinal"},
                "train_cv": {"model": "forest_clf"}}[name]  # fmt: skip
        assert session.step(call(name, step, **args)).info["source"] == "real"
    assert model.asked == ["train_cv"]
    # asking for real execution by tool name wins over the cost
    forced = Router(env, model, RouterConfig(real_tools=frozenset({"train_cv"}), use_cache=False))
    state = env.task_for("iris").initial_state
    assert (
        forced.answer(session.episode(), state, call("train_cv", model="logistic"), 0).source
        == "real"
    )


def test_invalid_calls_are_refused_before_anything_runs() -> None:
    env = small_env("iris")
    router = Router(env, None, RouterConfig(real_tools=frozenset(OPS), use_cache=False))
    session = Session(env, router, episode_id="bad")
    session.reset("iris")
    outcome = session.step(call("train_cv", model="__import__('os').system('true')"))
    assert outcome.info["source"] == "validation"
    assert outcome.observation.results[0].is_error
    assert "is not one of" in outcome.observation.results[0].text
    unknown = session.step(call("run_python", 1, code="print(1)"))
    assert unknown.observation.results[0].is_error


def test_initial_state_matches_a_fresh_build() -> None:
    task = datascience_env().task_for("diabetes")
    frame = replay(task.initial_state["source"], [])
    assert initial_state(task.initial_state["source"], frame) == task.initial_state


def test_the_state_view_drops_detail_in_levels_never_cuts() -> None:
    from simworld.data.records import Episode, Task
    from simworld.worldmodel.context import approx_tokens
    from simworld.worldmodel.views import BudgetError, view_for

    state = datascience_env().task_for("digits").initial_state  # 67 columns
    view = view_for(Episode("e", "datascience", Task("digits"), []))
    action = call("train_cv", model="logistic")
    whole = view.render(state, action, 10**6, approx_tokens)
    assert json.loads(whole)["sample"] == state["profile"]["sample"]
    sizes = []
    for budget in (1000, 500, 120):
        text = view.render(state, action, budget, approx_tokens)
        shown = json.loads(text)  # valid JSON at every level
        assert approx_tokens(text) <= budget
        assert shown["source"] == {"name": "digits"} and shown["shape"] == [1797, 67]
        sizes.append(len(text))
    assert sizes == sorted(sizes, reverse=True) and len(whole) > sizes[0]
    assert json.loads(view.render(state, action, 120, approx_tokens))["columns"]["numbers"] == 65
    with pytest.raises(BudgetError):
        view.render(state, action, 10, approx_tokens)
