"""Training data: episodes from dumps (or the bundled splits) turned into (prompt, target)
pairs by the one serialization.

    from simworld.training.data import load_split, to_examples
    train_eps = load_split("train", exclude_apis=["TravelAPI"])
    examples, report = to_examples(train_eps, Budget(total=384), max_target_tokens=96)

With a retrieval memory (`memory`, a Retriever over the train steps) and `budget.example`,
each prompt shows its nearest recorded step as the example block. Train steps pass
`exclude_own=True`: their neighbour comes from other scenarios only (BFCL records each
scenario several ways under one `Task.id`; a step shown its own scenario's answer learns
to copy it, which it cannot do at test time). Val and test steps search the whole memory.

Nothing is dropped silently: a step whose context cannot fit the budget, or whose target is
longer than `max_target_tokens` (counted by `budget.count`, the tokenizer's own count when
the caller has one), is left out and counted in the report, which the trainer prints and
the checkpoint records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simworld.data.bundle import exclude_apis as drop_apis
from simworld.data.bundle import load_bundled
from simworld.data.formats import read_episodes
from simworld.data.records import Episode
from simworld.training.batching import Example
from simworld.worldmodel.context import Budget, build_context, with_example
from simworld.worldmodel.render import render_prompt, render_target
from simworld.worldmodel.retrieval import Retriever
from simworld.worldmodel.views import BudgetError


@dataclass
class ExampleReport:
    """How many steps became examples, and why the others did not."""

    kept: int = 0
    over_budget: int = 0  # the context could not be made to fit the prompt budget
    long_target: int = 0  # the target is longer than max_target_tokens
    per_env: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {
            "kept": self.kept,
            "over_budget": self.over_budget,
            "long_target": self.long_target,
            "per_env": dict(sorted(self.per_env.items())),
        }


def load_split(
    split: str,
    files: Sequence[str | Path] = (),
    envs: Sequence[str] = (),
    exclude_apis: Sequence[str] = (),
) -> list[Episode]:
    """Episodes of one bundled split, or of the given dump files (any supported format;
    a bad record fails the run with its file and line), filtered by env and API."""
    if files:
        episodes = [ep for f in files for ep in read_episodes(f, strict=True).episodes]
    else:
        episodes = load_bundled(split)
    if envs:
        episodes = [ep for ep in episodes if ep.env in envs]
    return drop_apis(episodes, exclude_apis) if exclude_apis else episodes


def to_examples(
    episodes: Iterable[Episode],
    budget: Budget,
    max_target_tokens: int,
    memory: Retriever | None = None,
    exclude_own: bool = False,
) -> tuple[list[Example], ExampleReport]:
    """Every step of every episode as an Example (prompt within `budget`, with its nearest
    step in `memory` as the example; from other scenarios only with `exclude_own`), grouped
    by scenario; over-long steps are counted in the report, not silently dropped."""
    examples: list[Example] = []
    report = ExampleReport()
    for episode in episodes:
        for index in range(len(episode.steps)):
            try:
                ctx = build_context(episode, index, budget)
            except BudgetError:
                report.over_budget += 1
                continue
            if memory is not None:
                own = episode.task.id if exclude_own else None
                found = memory.neighbour(episode.env, ctx.action_record, ctx.previous, own)
                ctx = with_example(ctx, found, budget)
            target = render_target(ctx)
            if budget.count(target) > max_target_tokens:
                report.long_target += 1
                continue
            examples.append(Example(render_prompt(ctx), target, episode.task.id, episode.env))
            report.kept += 1
            report.per_env[episode.env] += 1
    return examples, report


__all__ = ["ExampleReport", "load_split", "to_examples"]
