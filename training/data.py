"""Training data: episodes from dumps (or the bundled splits) turned into (prompt, target)
pairs by the one serialization.

    from simworld.training.data import load_split, to_examples
    train_eps = load_split("train", exclude_apis=["TravelAPI"])
    examples, report = to_examples(train_eps, Budget(total=384), max_target_tokens=96)

With a retrieval memory (`memory`, a Retriever over the train steps) and `budget.example`,
each prompt shows its nearest recorded step as the example block. Train steps pass
`exclude_own=True`: their neighbour comes from other scenarios only (BFCL records each
scenario several ways under one `Task.id`; a step shown its own scenario's answer learns
to copy it, which it cannot do at test time). `distinct=True` also keeps from a train step
every recording of its own call (the same tool and arguments) in other scenarios: in the
search logs 38% of train searches ask a query another need also asks, while no held-out
one does, so a model trained without it learns to copy an example of the very query.
Val and test steps search the whole memory.

`drop_fields` leaves the named keys out of the JSON results the model learns to write (the
targets, and the example blocks through the memory: `drop_fields_in`); prompts' history
keeps whole results, as serving shows them. What it is for: the search env's grounding
(simulators/envs/search.py) serves each passage the model names by id from the corpus, so
a model that writes only ids, titles and scores (`drop_fields=("text",)`) spends its
tokens on which passages, not on copying 40 words.

Nothing is dropped silently: a step whose context cannot fit the budget, or whose target is
longer than `max_target_tokens` (counted by `budget.count`, the tokenizer's own count when
the caller has one), is left out and counted in the report, which the trainer prints and
the checkpoint records.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from simworld.data.bundle import exclude_apis as drop_apis
from simworld.data.bundle import load_bundled
from simworld.data.formats import read_episodes
from simworld.data.records import (
    JSON,
    Episode,
    Observation,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.training.augment import AugmentReport, CopyAugment, Pair, copy_variants
from simworld.training.batching import Example
from simworld.worldmodel.context import Budget, Context, build_context, with_example
from simworld.worldmodel.render import render_prompt, render_target, section
from simworld.worldmodel.retrieval import Recorded, Retriever
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
    drop_fields: Sequence[str] = (),
    distinct: bool = False,
) -> tuple[list[Example], ExampleReport]:
    """Every step of every episode as an Example (prompt within `budget`, with its nearest
    steps in `memory`, `budget.examples` of them, as the example block; from other
    scenarios only with `exclude_own`), grouped
    by scenario; over-long steps are counted in the report, not silently dropped. With
    `augment`, the renamed variants (`simworld.training.augment`) that still fit follow.
    `drop_fields`: keys left out of the target's JSON results (`drop_fields_in`).
    `distinct`: never an example whose call is the step's own (`Retriever.neighbours`)."""
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
                found = memory.neighbours(
                    episode.env, ctx.action_record, ctx.previous, budget.examples, own, distinct
                )
                ctx = with_example(ctx, found, budget)
            if drop_fields and ctx.target is not None:
                seen = drop_fields_in(ctx.target.observation, drop_fields)
                ctx = replace(ctx, target=replace(ctx.target, observation=seen))
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


def drop_fields_in(observation: Observation, names: Sequence[str]) -> Observation:
    """`observation` with the keys `names` left out of every JSON object, at any depth, of
    its tool results' parsed JSON. A result that held one is rewritten from what is left,
    in its own JSON style (compact, or json.dumps' default spacing) where the text was one
    of them, else compact; results without such a key, and non-JSON results, stay as
    they are."""
    if not names or not isinstance(observation, ToolResultsObservation):
        return observation
    drop = frozenset(names)
    results = []
    for result in observation.results:
        kept = _without(result.structured, drop)
        if kept == result.structured:
            results.append(result)
            continue
        spaced = result.text == json.dumps(result.structured, ensure_ascii=False)
        text = (
            json.dumps(kept, ensure_ascii=False)
            if spaced
            else json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
        )
        results.append(ToolResult(result.call_id, text, kept, result.is_error))
    return replace(observation, results=results)


def drop_fields_in_memory(entries: Sequence[Recorded], names: Sequence[str]) -> list[Recorded]:
    """Recorded steps with `drop_fields_in` applied to their observations: the memory a
    model trained with `drop_fields` retrieves its example blocks from."""
    return [replace(r, observation=drop_fields_in(r.observation, names)) for r in entries]


def _without(value: JSON, drop: frozenset[str]) -> JSON:
    if isinstance(value, dict):
        return {k: _without(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_without(v, drop) for v in value]
    return value


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


__all__ = [
    "ExampleReport",
    "drop_fields_in",
    "drop_fields_in_memory",
    "load_split",
    "to_examples",
]
