"""Every metric of `eval.metrics` on a batch of predicted transitions, one `Scored` row per
step: what the report's tables, breakdowns and plots are computed from.

    from simworld.eval.scoring import score
    rows = score(refs, predictions, schemas=schemas, encoder=load_encoder(), tau=0.9)
    rows[0].metrics["json_canonical"]

One-step state accuracy applies the predicted patch to the real state before the step (a
patch that is missing or fails to apply leaves that state unchanged, as closed-loop replay
does), and compares it with the real state after the step. Metrics that do not apply to a
step are None: state metrics where the env has no state, schema validity where no called
tool has an output schema, error flags for text observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from simworld.data.records import JSON, Observation, ToolCallsAction, ToolResultsObservation
from simworld.eval.breakdown import Scored
from simworld.eval.embedding import Encoder
from simworld.eval.metrics import (
    embedding_cosine,
    error_flag_accuracy,
    exact_match,
    field_f1,
    json_canonical_match,
    rouge_l,
    schema_validity,
    state_field_accuracy,
    state_match,
    thresholded,
)
from simworld.eval.predictors import StepRef
from simworld.worldmodel.patch import PatchError, apply
from simworld.worldmodel.world_model import Prediction

# Metric names in report order; "cosine" and "cosine_tau" need an encoder.
METRICS = (
    "readable",
    "exact",
    "json_canonical",
    "field_f1",
    "error_flag",
    "schema_valid",
    "rouge_l",
    "cosine",
    "cosine_tau",
    "state_match",
    "state_fields",
)
HEADLINE = "json_canonical"


def predicted_state(ref: StepRef, prediction: Prediction) -> JSON:
    """The state after the step as the prediction has it: its patch on the real state."""
    episode, index = ref
    state = episode.steps[index].state
    if state is None or prediction.patch is None:
        return state
    try:
        return apply(state, prediction.patch)
    except PatchError:
        return state


def score(
    refs: Sequence[StepRef],
    predictions: Sequence[Prediction],
    *,
    schemas: Mapping[str, Mapping[str, Mapping[str, JSON]]],
    encoder: Encoder | None = None,
    tau: float = 0.9,
    states: Sequence[JSON] | None = None,
) -> list[Scored]:
    """Score each prediction against its real step. `schemas` maps env → tool → output
    schema; `states` overrides the predicted states (closed loop carries its own).
    "readable" is whether the output parsed whole (no problems reported, an observation)."""
    if len(refs) != len(predictions):
        raise ValueError(f"{len(refs)} steps but {len(predictions)} predictions")
    steps = [episode.steps[index] for episode, index in refs]
    real: list[Observation] = [step.observation for step in steps]
    predicted = [p.observation for p in predictions]
    volatile = [episode.volatile for episode, _ in refs]
    if states is None:
        states = [predicted_state(ref, p) for ref, p in zip(refs, predictions, strict=True)]
    real_states = [step.next_state if step.state is not None else None for step in steps]
    columns: dict[str, Sequence[float | None]] = {
        "readable": [float(p.ok and p.observation is not None) for p in predictions],
        "exact": exact_match(predicted, real),
        "json_canonical": json_canonical_match(predicted, real, volatile),
        "field_f1": field_f1(predicted, real, volatile),
        "error_flag": error_flag_accuracy(predicted, real),
        "schema_valid": schema_validity(
            predicted,
            [step.action for step in steps],
            [schemas.get(episode.env, {}) for episode, _ in refs],
        ),
        "rouge_l": rouge_l(predicted, real),
        "state_match": state_match(states, real_states, volatile),
        "state_fields": state_field_accuracy(states, real_states, volatile),
    }
    if encoder is not None:
        cosine = embedding_cosine(predicted, real, encoder)
        columns["cosine"] = cosine
        columns["cosine_tau"] = thresholded(cosine, tau)
    rows = []
    for i, (episode, index) in enumerate(refs):
        step = steps[i]
        metrics = {name: columns[name][i] for name in METRICS if name in columns}
        rows.append(
            Scored(episode.env, _tool(step.action), index, _is_error(step.observation), metrics)
        )
    return rows


def _tool(action: object) -> str:
    if isinstance(action, ToolCallsAction) and action.calls:
        return action.calls[0].name
    return "text"


def _is_error(observation: Observation) -> bool:
    return isinstance(observation, ToolResultsObservation) and any(
        r.is_error for r in observation.results
    )


__all__ = ["HEADLINE", "METRICS", "predicted_state", "score"]
