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

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simworld.data.bundle import exclude_apis as drop_apis
from simworld.data.bundle import load_bundled
from simworld.data.formats import read_episodes
from simworld.data.records import Episode, ToolCallsAction
from simworld.training.augment import AugmentReport, CopyAugment, Pair, copy_variants
from simworld.training.batching import Example
from simworld.worldmodel.context import Budget, Context, build_context, with_example
from simworld.worldmodel.render import render_prompt, render_target, section
from simworld.worldmodel.retrieval import Retriever
from simworld.worldmodel.views import BudgetError


@dataclass
class ExampleReport:
    """How many steps became examples, and why the others did not."""

    kept: int = 0
    over_budget: int = 0  # the context could not be made to fit the prompt budget
    long_target: int = 0  # the target is longer than max_target_tokens
    per_env: Counter[str] = field(default_factory=Counter)
    augment: AugmentReport | None = None  # renamed variants (copy augmentation), when asked

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "kept": self.kept,
            "over_budget": self.over_budget,
            "long_target": self.long_target,
            "per_env": dict(sorted(self.per_env.items())),
        }
        if self.augment is not None:
            out["augment"] = self.augment.as_dict()
        return out


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
    augment: CopyAugment | None = None,
) -> tuple[list[Example], ExampleReport]:
    """Every step of every episode as an Example (prompt within `budget`, with its nearest
    step in `memory` as the example; from other scenarios only with `exclude_own`), grouped
    by scenario; over-long steps are counted in the report, not silently dropped. With
    `augment`, the renamed variants (`simworld.training.augment`) that still fit follow."""
    examples: list[Example] = []
    pairs: list[Pair] = []
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
            pairs.append(_pair(examples[-1], ctx))
            report.kept += 1
            report.per_env[episode.env] += 1
    if augment is not None and augment.copies:

        def fits(ex: Example) -> bool:
            within = budget.count(ex.prompt) <= budget.total + budget.example
            return within and budget.count(ex.target) <= max_target_tokens

        variants, report.augment = copy_variants(pairs, augment, fits)
        examples += variants
    return examples, report


def _pair(example: Example, ctx: Context) -> Pair:
    """What copy augmentation needs of a pair: its fixed blocks' text, the env and first
    tool its target's vocabulary is counted under ("": a text action, never renamed) and
    its calls' argument values."""
    action = ctx.action_record
    if not isinstance(action, ToolCallsAction) or not action.calls:
        return Pair(example, "", "")
    fixed = "".join(section(b, getattr(ctx, b)) for b in ("tools", "rules", "steering"))
    values: list[object] = []
    for call in action.calls:
        values += [call.raw_arguments] if call.arguments is None else list(call.arguments.values())
    return Pair(example, fixed, f"{ctx.env}:{action.calls[0].name}", json.dumps(values))


__all__ = ["ExampleReport", "load_split", "to_examples"]
