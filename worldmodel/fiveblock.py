"""Writing the five-block world-model format (the layout of patronus-ai/mdlm_world_modeling;
data/formats/fiveblock.py reads it) from the same blocks as every other rendering.

    simworld convert dump.jsonl out.jsonl --to five-block      # through the writer plugins
    from simworld.worldmodel.fiveblock import write, record

One record per transition:

    {"id": "<episode_id>/<step index>", "dataset": "<env>", "messages": [
      {"role": "system", "content": "## ENVIRONMENT STATE\\n…## TASK CONTEXT\\n…"
                   "## TOOL SCHEMAS\\n…## DOMAIN RULES\\n…## STEERING DIRECTIVES\\n…"
                   "PREDICTION TARGET: …"},
      {"role": "user", "content": "State: <recent history, a JSON list>\\n\\nAction: <action>"},
      {"role": "assistant", "content": "<the observation text>"}]}

The state is the env's state view within the default Budget ("null" when unknown); empty
blocks other than the state are left out. The format holds one observation text per record,
so an action with several calls is refused (ValueError), and neither the error flag nor
the state patch travels: the reader tells an error only from a JSON `"error"` member.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TextIO

from simworld.data.records import JSON, Episode, TextObservation, ToolCallsAction
from simworld.worldmodel.context import Budget, Context, build_context
from simworld.worldmodel.render import render_blocks, section, template

SYSTEM_BLOCKS = ("task", "tools", "rules", "steering")


def record(ctx: Context, record_id: str) -> dict[str, JSON]:
    """One five-block record from a context with a target."""
    if ctx.target is None:
        raise ValueError("a five-block record needs the step's observation (a target)")
    observation = ctx.target.observation
    if isinstance(observation, TextObservation):
        answer = observation.text
    elif len(observation.results) == 1:
        answer = observation.results[0].text
    else:
        count = len(observation.results)
        raise ValueError(f"five-block: {record_id} has {count} results; a record holds one")
    system = section("state", ctx.state or "null") + render_blocks(ctx, SYSTEM_BLOCKS)
    system += template("fiveblock_target.txt").template.rstrip("\n")
    user = template("fiveblock_user.txt").substitute(history=ctx.history or "[]", action=ctx.action)
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
        {"role": "assistant", "content": answer},
    ]
    return {"id": record_id, "dataset": ctx.env, "messages": messages}


def write(episodes: Iterable[Episode], out: TextIO, budget: Budget | None = None) -> int:
    """Stream one record per step to `out` (JSON Lines); returns how many episodes.
    ValueError names the episode and step a record cannot carry."""
    written = 0
    for episode in episodes:
        for index, step in enumerate(episode.steps):
            if isinstance(step.action, ToolCallsAction) and len(step.action.calls) != 1:
                calls = len(step.action.calls)
                raise ValueError(
                    f"five-block: episode {episode.episode_id!r} step {index} makes {calls} "
                    "calls; a five-block record holds one call and one observation"
                )
            ctx = build_context(episode, index, budget)
            line = record(ctx, f"{episode.episode_id}/{index}")
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
        written += 1
    return written


__all__ = ["SYSTEM_BLOCKS", "record", "write"]
