"""Closed-loop replay: later contexts see the model's own predictions and states (never
the real ones), inputs stay unchanged, patch failures and over-budget steps are handled,
batches are lock-step and bounded; the curve and its summary on hand-computed numbers;
one run of the shipped default model."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    Episode,
    Observation,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResultsObservation,
    to_json,
)
from simworld.eval.closed_loop import (
    CurvePoint,
    Rollout,
    compounding,
    divergence_curve,
    empty_observation,
    replay,
)
from simworld.worldmodel import load_world_model
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction


def _episode(n: int, episode_id: str = "toy", long_action: int | None = None) -> Episode:
    """A toy episode: state {"n": t}; the real step t says "real-t" and moves n to t+1."""
    steps = []
    for t in range(n):
        text = "x" * 600 if t == long_action else f"go-{t}"
        steps.append(Step(TextAction(text), TextObservation(f"real-{t}"), {"n": t}, {"n": t + 1}))
    return Episode(episode_id, "toy", Task("toy"), steps)


def _add_ten(ctx: Context) -> Prediction:
    """Says what it saw ("pred-<n>") and adds 10 to the state's n."""
    n = json.loads(ctx.state)["n"]
    patch = [{"op": "replace", "path": "/n", "value": n + 10}]
    return Prediction(TextObservation(f"pred-{n}"), patch, f"pred-{n}")


@dataclass
class FakeModel:
    """A deterministic world model: `respond` per context; every batch is recorded."""

    respond: Callable[[Context], Prediction] = _add_ten
    budget: Budget = field(default_factory=lambda: Budget(total=4096))
    batches: list[list[Context]] = field(default_factory=list)

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        self.batches.append(list(batch))
        return [self.respond(ctx) for ctx in batch]


def test_later_contexts_see_the_models_own_observations_and_states() -> None:
    model = FakeModel()
    (rollout,) = replay(model, [_episode(3)])
    contexts = [ctx for batch in model.batches for ctx in batch]
    assert [json.loads(ctx.state) for ctx in contexts] == [{"n": 0}, {"n": 10}, {"n": 20}]
    history = json.loads(contexts[2].history)
    assert [h["observation"] for h in history] == ["pred-0", "pred-10"]
    assert "real-" not in contexts[2].history
    assert rollout.states == [{"n": 10}, {"n": 20}, {"n": 30}]
    assert [p.text for p in rollout.predictions] == ["pred-0", "pred-10", "pred-20"]
    assert rollout.patch_failures == 0
    # the target (never shown to the model) is reality, from the model's state
    assert contexts[1].target is not None
    assert contexts[1].target.patch == [{"op": "replace", "path": "/n", "value": 2}]


def test_the_input_episodes_are_unchanged() -> None:
    episodes = [_episode(3), _episode(2, "b")]
    before = to_json(episodes)
    rollouts = replay(FakeModel(), episodes)
    assert to_json(episodes) == before
    assert [r.episode for r in rollouts] == episodes
    rollouts[0].states[0]["n"] = -1  # the model's states are its own values
    assert to_json(episodes) == before


def test_missing_and_failing_patches_are_counted_and_leave_the_state() -> None:
    patches = {"go-0": None, "go-1": [{"op": "remove", "path": "/missing"}]}

    def respond(ctx: Context) -> Prediction:
        patch = patches.get(ctx.action, [{"op": "replace", "path": "/n", "value": 7}])
        return Prediction(None, patch, "?", ["no observation line"])

    model = FakeModel(respond)
    (rollout,) = replay(model, [_episode(3)])
    assert rollout.states == [{"n": 0}, {"n": 0}, {"n": 7}]
    assert rollout.patch_failures == 2
    history = json.loads(model.batches[-1][0].history)
    assert [h["observation"] for h in history] == ["", ""]  # unreadable: empty, not real


def test_envs_without_state_carry_none_and_count_no_failures() -> None:
    episode = _episode(2)
    for step in episode.steps:
        step.state = step.next_state = None
    model = FakeModel(lambda ctx: Prediction(TextObservation("o"), None, "o"))
    (rollout,) = replay(model, [episode])
    assert rollout.states == [None, None]
    assert rollout.patch_failures == 0


def test_an_over_budget_step_is_recorded_and_the_replay_goes_on() -> None:
    model = FakeModel(budget=Budget(total=180))
    (rollout,) = replay(model, [_episode(3, long_action=1)])
    assert [len(batch) for batch in model.batches] == [1, 1]
    over = rollout.predictions[1]
    assert over.observation is None and over.patch is None and over.text == ""
    assert over.problems[0].startswith("over budget: ")
    assert rollout.states == [{"n": 10}, {"n": 10}, {"n": 20}]
    assert rollout.patch_failures == 0
    history = json.loads(model.batches[1][0].history)
    assert history[-1]["observation"] == ""


def test_replay_is_lock_step_in_batches_of_at_most_batch_size() -> None:
    model = FakeModel()
    episodes = [_episode(n, f"e{i}") for i, n in enumerate([3, 1, 2, 3, 3])]
    done: list[int] = []
    rollouts = replay(model, episodes, batch_size=2, progress=done.append)
    assert [len(b) for b in model.batches] == [2, 2, 1, 2, 2, 2, 1]
    steps_seen = [{json.loads(c.state)["n"] // 10 for c in b} for b in model.batches]
    assert steps_seen == [{0}, {0}, {0}, {1}, {1}, {2}, {2}]
    assert sum(done) == 12
    assert [len(r.predictions) for r in rollouts] == [3, 1, 2, 3, 3]
    with pytest.raises(ValueError, match="batch_size"):
        replay(model, episodes, batch_size=0)


def test_empty_observation_keeps_the_actions_call_ids() -> None:
    calls = [ToolCall("c1", "ls", {}, "{}"), ToolCall("c2", "pwd", {}, "{}")]
    empty: Observation = empty_observation(ToolCallsAction(calls))
    assert isinstance(empty, ToolResultsObservation)
    assert [(r.call_id, r.text) for r in empty.results] == [("c1", ""), ("c2", "")]
    assert empty_observation(TextAction("LEFT")) == TextObservation("")


def _rollouts(lengths: Sequence[int]) -> list[Rollout]:
    return [Rollout(_episode(n, f"e{n}"), [], []) for n in lengths]


def test_divergence_curve_averages_over_the_episodes_that_reach_each_step() -> None:
    rollouts = _rollouts([3, 1])
    one_step = [[1.0, 1.0, 0.0], [1.0]]
    closed = [[1.0, 0.0, 0.0], [0.0]]
    state_closed = [[1.0, None, 0.5], [0.0]]
    curve = divergence_curve(rollouts, one_step, closed, closed_state=state_closed)
    assert curve == [
        CurvePoint(0, 2, 1.0, 0.5, None, 0.5),
        CurvePoint(1, 1, 1.0, 0.0, None, None),
        CurvePoint(2, 1, 0.0, 0.0, None, 0.5),
    ]
    with pytest.raises(ValueError, match="2 scores for episode 'e3'"):
        divergence_curve(rollouts, [[1.0, 1.0], [1.0]], closed)


def test_compounding_on_hand_computed_numbers() -> None:
    curve = [
        CurvePoint(0, 4, 1.0, 1.0),
        CurvePoint(1, 2, 0.5, 0.5),
        CurvePoint(2, 2, 0.8, 0.3),  # 0.3 < 0.8 / 2: the first half step
        CurvePoint(3, 2, 0.0, 0.0),
    ]
    summary = compounding(curve)
    assert summary["one_step"] == pytest.approx((4 + 1 + 1.6) / 10)
    assert summary["closed_loop"] == pytest.approx((4 + 1 + 0.6) / 10)
    assert summary["gap"] == pytest.approx(0.1)
    assert summary["half_step"] == 2
    assert compounding(curve[:2])["half_step"] is None
    assert compounding([])["one_step"] is None


def test_the_default_model_replays_bundled_episodes() -> None:
    wm = load_world_model("default")
    shortest = [
        *sorted(load_bundled("test", env="frozenlake"), key=lambda e: len(e.steps))[:3],
        *sorted(load_bundled("test", env="bfcl"), key=lambda e: len(e.steps))[:2],
    ]
    rollouts = replay(wm, shortest, batch_size=4)
    for rollout, episode in zip(rollouts, shortest, strict=True):
        assert rollout.episode is episode
        assert len(rollout.predictions) == len(rollout.states) == len(episode.steps)
        assert all(state is not None for state in rollout.states)
        assert 0 <= rollout.patch_failures <= len(episode.steps)
