"""Means with bootstrap confidence intervals, overall and by group (env, tool, step index,
error vs success): the numbers a report's tables and plots are made of.

    from simworld.eval.breakdown import Scored, summarize, by_group
    rows = [Scored(env="bfcl", tool="cd", step=0, real_error=False, metrics={"exact": 1.0})]
    summarize([r.metrics["exact"] for r in rows])          # Summary(mean, low, high, n)
    by_group(rows, "tool", "exact")                        # {"cd": Summary(...)}

A metric that does not apply to an item (None) is left out of that metric's mean, so `n`
differs between metrics; it is reported with each one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Grouping = Literal["env", "tool", "step", "outcome"]
STEP_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16)  # lower bounds of the step-index buckets


@dataclass
class Scored:
    """One evaluated transition: where it sits and its score on every metric."""

    env: str
    tool: str  # the first called tool's name; "text" for a text action
    step: int  # index of the step in its episode
    real_error: bool  # whether the real observation was an error
    metrics: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Summary:
    """A mean and its bootstrap confidence interval over `n` items (n = 0: no items)."""

    mean: float
    low: float
    high: float
    n: int

    def to_json(self) -> dict[str, float | int]:
        return {
            "mean": round(self.mean, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "n": self.n,
        }


def bootstrap_ci(
    values: Sequence[float], *, samples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """A percentile bootstrap interval for the mean (seeded, so reports reproduce)."""
    if not values:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(samples))
    tail = (1 - level) / 2
    low = means[int(tail * (samples - 1))]
    high = means[round((1 - tail) * (samples - 1))]
    return (low, high)


def summarize(values: Sequence[float | None], *, samples: int = 1000, seed: int = 0) -> Summary:
    """The mean of the values that apply (not None) with its 95 % bootstrap interval."""
    kept = [v for v in values if v is not None]
    if not kept:
        return Summary(0.0, 0.0, 0.0, 0)
    low, high = bootstrap_ci(kept, samples=samples, seed=seed)
    return Summary(sum(kept) / len(kept), low, high, len(kept))


def step_bucket(step: int) -> str:
    """The label of a step index's bucket: "0", "1", ..., "4-5", ..., "16+"."""
    for lower, upper in zip(STEP_BUCKETS, (*STEP_BUCKETS[1:], None), strict=True):
        if upper is None or step < upper:
            if upper is None:
                return f"{lower}+"
            return str(lower) if upper == lower + 1 else f"{lower}-{upper - 1}"
    raise AssertionError("unreachable")


KEYS: dict[Grouping, Callable[[Scored], str]] = {
    "env": lambda r: r.env,
    "tool": lambda r: f"{r.env}:{r.tool}",
    "step": lambda r: step_bucket(r.step),
    "outcome": lambda r: "error" if r.real_error else "success",
}


def by_group(
    rows: Sequence[Scored], grouping: Grouping, metric: str, *, samples: int = 1000, seed: int = 0
) -> dict[str, Summary]:
    """`metric` summarized per group, groups in order of first appearance (steps sorted)."""
    groups: dict[str, list[float | None]] = {}
    for row in rows:
        groups.setdefault(KEYS[grouping](row), []).append(row.metrics.get(metric))
    names = list(groups)
    if grouping == "step":
        names.sort(key=lambda label: int(label.split("-")[0].rstrip("+")))
    return {name: summarize(groups[name], samples=samples, seed=seed) for name in names}


__all__ = [
    "KEYS",
    "Grouping",
    "Scored",
    "Summary",
    "bootstrap_ci",
    "by_group",
    "step_bucket",
    "summarize",
]
