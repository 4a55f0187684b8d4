"""SampleMean: greedy structure, float leaves averaged over sampled predictions; on a
scripted model (to pin the arithmetic) and on a real tiny checkpoint."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import ToolResult, ToolResultsObservation
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.sample_mean import SampleMean
from simworld.worldmodel.world_model import Prediction, load_world_model


def _prediction(first: str, second: str, error: bool = False) -> Prediction:
    results = [
        ToolResult("c1", first, _json(first), error),
        ToolResult("c2", second, _json(second), False),
    ]
    return Prediction(ToolResultsObservation(results), [{"op": "test"}], f"{first}\n{second}")


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


class Scripted:
    """Greedy: cv_mean 0.9123 (4 decimals), folds 5, a non-JSON second result. Sampled row
    with seed s: cv_mean 0.5 + s/100 with folds 3, except seed 2 (an error result) and
    seed 3 (cv_mean missing)."""

    budget = Budget(total=4096)

    def __init__(self) -> None:
        self.configs: list[GenerationConfig] = []

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        self.configs.append(cfg or GenerationConfig())
        if cfg is None or not cfg.do_sample:
            greedy = '{"cv_mean": 0.9123, "cv_std": 0.01, "folds": 5, "nested": [1.5, "x"]}'
            return [_prediction(greedy, "not json") for _ in batch]
        out = []
        for row in range(len(batch)):
            seed = cfg.row_seed(row)
            if seed == 2:
                out.append(_prediction('{"cv_mean": 0.1}', "x", error=True))
            elif seed == 3:
                out.append(_prediction('{"cv_std": 0.5}', "x"))
            else:
                text = json.dumps(
                    {"cv_mean": 0.5 + seed / 100, "cv_std": 0.01, "folds": 3, "nested": [2.5]}
                )
                out.append(_prediction(text, "y"))
        return out


def test_floats_are_averaged_over_the_samples_that_have_them() -> None:
    model = Scripted()
    wm = SampleMean(model, samples=5, seed=0)
    ctx = object()
    (p,) = wm.predict([ctx], GenerationConfig(max_new_tokens=7))
    first, second = p.observation.results  # type: ignore[union-attr]
    # seeds 0..4: seed 2 is an error (not a peer), seed 3 has no cv_mean
    assert first.structured["cv_mean"] == pytest.approx((0.50 + 0.51 + 0.54) / 3, abs=1e-4)
    assert first.structured["cv_mean"] == round((0.50 + 0.51 + 0.54) / 3, 4)
    # cv_std: seeds 0, 1, 4 (0.01) and 3 (0.5); two decimals, the most any of them wrote
    assert first.structured["cv_std"] == round((0.01 * 3 + 0.5) / 4, 2) == 0.13
    assert first.structured["folds"] == 5  # an int keeps greedy's value
    assert first.structured["nested"] == [2.5, "x"]  # list leaves too, strings kept
    assert json.loads(first.text) == first.structured and not first.is_error
    assert second.text == "not json" and second.structured is None
    assert p.patch == [{"op": "test"}]  # greedy's
    greedy_cfg, sampled_cfg = model.configs
    assert not greedy_cfg.do_sample and greedy_cfg.max_new_tokens == 7
    assert sampled_cfg.do_sample and sampled_cfg.max_new_tokens == 7
    assert sampled_cfg.row_seeds == (0, 1, 2, 3, 4)


def test_each_context_gets_its_own_seeds_whatever_the_batch() -> None:
    model = Scripted()
    alone = SampleMean(model, samples=2, seed=10).predict([object()])
    both = SampleMean(model, samples=2, seed=10).predict([object(), object()])
    assert model.configs[-1].row_seeds == (10, 11, 12, 13)
    assert both[0].observation == alone[0].observation
    assert both[1].observation != both[0].observation  # seeds 12, 13


class Shifted(Scripted):
    """Scripted with every cv_mean 0.1 higher: another training, as an ensemble member."""

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        out = []
        for p in super().predict(batch, cfg):
            first, second = p.observation.results  # type: ignore[union-attr]
            value = dict(first.structured)  # type: ignore[arg-type]
            if "cv_mean" in value:
                value["cv_mean"] = round(value["cv_mean"] + 0.1, 4)
            out.append(_prediction(json.dumps(value), second.text, first.is_error))
        return out


def test_an_ensemble_averages_every_members_samples() -> None:
    first, member = Scripted(), Shifted()
    (p,) = SampleMean(first, samples=2, seed=0, members=[member]).predict([object()])
    result = p.observation.results[0]  # type: ignore[union-attr]
    # seeds 0 and 1 of each: 0.50, 0.51 and 0.60, 0.61
    assert result.structured["cv_mean"] == round((0.50 + 0.51 + 0.60 + 0.61) / 4, 4)
    assert result.structured["folds"] == 5  # the first model's greedy structure
    assert member.configs[-1].row_seeds == (0, 1)  # the same seeds as the first model
    assert [c.do_sample for c in member.configs] == [True]  # no greedy row for a member


def test_an_ensemble_without_samples_averages_the_greedy_predictions() -> None:
    first, member = Scripted(), Shifted()
    (p,) = SampleMean(first, samples=0, members=[member]).predict([object()])
    result = p.observation.results[0]  # type: ignore[union-attr]
    assert result.structured["cv_mean"] == round((0.9123 + 1.0123) / 2, 4)
    assert result.structured["cv_std"] == 0.01  # the same in both: unchanged
    assert not any(c.do_sample for c in first.configs + member.configs)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="samples must be >= 1 without members"):
        SampleMean(Scripted(), samples=0)
    with pytest.raises(ValueError, match="samples must be >= 0 with members"):
        SampleMean(Scripted(), samples=-1, members=[Scripted()])
    with pytest.raises(ValueError, match="temperature"):
        SampleMean(Scripted(), temperature=0)
    other = Scripted()
    other.budget = Budget(total=2048)  # type: ignore[misc]
    with pytest.raises(ValueError, match="member 1 renders prompts differently"):
        SampleMean(Scripted(), members=[other])


def test_on_a_real_model_without_floats_the_prediction_is_greedys(
    tiny_checkpoint: Path,
) -> None:
    wm = load_world_model(tiny_checkpoint)
    episodes = load_bundled("val", env="frozenlake")[:3]
    contexts = [wm.context(ep, 0) for ep in episodes]
    greedy = wm.predict(contexts)
    averaged = SampleMean(wm, samples=3).predict(contexts)
    # FrozenLake observations are text: nothing to average, greedy's answer comes back
    assert [p.text for p in averaged] == [p.text for p in greedy]
    assert [p.observation for p in averaged] == [p.observation for p in greedy]
