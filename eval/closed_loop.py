"""Closed-loop replay: real episodes' actions run through a world model from the same
initial state, the model carrying its OWN predicted observations and states forward, then
compared with reality step by step (how fast errors compound).

    from simworld.data.bundle import load_bundled
    from simworld.eval.closed_loop import compounding, divergence_curve, replay
    from simworld.worldmodel import load_world_model

    wm = load_world_model("default")
    episodes = load_bundled("test", env="frozenlake")[:20]
    rollouts = replay(wm, episodes, batch_size=32)

    def same(r, predicted):                    # any per-step scorer (see eval/metrics.py)
        real = [s.observation for s in r.episode.steps]
        return [float(p == q) for p, q in zip(predicted, real)]

    closed = [same(r, [p.observation for p in r.predictions]) for r in rollouts]
    one_step = ...                             # the same scores on one-step predictions
    curve = divergence_curve(rollouts, one_step, closed)
    compounding(curve)    # {"one_step": .., "closed_loop": .., "gap": .., "half_step": ..}

Replay runs every episode in lock step: step t of all episodes that have one, in batches
of `batch_size`, so it costs what one-step evaluation of the same steps costs.

What step t's context is built from (a copy; the input episodes are never changed):
- earlier steps keep their real actions and messages (the agent's side), but their
  observations are the model's predictions and their `state`/`next_state` the model's
  state chain. An unreadable or over-budget prediction is replaced by an EMPTY observation
  of the action's shape (a "" text, or one "" result per call id of the action), never by
  the real one, which would leak reality into the loop;
- step t's `state` is the model's current state (step 0: the real `steps[0].state`), its
  action and messages are real, and its `next_state` is real: that keeps `tracks_state`
  as in the data, and makes the context's target (never shown to the model) the real
  observation and the patch from the model's state to the real next state.

The model's state after a step is its state before with the predicted patch applied; a
patch that is missing or does not apply leaves the state unchanged and counts in
`Rollout.patch_failures`. A step whose action alone is past the model's budget gets
`Prediction(None, None, "", ["over budget: ..."])`, leaves the state unchanged and is not
counted as a patch failure (the model was never asked). Envs without states carry None.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    Step,
    TextObservation,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.worldmodel.context import Context, build_context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.patch import PatchError, apply
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import Prediction, WorldModel


@dataclass
class Rollout:
    """One episode replayed closed loop: the real `episode`, one prediction per step, the
    model's state after each step (None without states; a state a step left unchanged is
    the same object as the one before it: treat them as read-only), and how many predicted
    patches were missing or failed to apply."""

    episode: Episode
    predictions: list[Prediction]
    states: list[JSON]
    patch_failures: int = 0


@dataclass
class _Loop:
    """An episode being replayed: the steps as the model has imagined them so far, and its
    current state."""

    rollout: Rollout
    imagined: list[Step]
    state: JSON

    def context(self, model: WorldModel) -> Context:
        """Step t's context: imagined steps[:t], then the real step t in the model's state."""
        episode = self.rollout.episode
        t = len(self.imagined)
        current = dataclasses.replace(episode.steps[t], state=self.state)
        imagined = dataclasses.replace(episode, steps=[*self.imagined, current])
        return build_context(imagined, t, model.budget)

    def advance(self, prediction: Prediction, tracks_state: bool) -> None:
        """Record step t's prediction and carry its observation and state forward."""
        rollout = self.rollout
        real = rollout.episode.steps[len(self.imagined)]
        before = self.state
        if tracks_state and prediction.patch is not None:
            try:
                self.state = apply(before, prediction.patch)
            except PatchError:
                rollout.patch_failures += 1
        elif tracks_state:
            rollout.patch_failures += 1
        observation = prediction.observation
        if observation is None:
            observation = empty_observation(real.action)
        step = dataclasses.replace(
            real, observation=observation, state=before, next_state=self.state
        )
        self.imagined.append(step)
        rollout.predictions.append(prediction)
        rollout.states.append(self.state)


def empty_observation(action: Action) -> Observation:
    """What stands in for an unreadable prediction: "" for each call id, or a "" text."""
    if isinstance(action, ToolCallsAction):
        return ToolResultsObservation([ToolResult(call.id, "") for call in action.calls])
    return TextObservation("")


def replay(
    model: WorldModel,
    episodes: Sequence[Episode],
    *,
    batch_size: int = 32,
    cfg: GenerationConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Rollout]:
    """Each episode replayed closed loop through `model` (see the module docstring), in
    input order. `progress(n)` is called after each batch with the steps it completed."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    loops = [
        _Loop(Rollout(e, [], []), [], copy.deepcopy(e.steps[0].state) if e.steps else None)
        for e in episodes
    ]
    horizon = max((len(e.steps) for e in episodes), default=0)
    for t in range(horizon):
        live = [loop for loop in loops if t < len(loop.rollout.episode.steps)]
        for start in range(0, len(live), batch_size):
            chunk = live[start : start + batch_size]
            asked: list[tuple[_Loop, Context]] = []
            for loop in chunk:
                try:
                    asked.append((loop, loop.context(model)))
                except BudgetError as exc:
                    loop.advance(Prediction(None, None, "", [f"over budget: {exc}"]), False)
            if asked:
                predictions = model.predict([ctx for _, ctx in asked], cfg)
                if len(predictions) != len(asked):
                    raise ValueError(
                        f"the model returned {len(predictions)} predictions for "
                        f"{len(asked)} contexts"
                    )
                for (loop, ctx), prediction in zip(asked, predictions, strict=True):
                    loop.advance(prediction, ctx.tracks_state)
            if progress is not None:
                progress(len(chunk))
    return [loop.rollout for loop in loops]


@dataclass
class CurvePoint:
    """Step index `step` averaged over the `episodes` that reach it: one-step and
    closed-loop observation scores, and state scores (None where no episode has one)."""

    step: int
    episodes: int
    one_step: float
    closed_loop: float
    state_one_step: float | None = None
    state_closed_loop: float | None = None


Scores = Sequence[Sequence[float]]
StateScores = Sequence[Sequence[float | None]]


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rows(name: str, scores: StateScores, rollouts: Sequence[Rollout]) -> StateScores:
    """`scores` checked to hold one row per rollout and one score per step."""
    if len(scores) != len(rollouts):
        raise ValueError(f"{name}: {len(scores)} rows of scores for {len(rollouts)} rollouts")
    for row, rollout in zip(scores, rollouts, strict=True):
        if len(row) != len(rollout.episode.steps):
            raise ValueError(
                f"{name}: {len(row)} scores for episode {rollout.episode.episode_id!r} "
                f"of {len(rollout.episode.steps)} steps"
            )
    return scores


def divergence_curve(
    rollouts: Sequence[Rollout],
    one_step: Scores,
    closed_scores: Scores,
    one_step_state: StateScores | None = None,
    closed_state: StateScores | None = None,
) -> list[CurvePoint]:
    """Per step index, the mean scores over the episodes that reach that step. Each score
    argument has one row per rollout and one score per step of its episode (state scores
    may be None where a step has no state; they are then left out of that step's mean)."""
    table: dict[str, StateScores] = {
        "one_step": _rows("one_step", one_step, rollouts),
        "closed_loop": _rows("closed_scores", closed_scores, rollouts),
    }
    if one_step_state is not None:
        table["state_one_step"] = _rows("one_step_state", one_step_state, rollouts)
    if closed_state is not None:
        table["state_closed_loop"] = _rows("closed_state", closed_state, rollouts)
    horizon = max((len(r.episode.steps) for r in rollouts), default=0)
    curve = []
    for t in range(horizon):
        # every row reaching step t has a score there (checked above); t < horizon, so
        # at least one does and the observation means are never None
        means = {name: _mean([r[t] for r in rows if t < len(r)]) for name, rows in table.items()}
        one, closed = means["one_step"], means["closed_loop"]
        assert one is not None and closed is not None
        episodes = sum(t < len(r.episode.steps) for r in rollouts)
        point = CurvePoint(t, episodes, one, closed)
        point.state_one_step = means.get("state_one_step")
        point.state_closed_loop = means.get("state_closed_loop")
        curve.append(point)
    return curve


def compounding(curve: Sequence[CurvePoint]) -> dict[str, float | None]:
    """How much closed-loop accuracy falls behind one-step accuracy:
    `one_step` and `closed_loop`, the means over all replayed transitions (each step's mean
    weighted by its episode count, so they equal the plain per-transition accuracies);
    `gap`, one_step - closed_loop; `half_step`, the first step index whose closed-loop
    mean is below half its one-step mean (None if none is). All None on an empty curve."""
    total = sum(p.episodes for p in curve)
    if total == 0:
        return {"one_step": None, "closed_loop": None, "gap": None, "half_step": None}
    one_step = sum(p.one_step * p.episodes for p in curve) / total
    closed_loop = sum(p.closed_loop * p.episodes for p in curve) / total
    half = next((p.step for p in curve if p.closed_loop < p.one_step / 2), None)
    return {
        "one_step": one_step,
        "closed_loop": closed_loop,
        "gap": one_step - closed_loop,
        "half_step": None if half is None else float(half),
    }


__all__ = [
    "CurvePoint",
    "Rollout",
    "compounding",
    "divergence_curve",
    "empty_observation",
    "replay",
]
