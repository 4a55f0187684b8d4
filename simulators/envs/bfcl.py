"""The `bfcl` simulated env: BFCL's multi-turn scenarios as tasks, with their tools and
initial states taken from the bundled ground-truth episodes.

    from simworld.simulators.envs.bfcl import bfcl_env
    env = bfcl_env()
    task = env.task_for("bfcl-4")
    task.apis, [tool.name for tool in task.tools], task.initial_state.keys()

Each scenario (`Task.id`, "bfcl-4") is recorded four ways in the bundle: the
`multi_turn_base` and `multi_turn_long_context` ground truths and an off-policy variant of
each (`Provenance.policy` "ground_truth" vs "off_policy:<kind>"). A task is built from the
base ground truth (`Provenance.origin` "multi_turn_base_<n>"): its initial state, tools and
APIs (the long-context ground truth has the same instruction and tools and a longer
initial state). The instruction is every user turn of the scenario joined
(`Task.instruction`), as recorded.

Decisions:
- `max_steps` 50: a ground-truth episode makes at most 10 calls and a recorded off-policy
  variant at most 38; 50 leaves an agent room to explore and recover from errors.
- `check` is `no_reward`: BFCL multi-turn scores a whole episode against the ground truth
  (final state and responses), so there is no per-step reward; the step limit ends it.
- `rules`: none (the recorded episodes carry no rules; the tool descriptions say it all).
- `volatile`: the union of the episodes' volatile fields (RNG-drawn ids, tokens, noise).
- tools: as recorded, except that a declared output schema which the recorded train
  results break (BFCL declares `send_message`'s `message_id` an integer and returns an
  object, say) is replaced by one inferred from those results
  (`simworld.data.output_schemas.checked_output_schemas`), and a tool whose recorded
  results are all plain text (`touch`, `echo`, `mkdir` answer "None") has no output
  schema, so the router does not retry right answers and MCP clients are not promised
  structured content; `ToolSpec.original` keeps the tool JSON as BFCL wrote it.
- `call_id_form` "call_0_{index}": BFCL numbers calls by turn (`call_<turn>_<k>`), which a
  session does not know; the model is asked every action as turn 0, the form most of the
  recorded calls have (a session's 13th step as `call_12_0` would be out of its data).
- `error_style` BFCLStyle(): the tools carry their `bfcl_class`, so an invalid call reads
  like BFCL's own TypeError text.
- `responder` None: no step of BFCL is answered by fixed rules here.
- `real`: BfclReal() (`bfcl_real`: BFCL's own Python backends, rebuilt from the session's
  state) whenever bfcl-eval is installed at its pinned version, else None. Attaching it is
  safe: the router uses a real backend only when told to (`real_tools`, `max_real_cost`,
  `shadow`). It imports bfcl-eval at its first step, so loading the env stays as fast.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from simworld.data.bundle import SPLITS, load_bundled
from simworld.data.envs.base import EnvUnavailable
from simworld.data.envs.bfcl.env import check_installed
from simworld.data.output_schemas import checked_output_schemas, text_result_tools
from simworld.data.records import JSON, Episode, ToolSpec, VolatileField
from simworld.simulators.env import RealBackend, SimEnv, SimTask, no_reward
from simworld.simulators.envs.bfcl_real import BfclReal
from simworld.simulators.validation import BFCLStyle

MAX_STEPS = 50
GROUND_TRUTH = "ground_truth"  # Provenance.policy of a ground-truth episode
BASE_ORIGIN = "multi_turn_base_"  # Provenance.origin prefix of the base category


def _checked(tool: ToolSpec, fixed: dict[str, dict[str, JSON]], text: set[str]) -> ToolSpec:
    if tool.name in text:
        return replace(tool, output_schema=None)
    return replace(tool, output_schema=fixed[tool.name]) if tool.name in fixed else tool


def is_base_ground_truth(episode: Episode) -> bool:
    """Whether `episode` is a scenario's base-category ground truth (the task source)."""
    return episode.provenance.policy == GROUND_TRUTH and episode.provenance.origin.startswith(
        BASE_ORIGIN
    )


@functools.cache
def bfcl_env() -> SimEnv:
    """The bfcl SimEnv (built once per process from the bundled episodes)."""
    tasks: dict[str, SimTask] = {}
    volatile: dict[tuple[str, str, str], VolatileField] = {}
    train = load_bundled("train", env="bfcl")
    schemas, replaced = checked_output_schemas(train)
    fixed = {name: schemas[name] for name in replaced}
    text = text_result_tools(train)
    for split in SPLITS:
        for episode in load_bundled(split, env="bfcl"):
            if not is_base_ground_truth(episode):
                continue
            if episode.task.id in tasks:
                raise ValueError(f"the bundle holds two base ground truths of {episode.task.id}")
            tasks[episode.task.id] = SimTask(
                id=episode.task.id,
                instruction=episode.task.instruction,
                initial_state=episode.initial_state,
                tools=tuple(_checked(tool, fixed, text) for tool in episode.tools),
                apis=tuple(episode.task.apis),
            )
            for field in episode.volatile:
                volatile.setdefault((field.key, field.kind, field.pattern), field)
    return SimEnv(
        name="bfcl",
        tasks={task_id: tasks[task_id] for task_id in sorted(tasks, key=_scenario_number)},
        action_kind="tool_calls",
        volatile=tuple(volatile.values()),
        max_steps=MAX_STEPS,
        check=no_reward,
        real=real_backend(),
        error_style=BFCLStyle(),
        call_id_form="call_0_{index}",
    )


def real_backend() -> RealBackend | None:
    """BfclReal() when bfcl-eval (the pinned version) and mpmath are installed, else None."""
    try:
        check_installed()
    except EnvUnavailable:
        return None
    return BfclReal()


def _scenario_number(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[1])  # "bfcl-12" -> 12


__all__ = [
    "BASE_ORIGIN",
    "GROUND_TRUTH",
    "MAX_STEPS",
    "bfcl_env",
    "is_base_ground_truth",
    "real_backend",
]
