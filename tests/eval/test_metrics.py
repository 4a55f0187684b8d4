"""Transition metrics on hand-made pairs with hand-computed scores, plus invariants on the
bundled real BFCL data (a real observation scored against itself is perfect) and one run of
the real all-MiniLM-L6-v2 encoder."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest
from numpy.typing import NDArray

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    Observation,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    VolatileField,
)
from simworld.eval.embedding import load_encoder
from simworld.eval.metrics import (
    FieldScore,
    canonical,
    embedding_cosine,
    error_flag_accuracy,
    exact_match,
    field_f1,
    field_scores,
    json_canonical_match,
    observation_text,
    rouge_l,
    schema_validity,
    state_field_accuracy,
    state_field_errors,
    state_match,
    thresholded,
)

NEW_ID = VolatileField("new_id", "id", r"\d{5}")
STAMP = VolatileField("timestamp", "timestamp", r'"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"')


def obs(*texts: str, errors: Sequence[bool] = ()) -> ToolResultsObservation:
    flags = list(errors) or [False] * len(texts)
    return ToolResultsObservation(
        [
            ToolResult(f"c{i}", t, is_error=e)
            for i, (t, e) in enumerate(zip(texts, flags, strict=True))
        ]
    )


def calls(*names: str) -> ToolCallsAction:
    return ToolCallsAction([ToolCall(f"c{i}", n, {}, "{}") for i, n in enumerate(names)])


def test_exact_versus_canonical_on_key_order_whitespace_and_integral_floats() -> None:
    real = [obs('{"a": 1, "b": [1, 2]}')] * 3
    predicted: list[Observation | None] = [
        obs('{"b":[1,2],"a":1}'),
        obs(' {"a": 1.0,\n "b": [1, 2]}\n'),
        obs('{"a": 1, "b": [2, 1]}'),
    ]
    assert exact_match(predicted, real) == [0.0, 0.0, 0.0]
    assert json_canonical_match(predicted, real, [[]] * 3) == [1.0, 1.0, 0.0]
    assert canonical('{"b": "é", "a": 1.0}') == '{"a":1,"b":"é"}'
    assert exact_match([obs('{"a": 1, "b": [1, 2]}  ')], real[:1]) == [1.0]


def test_plain_strings_compare_trimmed() -> None:
    real = [obs("None"), obs("{'result': mpf('1.3027')}"), TextObservation("  (Right)\nSFH\n")]
    predicted: list[Observation | None] = [
        obs(" None\n"),
        obs("{'result': mpf('1.3027')} "),
        TextObservation("(Right)\nSFH"),
    ]
    assert exact_match(predicted, real) == [1.0, 1.0, 1.0]
    assert json_canonical_match(predicted, real, [[]] * 3) == [1.0, 1.0, 1.0]
    assert canonical("  not json ") == "not json"


def test_volatile_values_compare_by_type_and_format() -> None:
    real = obs('{"message_id": {"new_id": 67410}, "sent": true}')
    assert canonical(real.results[0].text, [NEW_ID]) == (
        '{"message_id":{"new_id":"<volatile:number>"},"sent":true}'
    )
    predicted: list[Observation | None] = [
        obs('{"sent": true, "message_id": {"new_id": 12345}}'),  # another draw: same
        obs('{"sent": true, "message_id": {"new_id": 123}}'),  # wrong format
        obs('{"sent": true, "message_id": {"new_id": "12345"}}'),  # wrong type
    ]
    assert json_canonical_match(predicted, [real] * 3, [[NEW_ID]] * 3) == [1.0, 0.0, 0.0]
    assert json_canonical_match(predicted[:1], [real], [[]]) == [0.0]  # not volatile: by value
    # the real side is never checked against the pattern; a predicted string value is
    stamp = '{"log": [{"timestamp": "2024-01-01 10:00:00"}]}'
    assert canonical(stamp, [STAMP], reference=False) == canonical(
        '{"log": [{"timestamp": "x"}]}', [STAMP]
    )
    bad = canonical('{"log": [{"timestamp": "yesterday"}]}', [STAMP], reference=False)
    assert bad == '{"log":[{"timestamp":"<volatile:string:malformed>"}]}'


def test_unreadable_prediction_scores_zero_where_a_metric_applies() -> None:
    real = obs('{"balance": 3}')
    none: list[Observation | None] = [None]
    assert exact_match(none, [real]) == [0.0]
    assert json_canonical_match(none, [real], [[]]) == [0.0]
    assert field_scores(none, [real], [[]]) == [FieldScore(0.0, 0.0, 0.0)]
    assert error_flag_accuracy(none, [real]) == [0.0]
    assert error_flag_accuracy(none, [TextObservation("x")]) == [None]
    assert rouge_l(none, [real]) == [0.0]
    assert schema_validity(none, [calls("get")], [{"get": {"type": "object"}}]) == [0.0]
    assert state_match([None], [{"a": 1}], [[]]) == [0.0]
    assert state_field_accuracy([None], [{"a": 1}], [[]]) == [0.0]


def test_kind_mismatch_scores_zero() -> None:
    predicted: list[Observation | None] = [TextObservation("None")]
    assert exact_match(predicted, [obs("None")]) == [0.0]
    assert json_canonical_match(predicted, [obs("None")], [[]]) == [0.0]
    assert exact_match([obs("None", "None")], [obs("None")]) == [0.0]  # result count


def test_field_scores_on_a_hand_worked_pair() -> None:
    real = obs('{"balance": 10, "owner": {"name": "ann", "tags": ["a", "b"]}}')
    pred = obs('{"owner": {"tags": ["a"], "name": "bob"}, "balance": 10.0}')
    # real leaves: results/0/balance=10, /owner/name="ann", /owner/tags/0="a", /tags/1="b" (4)
    # predicted:   results/0/balance=10 ok, /owner/name="bob" no, /owner/tags/0="a" ok    (3)
    # P = 2/3, R = 2/4, F1 = 2·(2/3)(1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7
    (score,) = field_scores([pred], [real], [[]])
    assert (score.precision, score.recall, score.f1) == pytest.approx((2 / 3, 1 / 2, 4 / 7))
    # two results, one plain text: "None" matches after trimming, x differs -> 1/2 each way
    two = field_scores([obs("None ", '{"x": 2}')], [obs("None", '{"x": 1}')], [[]])
    assert two == [FieldScore(0.5, 0.5, 0.5)]
    assert field_f1([obs()], [obs()], [[]]) == [1.0]  # no results on either side
    assert field_f1([obs("{}")], [obs("[]")], [[]]) == [0.0]  # empty containers are leaves
    volatile = field_f1(
        [obs('{"new_id": 55555, "ok": 1}')], [obs('{"new_id": 1, "ok": 1}')], [[NEW_ID]]
    )
    assert volatile == [1.0]


def test_error_flags() -> None:
    real = obs("{}", "Error: no such file", errors=[False, True])
    predicted: list[Observation | None] = [
        obs("{}", "Error: other text", errors=[False, True]),
        obs("{}", "{}"),
        obs("{}", errors=[False]),
        TextObservation("{}"),
    ]
    assert error_flag_accuracy(predicted, [real] * 4) == [1.0, 0.0, 0.0, 0.0]
    assert exact_match(predicted[:1], [real]) == [0.0]  # the texts differ


def test_state_metrics() -> None:
    real = {"board": ["SF", "FH"], "position": 0, "size": 2}
    preds = [
        {"size": 2, "position": 0, "board": ["SF", "FH"]},  # reordered: equal
        {"board": ["SF", "FH"], "position": 1, "size": 2},  # 3 of 4 leaves: 3/4
        {"board": ["SF", "FH"], "position": 0, "size": 2, "done": False},  # 4 of max(4, 5)
        None,
    ]
    vol: list[list[VolatileField]] = [[]] * 5
    assert state_match([*preds, {}], [real] * 4 + [None], vol) == [1.0, 0.0, 0.0, 0.0, None]
    accuracy = state_field_accuracy([*preds, {}], [real] * 4 + [None], vol)
    assert accuracy == [1.0, 0.75, 0.8, 0.0, None]
    errors = state_field_errors([*preds, {}], [real] * 4 + [None], vol)
    assert errors == [
        [],
        ["/position"],
        ["/done"],
        ["/board/0", "/board/1", "/position", "/size"],
        [],
    ]


def test_state_volatile_and_pointer_escaping() -> None:
    real = {"history": [{"timestamp": "2024-01-01 10:00:00", "amount": 5}], "a/b": 1}
    pred = {"history": [{"timestamp": "2025-12-31 23:59:59", "amount": 5}], "a/b": 2}
    assert state_match([pred], [real], [[STAMP]]) == [0.0]
    assert state_field_errors([pred], [real], [[STAMP]]) == [["/a~1b"]]
    pred["a/b"] = 1
    assert state_match([pred], [real], [[STAMP]]) == [1.0]
    assert state_match([pred], [real], [[]]) == [0.0]  # by value when not volatile


def test_schema_validity() -> None:
    schemas = {"get_balance": {"type": "object", "required": ["balance"],
                               "properties": {"balance": {"type": "number"}}}}  # fmt: skip
    two = calls("get_balance", "log")  # `log` has no schema: never checked
    both = calls("get_balance", "get_balance")
    cases: list[tuple[Observation | None, ToolCallsAction | TextAction, float | None]] = [
        (obs('{"balance": 3}', "whatever"), two, 1.0),
        (obs('{"balance": "three"}', "whatever"), two, 0.0),
        (obs("not json", "x"), two, 0.0),
        (obs("Error: denied", "x", errors=[True, False]), two, 1.0),
        (obs('{"balance": 3}', "{}"), both, 0.5),
        (obs('{"balance": 3}'), both, 0.5),  # the second result is missing
        (obs("{}"), calls("log"), None),  # no called tool has a schema
        (TextObservation("x"), TextAction("LEFT"), None),
    ]
    predicted = [c[0] for c in cases]
    scores = schema_validity(predicted, [c[1] for c in cases], [schemas] * len(cases))
    assert scores == [c[2] for c in cases]


def test_rouge_l_on_a_hand_computed_pair() -> None:
    # tokens: the cat sat on the mat (6) / the cat is on the mat . (7); LCS "the cat on the
    # mat" = 5; P = 5/6, R = 5/7, F1 = 2PR/(P+R) = 2·5/(6+7) = 10/13
    scores = rouge_l(
        [TextObservation("the cat sat on the mat")], [TextObservation("the cat is on the mat.")]
    )
    assert scores == [pytest.approx(10 / 13)]
    assert rouge_l([obs("a", "b")], [TextObservation("a\nb")]) == [1.0]  # on observation_text
    assert rouge_l([TextObservation("")], [TextObservation(" ")]) == [1.0]
    assert rouge_l([TextObservation("x")], [TextObservation("")]) == [0.0]
    assert rouge_l([TextObservation("A")], [TextObservation("a")]) == [0.0]  # case kept


def test_thresholded_and_observation_text() -> None:
    assert thresholded([0.2, 0.5, None, 0.9], 0.5) == [0.0, 1.0, None, 1.0]
    assert observation_text(obs("a", "b")) == "a\nb"
    assert observation_text(TextObservation(" t ")) == " t "


class FakeEncoder:
    """Fixed unit vectors per text; records every batch it is given."""

    VECTORS: ClassVar[dict[str, list[float]]] = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [0.6, 0.8]}

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.batches.append(list(texts))
        return np.array([self.VECTORS[t] for t in texts], dtype=np.float32)


def test_embedding_cosine_with_a_fake_encoder() -> None:
    encoder = FakeEncoder()
    predicted: list[Observation | None] = [TextObservation("a"), None, obs("c")]
    real = [TextObservation("c"), TextObservation("b"), obs("a")]
    scores = embedding_cosine(predicted, real, encoder)
    assert scores == [pytest.approx(0.6), 0.0, pytest.approx(0.6)]
    assert encoder.batches == [["a", "c", "c", "a"]]  # one call, readable items only
    assert embedding_cosine([None], [TextObservation("a")], encoder) == [0.0]
    assert len(encoder.batches) == 1


def test_embedding_cosine_with_the_real_encoder() -> None:
    real = [TextObservation("The file report.pdf was moved to the temp folder.")] * 2
    predicted: list[Observation | None] = [
        TextObservation("report.pdf has been moved into the folder temp."),
        TextObservation("The current outside temperature is 23 degrees."),
    ]
    paraphrase, unrelated = embedding_cosine(predicted, real, load_encoder())
    assert paraphrase > unrelated + 0.2
    assert load_encoder() is load_encoder()  # cached per device


def test_real_bfcl_observations_score_perfectly_against_themselves() -> None:
    steps = [(e, s) for e in load_bundled("test", env="bfcl") for s in e.steps]
    real = [s.observation for _, s in steps]
    vol = [e.volatile for e, _ in steps]
    assert set(json_canonical_match(real, real, vol)) == {1.0}
    assert set(field_f1(real, real, vol)) == {1.0}
    assert set(error_flag_accuracy(real, real)) == {1.0}
    states = [s.next_state for _, s in steps]
    assert set(state_match(states, states, vol)) == {1.0}
    # copy-last baseline: the previous observation is not the next one
    assert sum(exact_match(real[:-1], real[1:])) < len(real) - 1


def test_real_volatile_redraw_still_matches() -> None:
    steps = [
        (e, s)
        for e in load_bundled("test", env="bfcl")
        for s in e.steps
        if isinstance(s.observation, ToolResultsObservation)
        and any('"new_id"' in r.text for r in s.observation.results)
    ]
    assert steps, "the test split has send_message results"
    episode, step = steps[0]
    assert isinstance(step.observation, ToolResultsObservation)
    result = step.observation.results[0]
    value = json.loads(result.text)
    value["message_id"]["new_id"] = 99999 if value["message_id"]["new_id"] != 99999 else 11111
    redraw = ToolResultsObservation([ToolResult(result.call_id, json.dumps(value))])
    assert exact_match([redraw], [step.observation]) == [0.0]
    assert json_canonical_match([redraw], [step.observation], [episode.volatile]) == [1.0]
