"""The native REST API's wire shapes (pydantic, at the boundary only) and the converters
between them and simworld's records. rest.py documents the routes; the shapes are:

Requests (unknown fields are refused, 422, except inside OpenAI tool-call objects):
    CreateEpisode  {"env", "task_id"?, "seed"? (>= 0), "initial_state"?}
    StepBody       exactly one of
                     {"tool_calls": [{"id", "type": "function", "function": {"name",
                                      "arguments": "<JSON string>"}}]}     OpenAI tool calls
                     {"text": "..."}                                      a text action
                     {"action": {"kind": "tool_calls" | "text", ...}}     a simworld Action
    SimulateBody   StepBody's fields plus {"env", "task_id"?, "state"?, "seed"?}

Responses:
    EnvList        {"envs": [{"name", "action_kind", "tasks", "task_ids", "max_steps", "tools"}]}
    Created        {"episode_id", "env", "task_id", "instruction", "action_kind", "max_steps",
                    "observation" (simworld Observation JSON, or null), "tools" (OpenAI
                    function tools), "info"}
    StepOut        {"observation" (simworld Observation JSON), "messages" (OpenAI tool
                    messages {"role": "tool", "tool_call_id", "content"}, one per result; []
                    for a text env), "reward", "terminated", "truncated", "info" ({"source",
                    "retries", "problems", "step", "shadow"?})}
    EpisodeView    {"episode_id", "env", "task_id", "instruction", "step_count", "done",
                    "state", "steps" (simworld Step JSON, in order)}
    Closed         {"episode_id", "closed": true}
    Simulated      StepOut plus {"env", "task_id", "state" (the state after the action)}

A tool call's `arguments` string is kept as sent (`raw_arguments`): when it is not a JSON
object the call goes on with `arguments` None, and schema validation answers it with the
error result a real API gives (a tool-level error, not a 4xx), as it answers unknown tools
and schema-invalid arguments. What cannot be an action at all is a 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from simworld.data.formats.base import parse_arguments
from simworld.data.formats.tools import openai_tool
from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    RecordError,
    TextAction,
    ToolCall,
    ToolCallsAction,
    ToolResultsObservation,
    from_json,
    to_json,
)
from simworld.server.hub import BadRequest, Live
from simworld.simulators.env import SimEnv
from simworld.simulators.session import Reset, StepResult

SAMPLE_TASK_IDS = 5


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------------------- requests


class FunctionCall(BaseModel):
    # OpenAI objects pass through as received from other APIs, so extra keys are ignored.
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    arguments: str = Field(description="the arguments as a JSON string, as OpenAI sends them")


class OpenAIToolCall(BaseModel):
    model_config = ConfigDict(extra="ignore")  # e.g. a streamed call's "index"

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class StepBody(Wire):
    """One action, in exactly one of three forms (the wire shape protocols.md §8.1 fixes,
    hence optional fields checked by hand rather than a tagged union)."""

    tool_calls: list[OpenAIToolCall] | None = None
    text: str | None = None
    action: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> StepBody:
        forms = ("tool_calls", "text", "action")
        given = [name for name in forms if getattr(self, name) is not None]
        if len(given) != 1:
            got = "none of them" if not given else " and ".join(given)
            raise ValueError(f"send exactly one of tool_calls, text, action; got {got}")
        return self


class CreateEpisode(Wire):
    env: str
    task_id: str | None = None
    seed: int | None = Field(default=None, ge=0)
    initial_state: Any = None


class SimulateBody(StepBody):
    env: str
    task_id: str | None = None
    state: Any = None
    seed: int | None = Field(default=None, ge=0)


# ---------------------------------------------------------------------------- responses


class EnvInfo(Wire):
    name: str
    action_kind: str
    tasks: int
    task_ids: list[str]
    max_steps: int
    tools: list[str]


class EnvList(Wire):
    envs: list[EnvInfo]


class Created(Wire):
    episode_id: str
    env: str
    task_id: str
    instruction: str
    action_kind: str
    max_steps: int
    observation: dict[str, Any] | None
    tools: list[dict[str, Any]]
    info: dict[str, Any]


class ToolMessage(Wire):
    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str


class StepOut(Wire):
    observation: dict[str, Any]
    messages: list[ToolMessage]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Simulated(StepOut):
    env: str
    task_id: str
    state: Any


class EpisodeView(Wire):
    episode_id: str
    env: str
    task_id: str
    instruction: str
    step_count: int
    done: bool
    state: Any
    steps: list[dict[str, Any]]


class Closed(Wire):
    episode_id: str
    closed: bool


# ---------------------------------------------------------------------------- converters


def action_of(body: StepBody) -> Action:
    """The simworld Action a step body names; BadRequest (422) naming the field when the
    body cannot be an action at all."""
    if body.text is not None:
        return TextAction(body.text)
    if body.tool_calls is not None:
        calls = [
            ToolCall(c.id, c.function.name, parse_arguments(raw), raw)
            for c in body.tool_calls
            for raw in [c.function.arguments]
        ]
        action: Action = ToolCallsAction(calls)
        where = "body.tool_calls"
    else:
        try:
            action = from_json(Action, body.action, "body.action")  # type: ignore[arg-type]
        except RecordError as exc:
            raise BadRequest(str(exc)) from exc
        where = "body.action.calls"
    if isinstance(action, ToolCallsAction):
        _check_calls(action.calls, where)
    return action


def _check_calls(calls: Sequence[ToolCall], where: str) -> None:
    if not calls:
        raise BadRequest(f"{where}: a tool-calls action needs at least one call")
    seen: set[str] = set()
    for i, call in enumerate(calls):
        if call.id in seen:
            raise BadRequest(f"{where}[{i}].id: call id {call.id!r} is used twice in one action")
        seen.add(call.id)


def env_info(env: SimEnv) -> EnvInfo:
    tools = {tool.name for task in env.tasks.values() for tool in task.tools}
    return EnvInfo(
        name=env.name,
        action_kind=env.action_kind,
        tasks=len(env.tasks),
        task_ids=list(env.tasks)[:SAMPLE_TASK_IDS],
        max_steps=env.max_steps,
        tools=sorted(tools),
    )


def created(live: Live, first: Reset, env: SimEnv) -> Created:
    task = first.task
    return Created(
        episode_id=live.id,
        env=live.env,
        task_id=task.id,
        instruction=task.instruction,
        action_kind=env.action_kind,
        max_steps=env.max_steps,
        observation=_observation(first.observation),
        tools=[openai_tool(spec) for spec in task.tools],
        info=first.info,
    )


def step_out(result: StepResult) -> StepOut:
    return StepOut(
        observation=to_json(result.observation),
        messages=tool_messages(result.observation),
        reward=result.reward,
        terminated=result.terminated,
        truncated=result.truncated,
        info=result.info,
    )


def simulated(result: StepResult, env: str, task_id: str, after: JSON) -> Simulated:
    return Simulated(**step_out(result).model_dump(), env=env, task_id=task_id, state=after)


def tool_messages(observation: Observation) -> list[ToolMessage]:
    """The observation as OpenAI tool messages, one per result ([] for text)."""
    if not isinstance(observation, ToolResultsObservation):
        return []
    return [ToolMessage(tool_call_id=r.call_id, content=r.text) for r in observation.results]


def episode_view(episode: Episode) -> EpisodeView:
    """The episode so far; its state is the last step's state after (the initial state
    before any step), as the session keeps it."""
    last = episode.steps[-1] if episode.steps else None
    return EpisodeView(
        episode_id=episode.episode_id,
        env=episode.env,
        task_id=episode.task.id,
        instruction=episode.task.instruction,
        step_count=len(episode.steps),
        done=last is not None and (last.terminated or last.truncated),
        state=episode.initial_state if last is None else last.next_state,
        steps=[to_json(step) for step in episode.steps],
    )


def _observation(observation: Observation | None) -> dict[str, Any] | None:
    return None if observation is None else dict(to_json(observation))


__all__ = [
    "Closed",
    "CreateEpisode",
    "Created",
    "EnvInfo",
    "EnvList",
    "EpisodeView",
    "OpenAIToolCall",
    "SimulateBody",
    "Simulated",
    "StepBody",
    "StepOut",
    "ToolMessage",
    "action_of",
    "created",
    "env_info",
    "episode_view",
    "simulated",
    "step_out",
    "tool_messages",
]
