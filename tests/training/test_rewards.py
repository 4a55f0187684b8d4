"""GRPO rewards on known pairs: a real BFCL step predicted right, and wrong in each way the
error kinds name; the weighted composition over the terms that apply; the choice of τ;
the embedding cache."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from simworld.data.bundle import load_bundled
from simworld.data.records import Episode, ToolResult, ToolResultsObservation
from simworld.training.rewards import (
    DEFAULT_WEIGHTS,
    CachedEncoder,
    RewardSet,
    Transitions,
    choose_tau,
    combine,
    parse_weights,
)
from simworld.worldmodel.patch import diff
from simworld.worldmodel.world_model import Prediction

CD_SCHEMA = {
    "type": "object",
    "properties": {"current_working_directory": {"type": "string"}},
    "required": ["current_working_directory"],
}
SCHEMAS = {"bfcl": {"cd": CD_SCHEMA}}


class TableEncoder:
    """Fixed unit vectors per text (2-D, angle in the table); counts the texts it encodes."""

    def __init__(self, angles: dict[str, float]) -> None:
        self.angles = angles
        self.encoded: list[str] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.encoded.extend(texts)
        a = np.array([self.angles.get(t, 0.0) for t in texts])
        return np.stack([np.cos(a), np.sin(a)], axis=1).astype(np.float32)


@pytest.fixture(scope="module")
def cd_step() -> Episode:
    """A BFCL episode whose first step is `cd` into "document", with real states."""
    episode = load_bundled("test", env="bfcl")[0]
    step = episode.steps[0]
    assert step.action.calls[0].name == "cd"  # type: ignore[union-attr]
    assert step.state is not None and step.state != step.next_state
    return episode


def _result(text: str, is_error: bool = False) -> ToolResultsObservation:
    return ToolResultsObservation([ToolResult("call_0_0", text, None, is_error)])


def _predictions(episode: Episode) -> dict[str, Prediction]:
    step = episode.steps[0]
    assert step.state is not None and step.next_state is not None
    patch = diff(step.state, step.next_state)
    real_text = '{"current_working_directory": "document"}'
    return {
        "right": Prediction(step.observation, patch, ""),
        "reordered": Prediction(_result('{ "current_working_directory":"document" }'), patch, ""),
        "content": Prediction(_result('{"current_working_directory": "docs"}'), patch, ""),
        "schema": Prediction(_result('{"cwd": "document"}'), patch, ""),
        "error_flag": Prediction(_result(real_text, is_error=True), patch, ""),
        "state": Prediction(step.observation, None, ""),
        "unreadable": Prediction(None, None, "garbled", ["no result for call 'call_0_0'"]),
    }


def test_each_kind_of_wrong_prediction_is_named_and_scored(cd_step: Episode) -> None:
    preds = _predictions(cd_step)
    batch = Transitions([(cd_step, 0)] * len(preds), list(preds.values()), SCHEMAS)
    weights = {"json_canonical": 1.0, "state_match": 1.0, "schema_valid": 1.0}
    scores = RewardSet(weights).score(batch)
    by_name = dict(
        zip(preds, zip(scores.kinds, scores.correct, scores.total, strict=True), strict=True)
    )
    assert by_name["right"] == (None, True, 1.0)
    assert by_name["reordered"] == (None, True, 1.0)  # key order and spacing do not count
    assert by_name["content"] == ("content", False, pytest.approx(2 / 3))
    assert by_name["schema"] == ("schema", False, pytest.approx(1 / 3))
    # an error result counts as schema-valid, so only the match is lost
    assert by_name["error_flag"] == ("error_flag", False, pytest.approx(2 / 3))
    assert by_name["state"] == ("state", False, pytest.approx(2 / 3))
    assert by_name["unreadable"] == ("unreadable", False, 0.0)


def test_binarized_cosine_at_tau(cd_step: Episode) -> None:
    real = cd_step.steps[0].observation
    near, far = '{"current_working_directory": "doc"}', '{"error": "no such folder"}'
    real_text = '{"current_working_directory": "document"}'
    encoder = TableEncoder({real_text: 0.0, near: 0.2, far: 1.2})  # cos 0.980, 0.362
    preds = [Prediction(real, None, ""), Prediction(_result(near), None, ""),
             Prediction(_result(far), None, "")]  # fmt: skip
    batch = Transitions([(cd_step, 0)] * 3, preds, SCHEMAS)
    scores = RewardSet({"cosine_tau": 1.0}, encoder, tau=0.95).score(batch)
    assert scores.columns["cosine"] == pytest.approx([1.0, np.cos(0.2), np.cos(1.2)], abs=1e-6)
    assert scores.total == [1.0, 1.0, 0.0]
    continuous = RewardSet({"cosine": 1.0}, encoder).score(batch)
    assert continuous.total == pytest.approx([1.0, np.cos(0.2), np.cos(1.2)], abs=1e-6)


def test_the_total_is_the_weighted_mean_of_the_terms_that_apply() -> None:
    columns = {"a": [1.0, None, None], "b": [0.0, 0.5, None]}
    assert combine(columns, {"a": 3.0, "b": 1.0}) == [0.75, 0.5, 0.0]


def test_tau_is_where_the_threshold_agrees_best_with_the_match() -> None:
    cosines = [0.99, 0.97, 0.80, 0.95]
    matches = [1.0, 1.0, 0.0, 0.0]
    assert choose_tau(cosines, matches) == (0.955, 1.0)  # the smallest τ in (0.95, 0.97]
    # no τ separates them perfectly: 0.9 gets 3 of 4 right; ties go to the smallest τ
    tau, agreement = choose_tau([0.99, 0.85, 0.95], [1.0, 1.0, 0.0])
    assert (tau, agreement) == (0.5, pytest.approx(2 / 3))
    tau, agreement = choose_tau([0.99, 0.85, 0.95, 0.7], [1.0, 1.0, 0.0, 0.0])
    assert (tau, agreement) == (0.705, 0.75)
    with pytest.raises(ValueError, match="paired"):
        choose_tau([0.5], [])


def test_the_cache_encodes_each_text_once() -> None:
    inner = TableEncoder({"a": 0.0, "b": 1.0})
    cached = CachedEncoder(inner)
    first = cached.encode(["a", "b", "a"])
    second = cached.encode(["b", "a"])
    assert inner.encoded == ["a", "b"]
    np.testing.assert_allclose(second, first[[1, 0]])


def test_bad_reward_sets_say_the_fix() -> None:
    with pytest.raises(ValueError, match="unknown reward term"):
        RewardSet({"bleu": 1.0})
    with pytest.raises(ValueError, match="sentence encoder"):
        RewardSet({"cosine_tau": 1.0})
    with pytest.raises(ValueError, match="> 0"):
        RewardSet({"json_canonical": 0.0})
    assert parse_weights([]) == DEFAULT_WEIGHTS
    assert parse_weights(["cosine=0.5", "json_canonical"]) == {"cosine": 0.5, "json_canonical": 1.0}
    with pytest.raises(ValueError, match="not a number"):
        parse_weights(["cosine=high"])
