"""Transition metrics: how close a predicted observation (or state) is to the real one.

Every metric is a pure batched function over parallel sequences that returns one score per
item, so the same function serves as an eval metric and as a training reward. A predicted
item may be `None` (the model's output could not be read): it scores 0.0 wherever the
metric applies. A metric that does not apply to an item (error flags of a text
observation, the state of an env that has none) scores `None`.

    from simworld.eval.metrics import exact_match, field_f1, json_canonical_match
    real = [step.observation for step in steps]
    volatile = [episode.volatile] * len(steps)
    exact_match(predicted, real)                      # [1.0, 0.0, ...]
    json_canonical_match(predicted, real, volatile)   # key order / whitespace do not count
    field_f1(predicted, real, volatile)               # partial credit per JSON leaf

Volatile fields (`Episode.volatile`: ids, tokens, clock readings) are compared by JSON type
and format, never by value: `canonical` replaces such a value by a marker, and on the
predicted side the marker also says whether the value fullmatches the field's `pattern`.
Paths of flattened JSON are JSON pointers (`/a/b/0`; `""` is the root); observation
results are prefixed with `results/<i>` (or `text` for a text observation).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simworld.data.canonical import (
    by_key,
    canonical,
    dumps,
    normalize,
    observation_text,
    parse,
)
from simworld.data.output_schemas import schema_validator
from simworld.data.records import (
    JSON,
    Action,
    Observation,
    TextObservation,
    ToolCallsAction,
    ToolResultsObservation,
    VolatileField,
)
from simworld.eval.embedding import Encoder

Predicted = Observation | None
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MAX_TOKENS = 512  # per side, for ROUGE-L's O(n·m) LCS


@dataclass(frozen=True)
class FieldScore:
    precision: float
    recall: float
    f1: float


# ---------------------------------------------------------------------------- canonical form


# ---------------------------------------------------------------------------- whole-observation


def _check_lengths(*sequences: Sequence[Any]) -> int:
    lengths = {len(s) for s in sequences}
    if len(lengths) != 1:
        raise ValueError(f"batched metric: sequences of different lengths {sorted(lengths)}")
    return lengths.pop()


_Key = Callable[[str, Sequence[VolatileField], bool], str]  # (text, volatile, reference)


def _stripped(text: str, volatile: Sequence[VolatileField], reference: bool) -> str:
    return text.strip()


def _canonical(text: str, volatile: Sequence[VolatileField], reference: bool) -> str:
    return canonical(text, volatile, reference=reference)


def _same(pred: Predicted, real: Observation, key: _Key, vol: Sequence[VolatileField]) -> float:
    if isinstance(real, TextObservation):
        return float(
            isinstance(pred, TextObservation)
            and key(pred.text, vol, False) == key(real.text, vol, True)
        )
    if not isinstance(pred, ToolResultsObservation) or len(pred.results) != len(real.results):
        return 0.0
    return float(
        all(
            p.is_error == r.is_error and key(p.text, vol, False) == key(r.text, vol, True)
            for p, r in zip(pred.results, real.results, strict=True)
        )
    )


def exact_match(predicted: Sequence[Predicted], real: Sequence[Observation]) -> list[float]:
    """1.0 when the prediction has the real kind, result count, error flags and texts
    (compared after `.strip()`)."""
    _check_lengths(predicted, real)
    return [_same(p, r, _stripped, ()) for p, r in zip(predicted, real, strict=True)]


def json_canonical_match(
    predicted: Sequence[Predicted],
    real: Sequence[Observation],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[float]:
    """Like `exact_match`, comparing `canonical` forms (key order, whitespace and the
    values of well-formed volatile fields do not count)."""
    _check_lengths(predicted, real, volatile)
    return [_same(p, r, _canonical, v) for p, r, v in zip(predicted, real, volatile, strict=True)]


def error_flag_accuracy(
    predicted: Sequence[Predicted], real: Sequence[Observation]
) -> list[float | None]:
    """1.0 when the predicted results carry the real error flags, result by result; None
    for a text observation (it has no error flag)."""
    _check_lengths(predicted, real)
    return [
        None
        if isinstance(obs, TextObservation)
        else float(
            isinstance(pred, ToolResultsObservation)
            and [r.is_error for r in pred.results] == [r.is_error for r in obs.results]
        )
        for pred, obs in zip(predicted, real, strict=True)
    ]


# ---------------------------------------------------------------------------- field level


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")  # RFC 6901


def _leaves(value: JSON, prefix: str = "") -> dict[str, str]:
    """(JSON pointer → canonical leaf) of a normalized value; an empty object or array is
    itself a leaf, so every value has at least one."""
    if isinstance(value, dict) and value:
        items = [(_escape(k), v) for k, v in value.items()]
    elif isinstance(value, list) and value:
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix: dumps(value)}
    out: dict[str, str] = {}
    for key, item in items:
        out.update(_leaves(item, f"{prefix}/{key}"))
    return out


def _text_leaves(
    text: str, fields: Mapping[str, VolatileField], reference: bool, prefix: str
) -> dict[str, str]:
    ok, value = parse(text)
    if not ok:
        return {prefix: text.strip()}
    return _leaves(normalize(value, fields, reference), prefix)


def _observation_leaves(
    obs: Observation, fields: Mapping[str, VolatileField], reference: bool
) -> dict[str, str]:
    if isinstance(obs, TextObservation):
        return _text_leaves(obs.text, fields, reference, "text")
    out: dict[str, str] = {}
    for i, result in enumerate(obs.results):
        out.update(_text_leaves(result.text, fields, reference, f"results/{i}"))
    return out


def _prf(pred: Mapping[str, str], real: Mapping[str, str]) -> FieldScore:
    if not pred and not real:
        return FieldScore(1.0, 1.0, 1.0)
    matched = sum(1 for path, value in pred.items() if real.get(path) == value)
    precision = matched / len(pred) if pred else 0.0
    recall = matched / len(real) if real else 0.0
    f1 = 2 * precision * recall / (precision + recall) if matched else 0.0
    return FieldScore(precision, recall, f1)


def field_scores(
    predicted: Sequence[Predicted],
    real: Sequence[Observation],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[FieldScore]:
    """Precision, recall and F1 of the predicted (path, canonical leaf) pairs against the
    real ones. A non-JSON result text is one leaf (its stripped text) at `results/<i>`."""
    _check_lengths(predicted, real, volatile)
    scores = []
    for pred, obs, vol in zip(predicted, real, volatile, strict=True):
        if pred is None:
            scores.append(FieldScore(0.0, 0.0, 0.0))
            continue
        fields = by_key(vol)
        pairs = _observation_leaves(pred, fields, reference=False)
        scores.append(_prf(pairs, _observation_leaves(obs, fields, reference=True)))
    return scores


def field_f1(
    predicted: Sequence[Predicted],
    real: Sequence[Observation],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[float]:
    """The F1 of `field_scores`."""
    return [score.f1 for score in field_scores(predicted, real, volatile)]


# ---------------------------------------------------------------------------- states


def _state_pairs(
    pred: JSON, real: JSON, volatile: Sequence[VolatileField]
) -> tuple[dict[str, str], dict[str, str]]:
    fields = by_key(volatile)
    return _leaves(normalize(pred, fields, False)), _leaves(normalize(real, fields, True))


def _per_state(
    predicted_states: Sequence[JSON | None],
    real_states: Sequence[JSON],
    volatile: Sequence[Sequence[VolatileField]],
    score: Callable[[JSON, JSON, Sequence[VolatileField]], float],
) -> list[float | None]:
    """`score` per item; None without a real state, 0.0 for an unreadable prediction."""
    _check_lengths(predicted_states, real_states, volatile)
    return [
        None if real is None else 0.0 if pred is None else score(pred, real, vol)
        for pred, real, vol in zip(predicted_states, real_states, volatile, strict=True)
    ]


def _whole_state(pred: JSON, real: JSON, volatile: Sequence[VolatileField]) -> float:
    fields = by_key(volatile)
    return float(dumps(normalize(pred, fields, False)) == dumps(normalize(real, fields, True)))


def _state_fields(pred: JSON, real: JSON, volatile: Sequence[VolatileField]) -> float:
    pred_leaves, real_leaves = _state_pairs(pred, real, volatile)
    matched = sum(1 for path, value in real_leaves.items() if pred_leaves.get(path) == value)
    return matched / max(len(real_leaves), len(pred_leaves))


def state_match(
    predicted_states: Sequence[JSON | None],
    real_states: Sequence[JSON],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[float | None]:
    """1.0 when the whole predicted state equals the real one canonically; None when the
    real state is None (the env has no state)."""
    return _per_state(predicted_states, real_states, volatile, _whole_state)


def state_field_accuracy(
    predicted_states: Sequence[JSON | None],
    real_states: Sequence[JSON],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[float | None]:
    """Leaves of the real state the prediction has with an equal value, over the larger of
    the two leaf counts (so extra predicted leaves cost too); None without a real state."""
    return _per_state(predicted_states, real_states, volatile, _state_fields)


def state_field_errors(
    predicted_states: Sequence[JSON | None],
    real_states: Sequence[JSON],
    volatile: Sequence[Sequence[VolatileField]],
) -> list[list[str]]:
    """The sorted leaf paths whose values differ (missing on either side included); every
    real leaf when the prediction is unreadable; [] without a real state."""
    _check_lengths(predicted_states, real_states, volatile)
    errors: list[list[str]] = []
    for pred, real, vol in zip(predicted_states, real_states, volatile, strict=True):
        if real is None:
            errors.append([])
            continue
        if pred is None:
            errors.append(sorted(_leaves(normalize(real, by_key(vol), True))))
            continue
        a, b = _state_pairs(pred, real, vol)
        errors.append(sorted(path for path in a.keys() | b.keys() if a.get(path) != b.get(path)))
    return errors


# ---------------------------------------------------------------------------- schemas


def _schema_score(pred: Predicted, action: Action, schemas: Mapping[str, JSON]) -> float | None:
    if not isinstance(action, ToolCallsAction):
        return None
    checked = [(j, schemas[c.name]) for j, c in enumerate(action.calls) if c.name in schemas]
    if not checked:
        return None
    if not isinstance(pred, ToolResultsObservation):
        return 0.0  # unreadable, or text where tool results were due
    valid = 0
    for j, schema in checked:
        if j >= len(pred.results):
            continue  # a missing result is an invalid one
        if pred.results[j].is_error:
            valid += 1
            continue
        ok, value = parse(pred.results[j].text)
        valid += ok and schema_validator(schema).is_valid(value)
    return valid / len(checked)


def schema_validity(
    predicted: Sequence[Predicted],
    actions: Sequence[Action],
    schemas: Sequence[Mapping[str, JSON]],
) -> list[float | None]:
    """Valid results over checked ones, per item. A result is checked when its call (same
    position in the action) names a tool with a schema in `schemas[i]` (tool name → output
    JSON Schema); it is valid when it is an error result or its text parses as JSON that
    validates. A missing result is invalid; a text prediction for a tool-call action scores
    0.0. None when the action is text or no called tool has a schema."""
    _check_lengths(predicted, actions, schemas)
    return [_schema_score(p, a, s) for p, a, s in zip(predicted, actions, schemas, strict=True)]


# ---------------------------------------------------------------------------- text similarity


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def _rouge(pred: Observation, real: Observation) -> float:
    a = _TOKEN.findall(observation_text(pred))[:_MAX_TOKENS]
    b = _TOKEN.findall(observation_text(real))[:_MAX_TOKENS]
    if not a and not b:
        return 1.0
    return 2 * _lcs_length(a, b) / (len(a) + len(b))  # = 2PR/(P+R), P = lcs/|a|, R = lcs/|b|


def rouge_l(predicted: Sequence[Predicted], real: Sequence[Observation]) -> list[float]:
    """ROUGE-L F1 (beta=1) over the tokens (`\\w+|[^\\w\\s]`, case kept) of the
    `observation_text`s. Only the first 512 tokens of each side count (the LCS is O(n·m));
    empty vs empty is 1.0."""
    _check_lengths(predicted, real)
    return [0.0 if p is None else _rouge(p, r) for p, r in zip(predicted, real, strict=True)]


def embedding_cosine(
    predicted: Sequence[Predicted], real: Sequence[Observation], encoder: Encoder
) -> list[float]:
    """Cosine similarity of the embeddings of the two `observation_text`s (one `encode`
    call for the whole batch); an unreadable prediction scores 0.0."""
    n = _check_lengths(predicted, real)
    readable = [i for i in range(n) if predicted[i] is not None]
    scores = [0.0] * n
    if not readable:
        return scores
    texts = [observation_text(p) for i in readable if (p := predicted[i]) is not None]
    vectors = encoder.encode(texts + [observation_text(real[i]) for i in readable])  # (2k, d)
    cosines = (vectors[: len(readable)] * vectors[len(readable) :]).sum(axis=1)  # (k,)
    for i, cosine in zip(readable, cosines, strict=True):
        scores[i] = float(cosine)
    return scores


def thresholded(scores: Sequence[float | None], tau: float) -> list[float | None]:
    """1.0 where a score reaches `tau`, 0.0 below it, None kept."""
    return [None if s is None else float(s >= tau) for s in scores]


__all__ = [
    "FieldScore",
    "canonical",
    "embedding_cosine",
    "error_flag_accuracy",
    "exact_match",
    "field_f1",
    "field_scores",
    "json_canonical_match",
    "observation_text",
    "rouge_l",
    "schema_validity",
    "state_field_accuracy",
    "state_field_errors",
    "state_match",
    "thresholded",
]
