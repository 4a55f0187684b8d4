"""The pipeline-search benchmark: seeded pipelines, the two runs and their comparison,
Spearman against hand-computed values, and the transition-accuracy measure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from simworld.data.datascience_costs import estimate
from simworld.data.datascience_ops import check_args
from simworld.data.datascience_tables import build_table, source_for
from simworld.data.envs import load_env
from simworld.data.envs.datascience import apply_call, initial_state, result_text
from simworld.data.records import (
    Episode,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.eval.pipeline_search import (
    SearchConfig,
    draw_pipelines,
    lookup_baseline,
    pipeline_search,
    spearman,
    training_overlap,
    transition_accuracy,
)
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction

CV = {"cv_mean": 0.5, "cv_std": 0.01, "folds": 5, "metric": "accuracy"}


class ScriptedModel:
    """A world model stub: train_cv gets CV with cv_mean from `scores` in turn; any other
    call gets {"ok": true, ...} with an empty patch."""

    budget = Budget(total=4096)

    def __init__(self, scores: Sequence[float] = (0.5,)) -> None:
        self.scores = list(scores)
        self.calls = 0

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        out = []
        for ctx in batch:
            assert isinstance(ctx.action_record, ToolCallsAction)
            (asked,) = ctx.action_record.calls
            if asked.name == "train_cv":
                value = {**CV, "cv_mean": self.scores[self.calls % len(self.scores)]}
                self.calls += 1
            else:
                value = {"ok": True, "shape": [0, 0], "changed": 0}
            text = json.dumps(value)
            out.append(
                Prediction(ToolResultsObservation([ToolResult(asked.id, text, value)]), [], text)
            )
        return out


def test_spearman_against_hand_computed_values() -> None:
    # d = (0, 1, 1, 0): 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ties take their average rank: ranks (1.5, 1.5, 3) against (1, 2, 3) -> r = sqrt(3)/2
    assert spearman([1, 1, 2], [1, 2, 3]) == pytest.approx(3**0.5 / 2)
    assert spearman([1, 2], [1, 2]) is None and spearman([1, 1, 1], [1, 2, 3]) is None
    from scipy.stats import spearmanr

    a, b = [0.3, 0.9, 0.1, 0.5, 0.5, 0.7], [0.2, 0.8, 0.3, 0.6, 0.4, 0.9]
    assert spearman(a, b) == pytest.approx(float(spearmanr(a, b).statistic))


def test_pipelines_are_seeded_and_valid() -> None:
    cfg = SearchConfig(table="iris", pipelines=6, seed=3)
    first, again = draw_pipelines(cfg), draw_pipelines(cfg)
    assert first == again
    assert first != draw_pipelines(SearchConfig(table="iris", pipelines=6, seed=4))
    for calls in first:
        assert calls[0][0] == "impute" and calls[-1][0] == "train_cv"
        assert sum(name == "train_cv" for name, _ in calls) == 1
        for name, args in calls:
            check_args(name, args)


def test_search_runs_both_ways_and_compares() -> None:
    # seed 4 draws no k-NN, whose estimate on 150 rows is as small as a table op's
    cfg = SearchConfig(table="iris", pipelines=4, seed=4, threshold=0.0051)
    # which calls the routed run should give the model: those estimated over the threshold
    dear = 0
    for calls in draw_pipelines(cfg):
        frame = build_table(source_for("iris"))
        state = initial_state(source_for("iris"), frame)
        for name, args in calls:
            dear += estimate(state["profile"], name, args) > cfg.threshold
            applied = apply_call(frame, state, name, args)
            frame, state = applied.frame, applied.state
    model = ScriptedModel([0.9, 0.8, 0.7, 0.6])
    report = pipeline_search(cfg, model)
    calls = sum(len(p) for p in draw_pipelines(cfg))
    assert report["routed_sources"] == {"real": calls - dear, "model": dear}
    assert model.calls == dear == 4  # on iris: every train_cv, no table op
    real = [p["real"] for p in report["per_pipeline"]]
    assert [p["predicted"] for p in report["per_pipeline"]] == [0.9, 0.8, 0.7, 0.6]
    assert all(isinstance(r, float) and 0 < r <= 1 for r in real)
    errors = [abs(r - p) for r, p in zip(real, [0.9, 0.8, 0.7, 0.6], strict=True)]
    assert report["cv_mean_mae"] == pytest.approx(sum(errors) / 4, abs=1e-4)
    assert report["spearman"] == pytest.approx(spearman(real, [0.9, 0.8, 0.7, 0.6]), abs=1e-4)
    assert report["same_best"] == (max(range(4), key=lambda i: (real[i], -i)) == 0)
    assert report["regret"] == pytest.approx(max(real) - real[0], abs=1e-4)
    assert report["real_seconds"] > 0 and report["routed_seconds"] > 0
    assert report["model_answered"] == 4 and report["model_cv_mean_mae"] == report["cv_mean_mae"]
    assert {p["by"] for p in report["per_pipeline"]} == {"model"}


def _recorded(calls: Sequence[tuple[str, dict]], table: str = "iris") -> Episode:
    """The episode the recorder writes for `calls` run for real on `table`."""
    source = source_for(table)
    frame = build_table(source)
    state = initial_state(source, frame)
    steps = []
    for index, (name, args) in enumerate(calls):
        applied = apply_call(frame, state, name, args)
        result = ToolResult(
            f"call_{index}_0", result_text(applied.result), applied.result, applied.is_error
        )
        call = ToolCall(f"call_{index}_0", name, args, json.dumps(args))
        steps.append(
            Step(ToolCallsAction([call]), ToolResultsObservation([result]), state, applied.state)
        )
        frame, state = applied.frame, applied.state
    return Episode(f"{table}-{len(calls)}", "datascience", Task(id=table, instruction=""), steps)


def test_training_overlap_counts_the_predicted_pipelines_seen_in_training() -> None:
    cfg = SearchConfig(table="iris", pipelines=4, seed=4, threshold=0.0051)
    pipelines = draw_pipelines(cfg)
    predicted = [0.9, 0.8, 0.7, 0.6]
    report = pipeline_search(cfg, ScriptedModel(predicted))
    trains = [calls[-1] for calls in pipelines]
    assert len({json.dumps(t, sort_keys=True) for t in trains}) == 4  # four distinct calls
    assert pipelines[0][:-1] != pipelines[1][:-1]
    failed = _recorded(pipelines[2])
    failed.steps[-1].observation.results[0].is_error = True  # a failed step shows no score
    training = [
        _recorded(pipelines[0]),  # pipeline 0 exactly
        _recorded([*pipelines[0][:-1], trains[1]]),  # pipeline 1's call after another pipeline
        failed,
        _recorded(pipelines[3], table="wine"),  # pipeline 3 on another table
    ]
    overlap = training_overlap(report, training)
    real = [p["real"] for p in report["per_pipeline"]]
    unseen = list(zip(real[1:], predicted[1:], strict=True))
    assert overlap == {
        "training_train_cv_steps": 3,
        "model_answered": 4,
        "seen_exact": 1,
        "seen_call": 2,
        "unseen_scored": 3,
        "unseen_cv_mean_mae": pytest.approx(sum(abs(r - p) for r, p in unseen) / 3, abs=1e-4),
        "unseen_spearman": pytest.approx(spearman(real[1:], predicted[1:]), abs=1e-4),
    }


def test_transition_accuracy_scores_a_recorded_dump() -> None:
    episodes = list(load_env("datascience", tables="iris", steps=(4, 6)).record(4, seed=1))
    report = transition_accuracy(ScriptedModel([0.5]), episodes)
    steps = [s for e in episodes for s in e.steps]
    assert report["steps"] == len(steps) and report["over_budget"] == 0
    real_cv = [
        s.observation.results[0].structured["cv_mean"]
        for s in steps
        if s.action.calls[0].name == "train_cv" and not s.observation.results[0].is_error
    ]
    assert report["train_cv"]["steps"] == len(real_cv)
    if real_cv:
        mae = sum(abs(v - 0.5) for v in real_cv) / len(real_cv)
        assert report["train_cv"]["cv_mean_mae"] == pytest.approx(mae, abs=1e-4)
    errors = sum(s.observation.results[0].is_error for s in steps)
    assert report["error_flag_accuracy"] == pytest.approx(1 - errors / len(steps), abs=1e-4)
    # the stub's empty patch reproduces none of a changed profile's changed fields
    if report["table_ops"]["steps"]:
        assert report["table_ops"]["profile_field_accuracy"] < 1.0


def test_the_command_is_registered_and_refuses_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from simworld.bench import BENCHMARKS
    from simworld.cli import main

    assert BENCHMARKS["pipeline"][0] == "simworld.eval.pipeline_search"
    assert main(["bench", "pipeline", "--model", "nowhere", "--table", "titanic"]) == 2
    assert "unknown table 'titanic'" in capsys.readouterr().err
    assert main(["bench", "pipeline", "--model", "nowhere", "--table", "iris"]) == 2
    assert "nowhere" in capsys.readouterr().err
    missing = tmp_path / "train.jsonl"
    args = ["bench", "pipeline", "--model", "default", "--table", "iris", "--train", str(missing)]
    assert main(args) == 2  # before any pipeline runs
    assert str(missing) in capsys.readouterr().err
    assert main(["bench", "pipeline", "--model", "default", "--samples", "-1"]) == 2
    assert "--samples must be >= 0, got -1" in capsys.readouterr().err


def test_lookup_baseline_answers_with_the_recorded_mean_of_the_same_table_and_model() -> None:
    cfg = SearchConfig(table="iris", pipelines=4, seed=4, threshold=0.0051)
    pipelines = draw_pipelines(cfg)
    # the four train_cv calls: logistic, extra_clf, boost_clf, boost_clf
    assert [calls[-1][1]["model"] for calls in pipelines] == [
        "logistic", "extra_clf", "boost_clf", "boost_clf"
    ]  # fmt: skip
    predicted = [0.9, 0.8, 0.7, 0.6]
    report = pipeline_search(cfg, ScriptedModel(predicted))
    logistic = _recorded(pipelines[0])
    boost = _recorded([*pipelines[0][:-1], pipelines[2][-1]])
    failed = _recorded(pipelines[1])
    failed.steps[-1].observation.results[0].is_error = True  # a failed step gives no score
    training = [logistic, boost, failed, _recorded(pipelines[3], table="wine")]
    a = logistic.steps[-1].observation.results[0].structured["cv_mean"]
    b = boost.steps[-1].observation.results[0].structured["cv_mean"]
    assert a != b
    # logistic and both boosts by kind; extra_clf was only recorded failing: the table mean
    baseline = [a, (a + b) / 2, b, b]
    real = [p["real"] for p in report["per_pipeline"]]
    assert lookup_baseline(report, training) == {
        "model_answered": 4,
        "by_kind": 3,
        "by_table": 1,
        "unknown": 0,
        "scored": 4,
        "cv_mean_mae": pytest.approx(
            sum(abs(r - x) for r, x in zip(real, baseline, strict=True)) / 4, abs=1e-4
        ),
        "spearman": pytest.approx(spearman(real, baseline), abs=1e-4),
        "model_cv_mean_mae": report["model_cv_mean_mae"],
        "model_spearman": report["model_spearman"],
    }
    # a table never recorded: nothing to look up
    on_wine = lookup_baseline(report, [_recorded(pipelines[0], table="wine")])
    assert on_wine["unknown"] == 4 and on_wine["scored"] == 0 and on_wine["spearman"] is None
