"""A stop-gap fidelity figure until `simworld eval` exists (an open issue): how many tool
results a world model predicts right on the bundled BFCL test split.

    python scripts/measure_bfcl.py default                 # or a checkpoint directory
    python scripts/measure_bfcl.py default TravelAPI       # only scenarios with TravelAPI

A step counts as right when every predicted result has the real one's error flag and the
same JSON-canonical text (key order and spacing ignored; volatile fields compared by
presence, not value). A step whose context cannot fit the model's budget counts as wrong.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch

from simworld.data.bundle import load_bundled
from simworld.data.records import Step, ToolResultsObservation
from simworld.worldmodel import load_world_model
from simworld.worldmodel.views import BudgetError


def canonical(text: str, volatile: set[str]) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()

    def mask(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: "<volatile>" if k in volatile else mask(v) for k, v in x.items()}
        return [mask(v) for v in x] if isinstance(x, list) else x

    return json.dumps(mask(value), sort_keys=True)


def main(model: str, apis: list[str]) -> dict[str, Any]:
    torch.set_num_threads(2)
    wm = load_world_model(model)
    episodes = load_bundled("test", env="bfcl")
    if apis:
        episodes = [ep for ep in episodes if set(apis) & set(ep.task.apis)]
    volatile = {v.key for ep in episodes for v in ep.volatile}
    contexts, steps, over_budget = [], [], 0
    for ep in episodes:
        for i, step in enumerate(ep.steps):
            try:
                contexts.append(wm.context(ep, i))
            except BudgetError:
                over_budget += 1
                continue
            steps.append(step)
    started = time.monotonic()
    predictions = [p for k in range(0, len(contexts), 32) for p in wm.predict(contexts[k : k + 32])]
    right = sum(
        _right(p.observation, step, volatile) for p, step in zip(predictions, steps, strict=True)
    )
    total = len(steps) + over_budget
    return {
        "steps": total,
        "over_budget": over_budget,
        "json_canonical": round(right / total, 4),
        "seconds": round(time.monotonic() - started, 1),
    }


def _right(predicted: object, step: Step, volatile: set[str]) -> bool:
    real = step.observation
    if not isinstance(predicted, ToolResultsObservation) or not isinstance(
        real, ToolResultsObservation
    ):
        return False
    if len(predicted.results) != len(real.results):
        return False
    return all(
        a.is_error == b.is_error and canonical(a.text, volatile) == canonical(b.text, volatile)
        for a, b in zip(predicted.results, real.results, strict=True)
    )


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
