"""Numbers as the mean of sampled predictions: a world model whose predicted metrics are
the model's expected value, not the digits greedy decoding strings together.

A model that writes a number digit by digit and is decoded greedily picks the likeliest
first digit, then the likeliest second one given it, and so on: the result is a mode of
sorts, biased toward the values the training data repeats most (every tree depth answered
0.88), and it moves in jumps. Sampling the same prediction K times and averaging each
number gives an estimate of the model's mean instead, which is what an error or a ranking
of predicted scores wants.

    from simworld.worldmodel.sample_mean import SampleMean
    wm = SampleMean(load_world_model("out/ds/wm"), samples=8)
    (prediction,) = wm.predict([ctx])   # greedy structure, float leaves averaged

Rules, for each context of a batch:
- the greedy prediction gives the structure: which results, ok or error, which keys, the
  strings, booleans and integers, and the patch (kept as greedy's);
- each float leaf of a result's JSON (a Python float, never a bool or an int) becomes the
  mean of the same leaf, at the same path, in the K samples whose result at that call has
  the same error flag and a number there; rounded to the most decimals any of those values
  wrote; kept as greedy's when no sample has it;
- a result whose text is not JSON, and a text observation, stay greedy's;
- a changed result's text is rewritten from its JSON (`json.dumps`), and
  `Prediction.text` is left as greedy's raw text.

Costs K extra rows a prediction, decoded in one batched call (seeds `seed .. seed + K-1`
for the first context, and on, so the result does not depend on the batch).

An ensemble: `members` are further world models built for the same contexts (trainings of
one recipe with other seeds: the same tokenizer, so the same prompts). Each draws the same
K samples, and all of them join the mean (K per member); with `samples=0` the members'
greedy predictions and the first model's are averaged instead. The structure is still the
first model's greedy prediction.

    wm = SampleMean(load_world_model("out/ds/wm"), samples=4,
                    members=[load_world_model("out/ds/wm-b")])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from simworld.data.records import JSON, ToolResult, ToolResultsObservation
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction, WorldModel

Path = tuple[str | int, ...]


class SampleMean:
    """`model` with each predicted float the mean over `samples` sampled predictions (see
    the module docstring); a WorldModel itself."""

    def __init__(
        self,
        model: WorldModel,
        samples: int = 8,
        temperature: float = 1.0,
        seed: int = 0,
        members: Sequence[WorldModel] = (),
    ) -> None:
        if samples < (0 if members else 1):
            least = "0 with members" if members else "1 without members"
            raise ValueError(f"samples must be >= {least}, got {samples}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        for number, member in enumerate(members, 1):
            if _layout(member.budget) != _layout(model.budget):
                raise ValueError(
                    f"ensemble member {number} renders prompts differently from the first "
                    f"model (budget {_layout(member.budget)} against "
                    f"{_layout(model.budget)}): members must be trainings of one recipe"
                )
        self.model = model
        self.members = list(members)
        self.budget: Budget = model.budget
        self.samples = samples
        self.temperature = temperature
        self.seed = seed

    @property
    def generation(self) -> GenerationConfig | None:
        """The wrapped model's own generation config (what the router samples retries with)."""
        return getattr(self.model, "generation", None)

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        greedy = self.model.predict(batch, cfg)
        models = [self.model, *self.members]
        if self.samples == 0:  # an ensemble of greedy predictions
            others = [greedy, *(m.predict(batch, cfg) for m in self.members)]
            return [
                _averaged(prediction, [own[i] for own in others])
                for i, prediction in enumerate(greedy)
            ]
        base = cfg or self.generation or GenerationConfig()
        k = self.samples
        rows = tuple(self.seed + i * k + j for i in range(len(batch)) for j in range(k))
        sampling = replace(
            base, do_sample=True, temperature=self.temperature, seed=self.seed, row_seeds=rows
        )
        repeated = [ctx for ctx in batch for _ in range(k)]
        sampled = [m.predict(repeated, sampling) for m in models]
        return [
            _averaged(prediction, [p for own in sampled for p in own[i * k : (i + 1) * k]])
            for i, prediction in enumerate(greedy)
        ]


def _layout(budget: Budget) -> tuple[object, ...]:
    """What shapes a prompt apart from the tokenizer's count."""
    shares = tuple(sorted(budget.shares.items()))
    return (budget.total, shares, budget.history_steps, budget.example, budget.state_focus)


def _averaged(greedy: Prediction, samples: Sequence[Prediction]) -> Prediction:
    observation = greedy.observation
    if not isinstance(observation, ToolResultsObservation):
        return greedy
    results = []
    for index, result in enumerate(observation.results):
        peers = [
            s.observation.results[index].structured
            for s in samples
            if isinstance(s.observation, ToolResultsObservation)
            and len(s.observation.results) > index
            and s.observation.results[index].is_error == result.is_error
        ]
        results.append(_averaged_result(result, peers))
    return replace(greedy, observation=ToolResultsObservation(results))


def _averaged_result(result: ToolResult, peers: list[JSON]) -> ToolResult:
    if not isinstance(result.structured, dict | list):
        return result
    floats = _float_leaves(result.structured)
    if not floats:
        return result
    value: Any = result.structured
    changed = False
    for path, own in floats:
        found = [v for v in (_at(peer, path) for peer in peers) if _is_number(v)]
        if not found:
            continue
        decimals = max(_decimals(v) for v in [own, *found])
        mean = round(sum(float(v) for v in found) / len(found), decimals)
        if mean != own:
            value, changed = _set(value, path, mean), True
    if not changed:
        return result
    return replace(result, text=json.dumps(value), structured=value)


def _float_leaves(value: JSON, path: Path = ()) -> list[tuple[Path, float]]:
    if isinstance(value, float):
        return [(path, value)]
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _float_leaves(v, (*path, k))]
    if isinstance(value, list):
        return [leaf for i, v in enumerate(value) for leaf in _float_leaves(v, (*path, i))]
    return []


def _at(value: JSON, path: Path) -> JSON:
    for key in path:
        if isinstance(value, dict) and isinstance(key, str):
            if key not in value:
                return None
            value = value[key]
        elif isinstance(value, list) and isinstance(key, int) and key < len(value):
            value = value[key]
        else:
            return None
    return value


def _set(value: JSON, path: Path, new: float) -> JSON:
    """A copy of `value` with the leaf at `path` replaced (the containers on the way are
    copied; the rest is shared)."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict) and isinstance(key, str):
        return {**value, key: _set(value[key], rest, new)}
    assert isinstance(value, list) and isinstance(key, int)
    return [*value[:key], _set(value[key], rest, new), *value[key + 1 :]]


def _is_number(value: JSON) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _decimals(value: JSON) -> int:
    exponent = Decimal(repr(value)).as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


__all__ = ["SampleMean"]
