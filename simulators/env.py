"""What a simulated environment is: its tasks, tools, rules, checks and limits, plus the
optional pieces that answer a step without the world model (deterministic rules, a real
backend).

    from simworld.simulators.envs import load_sim_env
    env = load_sim_env("frozenlake")
    task = env.task_for(task_id=None, seed=3)      # a task chosen by the seed
    task.initial_state, task.tools, env.max_steps

An env is data (tasks with their initial states and tool specs, domain rules, volatile
fields) plus small code: `check` (reward and termination after a step), an optional
`responder` (deterministic rules that answer some steps exactly, no model needed), an
optional `real` backend (off unless the router is told to use it), an optional `ground`
(rebuilds a model answer from the env's own data, as search does with its corpus), and
the error style its real API writes invalid calls in. Nothing here imports torch or FastAPI.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from simworld.data.records import JSON, Action, Episode, Observation, ToolSpec, VolatileField
from simworld.simulators.validation import DefaultStyle, ErrorStyle


class UnknownTask(KeyError):
    """A task id the env does not have (a client mistake, not a bug)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class SimTask:
    """One task an episode can start from: the instruction, the initial state (None where
    the env has no state), what a reset shows, and the tools the agent may call."""

    id: str
    instruction: str
    initial_state: JSON
    initial_observation: Observation | None = None
    tools: tuple[ToolSpec, ...] = ()
    apis: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    """An observation and the state change it brings (None: the env has no state)."""

    observation: Observation
    patch: list[JSON] | None = None


@dataclass(frozen=True)
class StepCheck:
    """Reward and termination after a step, from the env's own check."""

    reward: float = 0.0
    terminated: bool = False


# (state before, action, observation, state after) -> reward and termination
Check = Callable[[JSON, Action, Observation, JSON], StepCheck]
# (state, action) -> an exact answer, or None when the rules do not cover the step
Responder = Callable[[JSON, Action], Answer | None]
# (action, the model's observation or None where unreadable, the model's raw text) ->
# the observation rebuilt from the env's own data and what could not be placed, or None
# where nothing could be (the model's answer then stands as it is)
Grounder = Callable[[Action, Observation | None, str], tuple[Observation, list[str]] | None]


class RealBackend(Protocol):
    """The real environment behind a simulated one: what a step really returns, and what
    running it costs (seconds, or any unit the router's thresholds use)."""

    def execute(self, state: JSON, action: Action) -> Answer: ...

    def cost(self, state: JSON, action: Action) -> float: ...


def no_reward(state: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
    """The check of an env without rewards: 0, never terminates (the step limit ends it)."""
    return StepCheck()


@dataclass
class SimEnv:
    """A simulated environment's definition. `tasks` keeps its order (seeded choice)."""

    name: str
    tasks: Mapping[str, SimTask]
    action_kind: Literal["tool_calls", "text"]
    rules: tuple[str, ...] = ()
    volatile: tuple[VolatileField, ...] = ()
    max_steps: int = 100
    check: Check = no_reward
    responder: Responder | None = None
    real: RealBackend | None = None
    # Grounding of model answers in the env's own data (search: the model names passages,
    # the corpus supplies their text); the router applies it unless told not to.
    ground: Grounder | None = None
    error_style: ErrorStyle = field(default_factory=DefaultStyle)
    # Real episodes of this env (a captured env's recordings): the router's exact cache
    # starts with their answers, so a step seen for real is answered as it was.
    recorded: tuple[Episode, ...] = ()
    # The call ids of the env's recorded data, as a format of the session's step and the
    # call's index in its action: the world model is asked with ids of this form (a small
    # model copies the kind of id it was trained on) and the client gets its own back.
    call_id_form: str = "call_{step}_{index}"

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError(f"env {self.name!r} has no tasks")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        try:
            first, second = (self.call_id_form.format(step=0, index=i) for i in (0, 1))
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"call_id_form {self.call_id_form!r} cannot be formatted ({exc!r}): it may "
                "use {step} and {index} only"
            ) from exc
        if first == second:
            raise ValueError(
                f"call_id_form {self.call_id_form!r} must tell the calls of one action apart: "
                "use {index}"
            )

    def task_for(self, task_id: str | None = None, seed: int | None = None) -> SimTask:
        """The task `task_id`, or one chosen by `seed` (the first task when neither is
        given). An unknown id is a KeyError that names a few known ones."""
        if task_id is not None:
            if task_id not in self.tasks:
                known = ", ".join(list(self.tasks)[:5])
                raise UnknownTask(f"env {self.name!r} has no task {task_id!r} (e.g. {known})")
            return self.tasks[task_id]
        ids = list(self.tasks)
        return self.tasks[ids[0] if seed is None else random.Random(seed).choice(ids)]


__all__ = [
    "Answer",
    "Check",
    "Grounder",
    "RealBackend",
    "Responder",
    "SimEnv",
    "SimTask",
    "StepCheck",
    "UnknownTask",
    "no_reward",
]
