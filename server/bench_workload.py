"""What `simworld bench serve`'s sessions replay: the bundled split's recorded episodes of an
env as native REST step bodies (`load_scripts`), and the tasks the served model cannot take
(`over_budget`), skipped by every row so that all rows run the same workload.

    scripts = load_scripts("bfcl")            # one Script per recorded test episode
    skipped = over_budget("default", "bfcl")  # task ids past the default model's budget
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simworld.data.records import Action, TextAction


@dataclass(frozen=True)
class Script:
    """One recorded episode to replay: its task and its actions as step request bodies."""

    task_id: str
    steps: tuple[dict[str, Any], ...]


def load_scripts(env: str, split: str = "test") -> list[Script]:
    """The recorded episodes of `env` in the bundled `split` whose task the simulated env
    serves, as step request bodies, in the bundle's order."""
    from simworld.data.bundle import load_bundled
    from simworld.simulators.envs import load_sim_env

    tasks = load_sim_env(env).tasks
    scripts = [
        Script(ep.task.id, tuple(step_body(step.action) for step in ep.steps))
        for ep in load_bundled(split, env=env)
        if ep.task.id in tasks and ep.steps
    ]
    if not scripts:
        raise ValueError(f"the bundled {split} split has no episode of a {env} task")
    return scripts


def over_budget(model: str, env: str, split: str = "test") -> set[str]:
    """The tasks of `env`'s recorded `split` episodes with a step whose context does not fit
    `model`'s budget (its tools, rules or the recorded action alone pass it): the server
    would refuse them (503 or 422), so every row skips them from the start. A step refused
    that way during a run anyway (the live state differs from the recorded one) adds its
    task then."""
    from simworld.data.bundle import load_bundled
    from simworld.worldmodel.views import BudgetError
    from simworld.worldmodel.world_model import load_world_model

    wm = load_world_model(model)
    skipped = set()
    for ep in load_bundled(split, env=env):
        try:
            for i in range(len(ep.steps)):
                wm.context(ep, i)
        except BudgetError:
            skipped.add(ep.task.id)
    return skipped


def step_body(action: Action) -> dict[str, Any]:
    """The native REST step body of a recorded action: OpenAI tool calls, or text."""
    if isinstance(action, TextAction):
        return {"text": action.text}
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
        for c in action.calls
    ]
    return {"tool_calls": calls}


__all__ = ["Script", "load_scripts", "over_budget", "step_body"]
