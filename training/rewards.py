"""Sim-to-real rewards for GRPO on the world model: `simworld eval`'s metrics as reward
terms, composed as a weighted list; the choice of the cosine threshold τ; the kind of
each error (what DSWorld-style weighting records).

Every term is one call of the `simworld.eval.metrics` function of the same name on a batch
of `Transitions` (predictions against the real steps they predict), so a reward and the
metric it mirrors are one function:

    cosine_tau      thresholded(embedding_cosine(...), τ): 1 when the sentence embeddings'
                    cosine reaches τ (RWML's binarized sim-to-real reward)
    cosine          embedding_cosine: the cosine itself (the continuous option)
    json_canonical  json_canonical_match: 1 when equal in canonical JSON
    field_f1        field_f1: partial credit per JSON leaf
    state_match     state_match: 1 when the predicted patch gives the real next state
                    (None where the env has no state)
    schema_valid    schema_validity: share of results valid under the tool's output
                    schema (None where no called tool has one)

    rewards = RewardSet({"cosine_tau": 1.0, "json_canonical": 1.0}, encoder=load_encoder())
    scores = rewards.score(Transitions(refs, predictions, schemas))
    scores.total, scores.correct, scores.kinds        # one each per prediction

The total is the weighted mean of the terms that apply to an item (weights renormalised
over them): a FrozenLake board has no output schema, a BFCL result may have no state, and
both score in the same range. τ is chosen on validation predictions by `choose_tau`: the
threshold at which cosine ≥ τ agrees best with JSON-canonical match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from simworld.data.records import JSON, Action, Observation, VolatileField
from simworld.eval.embedding import Encoder
from simworld.eval.metrics import (
    embedding_cosine,
    error_flag_accuracy,
    field_f1,
    json_canonical_match,
    schema_validity,
    state_match,
    thresholded,
)
from simworld.eval.predictors import StepRef
from simworld.eval.scoring import predicted_state
from simworld.worldmodel.world_model import Prediction

TERMS = ("cosine_tau", "cosine", "json_canonical", "field_f1", "state_match", "schema_valid")
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "cosine_tau": 1.0,
    "json_canonical": 1.0,
    "state_match": 0.5,
    "schema_valid": 0.25,
}
# Candidate thresholds: 0.500, 0.505, ..., 0.995.
TAU_GRID = tuple(round(0.5 + 0.005 * i, 3) for i in range(100))
ERROR_KINDS = ("unreadable", "error_flag", "schema", "content", "state")
Schemas = Mapping[str, Mapping[str, Mapping[str, JSON]]]  # env -> tool -> output schema


@dataclass(frozen=True)
class Transitions:
    """Predictions next to the real steps they predict (`refs[i]` is `predictions[i]`'s
    step), with env -> tool -> output schema for schema validity. Columns every metric
    reads are computed once."""

    refs: Sequence[StepRef]
    predictions: Sequence[Prediction]
    schemas: Schemas = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.refs) != len(self.predictions):
            raise ValueError(f"{len(self.refs)} steps but {len(self.predictions)} predictions")

    @cached_property
    def predicted(self) -> list[Observation | None]:
        return [p.observation for p in self.predictions]

    @cached_property
    def real(self) -> list[Observation]:
        return [episode.steps[i].observation for episode, i in self.refs]

    @cached_property
    def volatile(self) -> list[list[VolatileField]]:
        return [episode.volatile for episode, _ in self.refs]

    @cached_property
    def actions(self) -> list[Action]:
        return [episode.steps[i].action for episode, i in self.refs]

    @cached_property
    def tool_schemas(self) -> list[Mapping[str, JSON]]:
        return [self.schemas.get(episode.env, {}) for episode, _ in self.refs]

    @cached_property
    def predicted_states(self) -> list[JSON]:
        """The predicted patch applied to the real state before the step (as eval does)."""
        return [predicted_state(r, p) for r, p in zip(self.refs, self.predictions, strict=True)]

    @cached_property
    def real_states(self) -> list[JSON]:
        steps = [episode.steps[i] for episode, i in self.refs]
        return [s.next_state if s.state is not None else None for s in steps]


@dataclass(frozen=True)
class Scores:
    """A batch's rewards: the composed total, every computed term, whether each prediction
    is right (JSON-canonical match and, where the env has states, the next state) and, when
    it is not, its error kind (one of ERROR_KINDS)."""

    total: list[float]
    columns: dict[str, Sequence[float | None]]
    correct: list[bool]
    kinds: list[str | None]


@dataclass(frozen=True)
class RewardSet:
    """Weighted reward terms (names from TERMS), the cosine threshold τ, and the sentence
    encoder the cosine terms need."""

    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    encoder: Encoder | None = None
    tau: float = 0.9

    def __post_init__(self) -> None:
        unknown = sorted(set(self.weights) - set(TERMS))
        if unknown:
            raise ValueError(f"unknown reward term(s) {unknown}: choose from {list(TERMS)}")
        if any(w < 0 for w in self.weights.values()) or not any(self.weights.values()):
            raise ValueError(f"reward weights must be >= 0, one of them > 0: {dict(self.weights)}")
        if self.needs_encoder and self.encoder is None:
            raise ValueError(
                "the cosine reward terms need the sentence encoder (all-MiniLM-L6-v2): keep "
                "embeddings on, or leave cosine and cosine_tau out of the rewards"
            )
        if not 0 < self.tau <= 1:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")

    @property
    def needs_encoder(self) -> bool:
        return any(self.weights.get(name, 0) > 0 for name in ("cosine", "cosine_tau"))

    def score(self, batch: Transitions) -> Scores:
        """Every weighted term (the cosine too whenever there is an encoder: it is logged),
        the checks behind `correct` and the error kinds."""
        columns: dict[str, Sequence[float | None]] = {
            "json_canonical": json_canonical_match(batch.predicted, batch.real, batch.volatile),
            "state_match": state_match(batch.predicted_states, batch.real_states, batch.volatile),
            "schema_valid": schema_validity(batch.predicted, batch.actions, batch.tool_schemas),
            "error_flag": error_flag_accuracy(batch.predicted, batch.real),
        }
        if self.encoder is not None:
            cosine = embedding_cosine(batch.predicted, batch.real, self.encoder)
            columns["cosine"] = cosine
            columns["cosine_tau"] = thresholded(cosine, self.tau)
        if self.weights.get("field_f1", 0) > 0:
            columns["field_f1"] = field_f1(batch.predicted, batch.real, batch.volatile)
        weighted = {name: columns[name] for name, w in self.weights.items() if w > 0}
        correct = [
            c == 1.0 and s in (None, 1.0)
            for c, s in zip(columns["json_canonical"], columns["state_match"], strict=True)
        ]
        return Scores(
            total=combine(weighted, self.weights),
            columns=columns,
            correct=correct,
            kinds=error_kinds(batch.predicted, columns),
        )


def combine(
    columns: Mapping[str, Sequence[float | None]], weights: Mapping[str, float]
) -> list[float]:
    """Per item, the weighted mean of the terms that apply (not None); 0.0 when none does."""
    n = len(next(iter(columns.values()), []))
    totals = []
    for i in range(n):
        applied = [(weights[name], col[i]) for name, col in columns.items() if col[i] is not None]
        mass = sum(w for w, _ in applied)
        totals.append(sum(w * float(s or 0.0) for w, s in applied) / mass if mass else 0.0)
    return totals


def error_kinds(
    predicted: Sequence[Observation | None], columns: Mapping[str, Sequence[float | None]]
) -> list[str | None]:
    """What went wrong first, per item: "unreadable" (no observation could be read),
    "error_flag" (success where the real call failed, or the reverse), "schema" (a result
    breaks its tool's output schema), "content" (the observation differs), "state" (the
    observation is right, the next state is not); None when nothing did."""
    kinds: list[str | None] = []
    for i, pred in enumerate(predicted):
        schema = columns["schema_valid"][i]
        checks = [
            ("unreadable", pred is None),
            ("error_flag", columns["error_flag"][i] == 0.0),
            ("schema", schema is not None and schema < 1.0),
            ("content", columns["json_canonical"][i] == 0.0),
            ("state", columns["state_match"][i] == 0.0),
        ]
        kinds.append(next((kind for kind, wrong in checks if wrong), None))
    return kinds


def choose_tau(
    cosines: Sequence[float], matches: Sequence[float], grid: Sequence[float] = TAU_GRID
) -> tuple[float, float]:
    """The threshold of `grid` at which `cosine >= τ` agrees most often with `matches`
    (JSON-canonical match, 1.0 or 0.0), and that agreement (a fraction); ties go to the
    smallest τ, the more lenient reward."""
    if len(cosines) != len(matches) or not cosines:
        raise ValueError(
            f"choose_tau needs paired, non-empty scores: {len(cosines)}, {len(matches)}"
        )
    cos = np.asarray(cosines, dtype=np.float64)  # (n,)
    match = np.asarray(matches, dtype=np.float64) >= 1.0  # (n,)
    taus = np.asarray(grid, dtype=np.float64)  # (k,)
    agree = ((cos[None, :] >= taus[:, None]) == match[None, :]).mean(axis=1)  # (k,)
    best = int(np.argmax(agree))  # the first maximum: the smallest τ
    return float(taus[best]), float(agree[best])


class CachedEncoder:
    """An `Encoder` that remembers the embeddings of the texts it has seen: a context's real
    observation comes back every time it is sampled, and a group often repeats a text."""

    def __init__(self, encoder: Encoder, max_items: int = 100_000) -> None:
        self.encoder = encoder
        self.max_items = max_items
        self._cache: dict[str, NDArray[np.float32]] = {}

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if len(self._cache) + len(missing) > self.max_items:
            self._cache.clear()  # rare: a bound on memory, not a policy
            missing = list(dict.fromkeys(texts))
        if missing:
            for text, vector in zip(missing, self.encoder.encode(missing), strict=True):
                self._cache[text] = vector
        if not texts:
            return self.encoder.encode([])
        return np.stack([self._cache[t] for t in texts])  # (N, d)


def parse_weights(specs: Sequence[str]) -> dict[str, float]:
    """CLI reward specs ("name=weight" or "name", weight 1) as weights; empty: the defaults."""
    if not specs:
        return dict(DEFAULT_WEIGHTS)
    weights: dict[str, float] = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        try:
            weights[name.strip()] = float(value) if value else 1.0
        except ValueError:
            raise ValueError(
                f"reward {spec!r}: the weight is not a number (write name=0.5)"
            ) from None
    return weights


__all__ = [
    "DEFAULT_WEIGHTS",
    "ERROR_KINDS",
    "TAU_GRID",
    "TERMS",
    "CachedEncoder",
    "RewardSet",
    "Scores",
    "Transitions",
    "choose_tau",
    "combine",
    "error_kinds",
    "parse_weights",
]
