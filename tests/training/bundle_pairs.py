"""Simple (prompt, target) pairs from the bundled dataset, for SFT tests and smoke runs.

Not the project's serialization (worldmodel/ builds the real prompts): the prompt is the
compact JSON of the state before the step and the action, the target the observation
text. Good enough to exercise the training loop on real data."""

from __future__ import annotations

import json

from simworld.data.bundle import load_bundled
from simworld.data.records import Step
from simworld.training.batching import Example


def _action(step: Step) -> object:
    calls = getattr(step.action, "calls", None)
    if calls is None:
        return getattr(step.action, "text", "")
    return [{"name": c.name, "arguments": c.arguments} for c in calls]


def _observation(step: Step) -> str:
    results = getattr(step.observation, "results", None)
    if results is None:
        return str(getattr(step.observation, "text", ""))
    return "\n".join(r.text for r in results)


def bundle_pairs(split: str, env: str = "bfcl", limit: int | None = None) -> list[Example]:
    """One Example per step of the bundled `split` (grouped by scenario id)."""
    pairs = []
    for ep in load_bundled(split, env=env):
        for step in ep.steps:
            record = {"state": step.state, "action": _action(step)}
            prompt = json.dumps(record, separators=(",", ":"))
            pairs.append(Example(prompt=prompt, target=_observation(step), group=ep.task.id))
            if limit is not None and len(pairs) >= limit:
                return pairs
    return pairs
