"""OpenEnv's wire shapes (as in openenv-core 0.3.0, PyPI `openenv-core`, import `openenv`)
for simworld's envs, and the conversions between them and simworld's records.

    kind = wire_kind(sim_env)                      # "tools" (bfcl, mock) or "text" (frozenlake)
    action = parse_action(kind, {"type": "call_tool", "tool_name": "add", "arguments": {"n": 2}})
    to_sim_action(action, step=0)                  # ToolCallsAction([ToolCall("call_0_0", ...)])
    schemas(kind)                                  # what GET /schema answers

The requests, responses, state, metadata and health bodies are openenv-core's own
(`ResetRequest`/`StepRequest` allow extra fields; the responses forbid them). Actions and
observations depend on the env's kind, and every observation this module builds validates
against the observation schema `/schema` serves:

- tool envs take OpenEnv's MCP-style actions: `{"type": "call_tool", "tool_name",
  "arguments"}` and `{"type": "list_tools"}` (plus OpenEnv's `metadata`, accepted and
  ignored). Observations:
  - after a reset, `{"instruction", "tools": [{name, description, input_schema}]}`: the
    task's instruction and its tools (OpenEnv sends no observation `metadata`, so what an
    agent needs goes into declared fields);
  - after `list_tools`, `{"tools": [...]}` like OpenEnv's ListToolsObservation;
  - after `call_tool`, `{"tool_name", "result", "error"}` like CallToolObservation.
    `result` is shaped as FastMCP's CallToolResult, which OpenEnv's MCP envs send and its
    clients unwrap through `result["data"]`: `{"content": [{"type": "text", "text"}],
    "structured_content" (the parsed result when it is a JSON object), "meta": null,
    "data" (the parsed result when the text is JSON, else the text), "is_error"}`. An error
    the simulated tool itself reports (a predicted one included) stays in the result with
    `is_error: true`. A call that schema validation rejected before any model was asked
    (the episode still counts the step, as the real API would) has `result: null` and
    `error: {"error_type": "invalid_args" | "tool_not_found", "message"}`, the message
    being the error text the env's real API gives.
- text envs take `{"message": str}`, the field OpenEnv's own text envs use (echo_env's
  EchoAction, textarena_env's TextArenaAction). Observations: after a reset
  `{"instruction", "text"}` (text: the task's first observation; null when the reset gave
  an explicit initial_state), after a step `{"text"}`.

The tool action schema is titled "Action" (the title OpenEnv's MCP envs expose, which
verifiers' OpenEnv taskset reads as "MCP contract") and lists its `type` values in `enum`s
(what verifiers 0.1's OpenEnvEnv looks for); the text action schema is "MessageAction".
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from simworld.data.canonical import observation_text, parse
from simworld.data.records import (
    Action,
    TextAction,
    ToolCall,
    ToolCallsAction,
    ToolResultsObservation,
    ToolSpec,
)
from simworld.simulators.env import SimEnv
from simworld.simulators.session import Reset, StepResult

OPENENV_CORE_VERSION = "0.3.0"
Kind = Literal["tools", "text"]


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------ requests and responses


class ResetRequest(BaseModel):
    """POST /reset (and the /ws reset message's data). Unknown fields are ignored, as
    OpenEnv drops kwargs its env's reset does not take; `task_id` and `initial_state` are
    simworld's own reset arguments."""

    model_config = ConfigDict(extra="allow")

    seed: int | None = Field(default=None, ge=0, description="Random seed (chooses the task)")
    episode_id: str | None = Field(
        default=None, min_length=1, max_length=255, description="The session key (HTTP)"
    )
    task_id: str | None = Field(default=None, description="Start this task (else by seed)")
    initial_state: Any = Field(default=None, description="Start from this state instead")


class StepRequest(BaseModel):
    """POST /step: `{"action": {...}}` (0.3.x), or the bare action itself (0.1.x), which
    then arrives as the extra fields. `episode_id` picks the session (simworld's addition);
    `timeout_s` and `request_id` are accepted and not used."""

    model_config = ConfigDict(extra="allow")

    action: dict[str, Any] | None = Field(default=None, description="The env's action")
    episode_id: str | None = Field(default=None, min_length=1, max_length=255)
    timeout_s: float | None = Field(default=None, gt=0)
    request_id: str | None = Field(default=None, max_length=255)

    def action_data(self) -> dict[str, Any]:
        """The action, whichever form the request used."""
        return self.action if self.action is not None else dict(self.model_extra or {})


class StepResponse(_Forbid):
    """What /reset and /step answer (OpenEnv's ResetResponse and StepResponse)."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False


class State(BaseModel):
    """GET /state: OpenEnv's State plus simworld's task_id, state and done."""

    model_config = ConfigDict(extra="allow", title="State")

    episode_id: str | None = Field(default=None, description="The session's id")
    step_count: int = Field(default=0, ge=0, description="Steps taken this episode")
    task_id: str | None = Field(default=None, description="The task being played")
    state: Any = Field(default=None, description="The simulated environment state")
    done: bool = Field(default=False, description="Whether the episode is over")


class Metadata(_Forbid):
    name: str
    description: str
    readme_content: str | None = None
    version: str | None = None
    author: str | None = None
    documentation_url: str | None = None


class Health(_Forbid):
    status: Literal["healthy", "unhealthy", "degraded"] = "healthy"


class Schemas(_Forbid):
    action: dict[str, Any]
    observation: dict[str, Any]
    state: dict[str, Any]


class WsReset(_Forbid):
    """/ws messages (client to server), each a JSON text frame."""

    type: Literal["reset"]
    data: dict[str, Any] = Field(default_factory=dict)


class WsStep(_Forbid):
    type: Literal["step"]
    data: dict[str, Any]


class WsBare(_Forbid):
    type: Literal["state", "close"]


class WsMcp(_Forbid):
    type: Literal["mcp"]
    data: dict[str, Any]


# ------------------------------------------------------------------ actions


def _type_tag(value: str) -> Any:
    return Field(default=..., json_schema_extra={"enum": [value]})


class CallToolAction(_Forbid):
    type: Literal["call_tool"] = _type_tag("call_tool")
    tool_name: str = Field(min_length=1, description="The tool to call")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored")


class ListToolsAction(_Forbid):
    type: Literal["list_tools"] = _type_tag("list_tools")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored")


class MessageAction(_Forbid):
    message: str = Field(description="The text action (FrozenLake: LEFT, DOWN, RIGHT, UP)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Ignored")


ToolAction = Annotated[CallToolAction | ListToolsAction, Field(discriminator="type")]
WireAction = CallToolAction | ListToolsAction | MessageAction
_TOOL_ACTION: TypeAdapter[CallToolAction | ListToolsAction] = TypeAdapter(ToolAction)


# ------------------------------------------------------------------ observations


class Tool(_Forbid):
    name: str
    description: str
    input_schema: dict[str, Any]


class ToolResetObservation(_Forbid):
    instruction: str
    tools: list[Tool]


class ListToolsObservation(_Forbid):
    tools: list[Tool]


class TextContent(_Forbid):
    type: Literal["text"] = "text"
    text: str


class CallToolResult(_Forbid):
    content: list[TextContent]
    structured_content: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    data: Any = None
    is_error: bool = False


class ToolError(_Forbid):
    error_type: Literal[
        "execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout"
    ]
    message: str


class CallToolObservation(_Forbid):
    tool_name: str
    result: CallToolResult | None = None
    error: ToolError | None = None


class TextResetObservation(_Forbid):
    instruction: str
    text: str | None


class TextStepObservation(_Forbid):
    text: str


ToolObservation = ToolResetObservation | CallToolObservation | ListToolsObservation
TextObservationWire = TextResetObservation | TextStepObservation


# ------------------------------------------------------------------ schemas


def wire_kind(env: SimEnv) -> Kind:
    """The wire kind of `env`: "tools" for tool-calling envs, "text" for text games."""
    return "tools" if env.action_kind == "tool_calls" else "text"


def schemas(kind: Kind) -> Schemas:
    """GET /schema for an env of `kind`: the action, observation and state JSON Schemas."""
    if kind == "tools":
        action = _titled(_TOOL_ACTION.json_schema(), "Action", "A call_tool or list_tools")
        observation = TypeAdapter(ToolObservation).json_schema()
        observation = _titled(observation, "ToolObservation", "After reset/call/list")
    else:
        action = MessageAction.model_json_schema()
        observation = TypeAdapter(TextObservationWire).json_schema()
        observation = _titled(observation, "TextObservation", "After a reset or a step")
    return Schemas(action=action, observation=observation, state=State.model_json_schema())


def metadata_of(env: SimEnv) -> Metadata:
    """GET /metadata: the env's name, what it is, and its domain rules as the readme."""
    kind = "tool-calling" if wire_kind(env) == "tools" else "text"
    rules = "\n".join(f"- {rule}" for rule in env.rules)
    return Metadata(
        name=env.name,
        description=(
            f"simworld's simulated {env.name!r} environment ({kind}, {len(env.tasks)} tasks, "
            f"at most {env.max_steps} steps): a learned world model answers each step"
        ),
        readme_content=f"# {env.name}\n\nDomain rules:\n{rules}\n" if rules else None,
        version=_version(),
        author="simworld",
    )


def _version() -> str | None:
    try:
        return importlib.metadata.version("simworld")
    except importlib.metadata.PackageNotFoundError:
        return None


def _titled(schema: dict[str, Any], title: str, description: str) -> dict[str, Any]:
    return {"title": title, "description": description, **schema}


def parse_action(kind: Kind, data: dict[str, Any]) -> WireAction:
    """`data` as an action of an env of `kind` (pydantic's ValidationError when it is not)."""
    if kind == "tools":
        return _TOOL_ACTION.validate_python(data)
    return MessageAction.model_validate(data)


# ------------------------------------------------------------------ conversions


def to_sim_action(action: CallToolAction | MessageAction, step: int) -> Action:
    """The simworld action of a wire action. The call id takes the recorded data's form
    (`call_<step>_0`), so an OpenEnv episode reads like a recorded one."""
    if isinstance(action, MessageAction):
        return TextAction(action.message)
    raw = json.dumps(action.arguments, ensure_ascii=False)
    return ToolCallsAction([ToolCall(f"call_{step}_0", action.tool_name, action.arguments, raw)])


def wire_tools(tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> list[Tool]:
    return [
        Tool(name=t.name, description=t.description, input_schema=t.input_schema) for t in tools
    ]


def env_tools(env: SimEnv) -> list[Tool]:
    """Every tool of the env's tasks, first occurrence of each name (what `list_tools`
    shows before a reset has chosen a task)."""
    seen: dict[str, ToolSpec] = {}
    for task in env.tasks.values():
        for tool in task.tools:
            seen.setdefault(tool.name, tool)
    return wire_tools(list(seen.values()))


def reset_response(kind: Kind, first: Reset) -> StepResponse:
    """What a reset answers: the task's instruction and tools, or its first text."""
    observation: BaseModel
    if kind == "tools":
        observation = ToolResetObservation(
            instruction=first.task.instruction, tools=wire_tools(first.task.tools)
        )
    else:
        text = observation_text(first.observation) if first.observation is not None else None
        observation = TextResetObservation(instruction=first.task.instruction, text=text)
    return StepResponse(observation=observation.model_dump(mode="json"), reward=None, done=False)


def step_response(
    kind: Kind, action: CallToolAction | MessageAction, result: StepResult, tools: set[str]
) -> StepResponse:
    """What a step answers; `tools` are the task's tool names (to tell an unknown tool
    from invalid arguments when validation rejected the call)."""
    observation: BaseModel
    if isinstance(action, CallToolAction):
        observation = _call_observation(action.tool_name, result, tools)
    else:
        observation = TextStepObservation(text=observation_text(result.observation))
    return StepResponse(
        observation=observation.model_dump(mode="json"),
        reward=result.reward,
        done=result.terminated or result.truncated,
    )


def list_tools_response(tools: list[Tool], done: bool) -> StepResponse:
    observation = ListToolsObservation(tools=tools)
    return StepResponse(observation=observation.model_dump(mode="json"), reward=None, done=done)


def _call_observation(name: str, result: StepResult, tools: set[str]) -> CallToolObservation:
    observation = result.observation
    if not isinstance(observation, ToolResultsObservation) or not observation.results:
        text = observation_text(observation)
        error = ToolError(error_type="execution_error", message=text or "no result")
        return CallToolObservation(tool_name=name, error=error)
    first = observation.results[0]
    if result.info.get("source") == "validation":
        kind: Literal["invalid_args", "tool_not_found"] = (
            "invalid_args" if name in tools else "tool_not_found"
        )
        return CallToolObservation(
            tool_name=name, error=ToolError(error_type=kind, message=first.text)
        )
    ok, parsed = parse(first.text)
    structured = first.structured if first.structured is not None else (parsed if ok else None)
    wire = CallToolResult(
        content=[TextContent(text=first.text)],
        structured_content=structured if isinstance(structured, dict) else None,
        data=structured if structured is not None else first.text,
        is_error=first.is_error,
    )
    return CallToolObservation(tool_name=name, result=wire)


__all__ = [
    "OPENENV_CORE_VERSION",
    "CallToolAction",
    "CallToolObservation",
    "Health",
    "Kind",
    "ListToolsAction",
    "MessageAction",
    "Metadata",
    "ResetRequest",
    "Schemas",
    "State",
    "StepRequest",
    "StepResponse",
    "Tool",
    "WireAction",
    "WsBare",
    "WsMcp",
    "WsReset",
    "WsStep",
    "env_tools",
    "list_tools_response",
    "metadata_of",
    "parse_action",
    "reset_response",
    "schemas",
    "step_response",
    "to_sim_action",
    "wire_kind",
    "wire_tools",
]
