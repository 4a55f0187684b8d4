"""How often the prompt holds what the real result is made of: for each BFCL step of a
bundled split, whether every scalar of the recorded result (numbers as written, strings cut
to 40 characters) occurs somewhere in the step's prompt, with the plain state view and with
the action-focused one (README, "The action-focused state view").

    .venv/bin/python scripts/state_coverage.py [--split test|val|train] [--model default|DIR]

Prompts are sized by the model's own budget and tokenizer (the shipped default's: 384
tokens); only the state view changes between the two counts.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import replace

from simworld.data.bundle import load_bundled
from simworld.data.records import JSON, ToolResultsObservation
from simworld.worldmodel.context import build_context
from simworld.worldmodel.render import render_prompt
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import load_world_model


def scalars(value: JSON) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from scalars(item)
    elif isinstance(value, str):
        yield value[:40]
    elif not isinstance(value, bool) and value is not None:
        yield str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="test", choices=["train", "val", "test"])
    parser.add_argument("--model", default="default", help="whose budget and tokenizer")
    args = parser.parse_args()
    model_budget = load_world_model(args.model).budget
    episodes = load_bundled(args.split, env="bfcl")
    covered: dict[bool, list[bool | None]] = {}
    for focus in (False, True):
        budget = replace(model_budget, state_focus=focus)
        rows: list[bool | None] = []
        for episode in episodes:
            for index, step in enumerate(episode.steps):
                try:
                    prompt = render_prompt(build_context(episode, index, budget))
                except BudgetError:
                    rows.append(None)
                    continue
                obs = step.observation
                results = obs.results if isinstance(obs, ToolResultsObservation) else []
                rows.append(all(s in prompt for r in results for s in scalars(r.structured)))
        covered[focus] = rows
    plain, focused = covered[False], covered[True]
    print(f"{len(plain)} BFCL {args.split} steps; every result scalar in the prompt:")
    print(f"  plain view   {sum(bool(x) for x in plain)}  (over budget {plain.count(None)})")
    print(f"  focused view {sum(bool(x) for x in focused)}  (over budget {focused.count(None)})")
    gained = sum(bool(f) and not p for p, f in zip(plain, focused, strict=True))
    lost = sum(bool(p) and not f for p, f in zip(plain, focused, strict=True))
    print(f"  gained {gained}, lost {lost}")


if __name__ == "__main__":
    main()
