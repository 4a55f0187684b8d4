"""A session: one episode of a simulated env, driven step by step (what a server holds per
client, whichever protocol drives it).

    router = Router(env, load_world_model("default"))
    session = Session(env, router, episode_id="ep-1")
    first = session.reset(seed=3)                  # a task chosen by the seed
    result = session.step(TextAction("DOWN"))
    result.observation, result.reward, result.terminated, result.truncated, result.info
    session.episode()                              # the session so far, as a recordable Episode

A step: the action's kind must be the env's (else ActionError); a tool-calls action is
checked against the task's tools' input schemas first, and a rejected one gets the error
observation the real API would give (source "validation", the state untouched); otherwise
the router answers it. The answer's patch updates the state (a patch that does not apply
leaves the state as it was and is reported in `info["problems"]`); the env's check gives
reward and termination; `truncated` is set when the step count reaches `env.max_steps`
without termination. Stepping a finished episode, a closed session or one never reset is
a SessionError. Each step's router seed is derived from the reset seed and the step index,
so the same seed and actions give the same episode.

With an explicit `initial_state`, the task's initial observation (which shows the task's
own state) is not shown: `Reset.observation` is None.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    Provenance,
    Step,
    Task,
    TextAction,
    ToolCallsAction,
    to_json,
)
from simworld.simulators.env import Answer, SimEnv, SimTask
from simworld.simulators.router import Routed, Router
from simworld.simulators.validation import error_observation, validate_calls
from simworld.worldmodel.patch import PatchError, apply


class SessionError(ValueError):
    """A call the session cannot take in its present phase (not reset, finished, closed)."""


class ActionError(ValueError):
    """An action this env cannot take at all: the wrong kind, or tool calls without a call."""


@dataclass(frozen=True)
class Reset:
    """What a reset shows: the first observation (None when there is none), the task, and
    info {"episode_id", "task_id", "seed"}."""

    observation: Observation | None
    task: SimTask
    info: dict[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    """A step's outcome. `info`: {"source", "retries", "problems", "step"} and "shadow"
    ({"match", "real_observation"}) when the real backend ran beside the answer."""

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, JSON] = field(default_factory=dict)


class Session:
    """One episode of `env`, answered by `router` (which must be a router of this env)."""

    def __init__(self, env: SimEnv, router: Router, *, episode_id: str) -> None:
        if router.env is not env:
            raise ValueError(f"the router answers env {router.env.name!r}, not {env.name!r}")
        self.env = env
        self.router = router
        self.episode_id = episode_id
        self._episode: Episode | None = None
        self._task: SimTask | None = None
        self._state: JSON = None
        self._seed = 0
        self._done = False
        self._closed = False

    def reset(
        self, task_id: str | None = None, initial_state: JSON = None, seed: int | None = None
    ) -> Reset:
        """Start (or restart) the episode on task `task_id`, or one chosen by `seed`."""
        if self._closed:
            raise SessionError(f"session {self.episode_id!r} is closed")
        task = self.env.task_for(task_id, seed)
        state = task.initial_state if initial_state is None else initial_state
        observation = task.initial_observation if initial_state is None else None
        self._task, self._state, self._done = task, copy.deepcopy(state), False
        self._seed = 0 if seed is None else seed
        self._episode = Episode(
            episode_id=self.episode_id,
            env=self.env.name,
            task=Task(task.id, task.instruction, list(task.apis)),
            steps=[],
            tools=list(task.tools),
            rules=list(self.env.rules),
            initial_state=copy.deepcopy(state),
            initial_observation=copy.deepcopy(observation),
            seed=seed,
            provenance=Provenance(source="simworld", origin=f"simulated {self.env.name} session"),
            volatile=list(self.env.volatile),
        )
        info: dict[str, JSON] = {"episode_id": self.episode_id, "task_id": task.id, "seed": seed}
        return Reset(copy.deepcopy(observation), task, info)

    def step(self, action: Action) -> StepResult:
        """Take `action` (see the module docstring)."""
        episode, task = self._live()
        self._check_kind(action)
        before = self._state
        routed = self._answer(episode, task, action)
        problems = list(routed.problems)
        after = before
        if routed.answer.patch is not None and before is not None:
            try:
                after = apply(before, routed.answer.patch)
            except PatchError as exc:
                problems.append(f"patch not applied: {exc}")
        observation = routed.answer.observation
        verdict = self.env.check(copy.deepcopy(before), action, observation, copy.deepcopy(after))
        index = len(episode.steps)
        truncated = index + 1 >= self.env.max_steps and not verdict.terminated
        info = _info(routed, problems, index)
        episode.steps.append(
            Step(
                action=copy.deepcopy(action),
                observation=copy.deepcopy(observation),
                state=copy.deepcopy(before),
                next_state=copy.deepcopy(after),
                reward=verdict.reward,
                terminated=verdict.terminated,
                truncated=truncated,
                info=_step_info(info),
            )
        )
        self._state, self._done = after, verdict.terminated or truncated
        return StepResult(
            copy.deepcopy(observation), verdict.reward, verdict.terminated, truncated, info
        )

    def state(self) -> dict[str, JSON]:
        """{"episode_id", "task_id", "step_count", "state", "done"} (task None before reset)."""
        return {
            "episode_id": self.episode_id,
            "task_id": None if self._task is None else self._task.id,
            "step_count": 0 if self._episode is None else len(self._episode.steps),
            "state": copy.deepcopy(self._state),
            "done": self._done,
        }

    def episode(self) -> Episode:
        """The session so far as an Episode (a copy), ready to record and train on."""
        if self._episode is None:
            raise SessionError(f"session {self.episode_id!r} has no episode yet: reset() first")
        return copy.deepcopy(self._episode)

    def close(self) -> None:
        """End the session; any later reset or step is a SessionError."""
        self._closed = True

    def _live(self) -> tuple[Episode, SimTask]:
        if self._closed:
            raise SessionError(f"session {self.episode_id!r} is closed")
        if self._episode is None or self._task is None:
            raise SessionError(f"session {self.episode_id!r} has not been reset: reset() first")
        if self._done:
            last = self._episode.steps[-1]
            how = "terminated" if last.terminated else f"truncated at {self.env.max_steps} steps"
            raise SessionError(f"episode {self.episode_id!r} is over ({how}): reset() to go on")
        return self._episode, self._task

    def _check_kind(self, action: Action) -> None:
        kind = self.env.action_kind
        if kind == "tool_calls" and isinstance(action, TextAction):
            raise ActionError(f"env {self.env.name!r} takes tool calls, not a text action")
        if kind == "text" and isinstance(action, ToolCallsAction):
            raise ActionError(f"env {self.env.name!r} takes a text action, not tool calls")
        if isinstance(action, ToolCallsAction) and not action.calls:
            raise ActionError("a tool-calls action needs at least one call")

    def _answer(self, episode: Episode, task: SimTask, action: Action) -> Routed | _Rejected:
        if isinstance(action, ToolCallsAction):
            tools = {t.name: t for t in task.tools}
            checks = validate_calls(action, tools, style=self.env.error_style)
            if not all(c.ok for c in checks):
                return _Rejected(Answer(error_observation(action, checks)))
        seed = derive_seed("session-step", self._seed, len(episode.steps))
        return self.router.answer(episode, self._state, action, seed)


@dataclass(frozen=True)
class _Rejected:
    """A step that schema validation answered (no router involved)."""

    answer: Answer
    source: str = "validation"
    retries: int = 0
    problems: list[str] = field(default_factory=list)
    shadow: None = None


def _info(routed: Routed | _Rejected, problems: list[str], index: int) -> dict[str, JSON]:
    info: dict[str, JSON] = {
        "source": routed.source,
        "retries": routed.retries,
        "problems": problems,
        "step": index,
    }
    if routed.shadow is not None:
        info["shadow"] = {
            "match": routed.shadow.json_canonical_match,
            "real_observation": to_json(routed.shadow.real.observation),
        }
    return info


def _step_info(info: dict[str, JSON]) -> dict[str, JSON]:
    """What a recorded step keeps of the step's info: the source, and the retries, problems
    and shadow comparison when there are any."""
    kept = {"source": info["source"]}
    kept.update({k: info[k] for k in ("retries", "problems", "shadow") if info.get(k)})
    return copy.deepcopy(kept)


__all__ = ["ActionError", "Reset", "Session", "SessionError", "StepResult"]
