"""StableToolBench's virtual API server route, `POST /virtual`, answered by simworld's envs:
one stateless tool call, for comparability with the ToolBench / StableToolBench /
MirrorAPI line of work (THUNLP-MT/StableToolBench, server/main.py).

    curl -s localhost:8000/virtual -H 'content-type: application/json' -d '{"category": "mock",
         "tool_name": "mock", "api_name": "add", "tool_input": "{\\"n\\": 3}", "strip": "",
         "toolbench_key": ""}'
    -> {"error": "", "response": "{\\"total\\": 3}"}

Request: StableToolBench's `{"category", "tool_name", "api_name", "tool_input" (a JSON
string or an object), "strip", "toolbench_key"}`; `strip` and `toolbench_key` may be
left out and are not used (this server's own token guards it: clients that cannot send a
bearer header use the `/k/<token>/virtual` prefix), unknown fields are ignored, as
StableToolBench's model ignores them. simworld adds two optional fields: `task_id` (the
task whose state and tools the call is simulated in) and `state` (the state to simulate
it from; default the task's own initial state).

Mapping, in order:
- env: the served env named by `tool_name`, else by `category`; else the one served env
  with a tool that `api_name` names (none, or several: an error naming them).
- tool: the env's tool named `api_name` as given, else ToolBench's function name for it,
  `<api>_for_<tool>` (both parts standardized as ToolBench does: lower case, runs of other
  characters than letters, digits and "_" made one "_", "get_" before a leading digit),
  else the standardized `api_name`.
- task: `task_id`, else the env's first task that has the tool.
- arguments: `tool_input` parsed as JSON ("" is {}); an object is sent as it came.

Response: always `{"error": str, "response": str}`, HTTP 200, as StableToolBench answers:
- the simulated tool's answer (an API error it predicts included): `{"error": "",
  "response": <the result text>}`;
- a call the env's schema validation refused (an unknown tool of the task, arguments that
  break its input schema): `{"error": <the env's error text>, "response": ""}`;
- `tool_input` that is not JSON: `{"error": "Tool input parse error...\\n", "response":
  ""}` (StableToolBench's own text); `api_name` "chat_with_user" that no env has as a tool:
  `{"error": "", "response": "Chat with user."}` (StableToolBench's shortcut);
- no env or tool matches, an unknown task, a state the env cannot take, or no world model
  to answer: `{"error": <why>, "response": ""}`, counted in the metrics by kind.
A body that misses a required field or has the wrong types is FastAPI's 422, as in
StableToolBench. The simulation is `Hub.simulate`: a throwaway session, never recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from simworld.data.formats.base import parse_arguments
from simworld.data.records import ToolCall, ToolCallsAction, ToolResultsObservation
from simworld.server.deps import HubDep
from simworld.server.hub import Hub, HubError, NotFound
from simworld.simulators.env import SimEnv

PARSE_ERROR = "Tool input parse error...\n"  # StableToolBench's text
CHAT_WITH_USER = "chat_with_user"

router = APIRouter(tags=["StableToolBench"])


class VirtualRequest(BaseModel):
    """StableToolBench's request (its `Info` model) plus simworld's task_id and state."""

    model_config = ConfigDict(extra="ignore")

    category: str = Field(description="ToolBench category (or a served env's name)")
    tool_name: str = Field(description="ToolBench tool (or a served env's name)")
    api_name: str = Field(description="The API: a tool of the env")
    tool_input: str | dict[str, Any] = Field(description="Its arguments: JSON text or object")
    strip: str = Field(default="", description="Accepted, not used")
    toolbench_key: str = Field(default="", description="Accepted, not used")
    task_id: str | None = Field(default=None, description="simworld: the task to simulate in")
    state: Any = Field(default=None, description="simworld: the state to simulate from")


class VirtualResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    error: str
    response: str


@router.post("/virtual")
def virtual(body: VirtualRequest, hub: HubDep) -> VirtualResponse:
    """One simulated API call, answered in StableToolBench's shape."""
    raw = _raw_input(body.tool_input)
    if raw is None:
        return VirtualResponse(error=PARSE_ERROR, response="")
    try:
        found = resolve(hub, body.category, body.tool_name, body.api_name)
        if found is None:
            return VirtualResponse(error="", response="Chat with user.")
        env, tool = found
        task_id = body.task_id or _task_with(hub.env(env), tool)
        call = ToolCall("call_0", tool, parse_arguments(raw), raw)
        _, result, _ = hub.simulate(env, ToolCallsAction([call]), task_id=task_id, state=body.state)
    except HubError as exc:
        hub.metrics.error(exc.kind)
        return VirtualResponse(error=exc.message, response="")
    observation = result.observation
    assert isinstance(observation, ToolResultsObservation)  # a tool env answers a tool call
    text = observation.results[0].text
    if result.info.get("source") == "validation":
        return VirtualResponse(error=text, response="")
    return VirtualResponse(error="", response=text)


def resolve(hub: Hub, category: str, tool_name: str, api_name: str) -> tuple[str, str] | None:
    """(env, tool) for a StableToolBench request (see the module docstring); None for
    "chat_with_user" when no env has it; NotFound when nothing matches."""
    candidates = _tool_candidates(tool_name, api_name)
    named = next((n for n in (tool_name, category) if n in hub.envs), None)
    envs = [named] if named is not None else list(hub.envs)
    matches = [
        (env, tool)
        for env in envs
        for tool in [next((c for c in candidates if c in _tools(hub.envs[env])), None)]
        if tool is not None
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches and api_name == CHAT_WITH_USER:
        return None
    if not matches:
        where = f"env {named!r}" if named is not None else f"any served env ({', '.join(envs)})"
        raise NotFound(f"no tool of {where} is named {' or '.join(map(repr, candidates))}")
    raise NotFound(
        f"api {api_name!r} is a tool of several envs ({', '.join(e for e, _ in matches)}): "
        "name the env in tool_name or category"
    )


def standardize(name: str) -> str:
    """A ToolBench name standardized: lower case, runs of characters other than letters,
    digits and "_" made one "_", no "_" at either end, "get_" before a leading digit."""
    cleaned = re.sub(r"[^0-9a-z_\u4e00-\u9fa5]+", "_", name.lower())
    cleaned = re.sub(r"_+", "_", cleaned).strip("_")
    return f"get_{cleaned}" if cleaned[:1].isdigit() else cleaned


def _tool_candidates(tool_name: str, api_name: str) -> list[str]:
    forms = [api_name, f"{standardize(api_name)}_for_{standardize(tool_name)}"]
    return list(dict.fromkeys([*forms, standardize(api_name)]))


def _tools(env: SimEnv) -> set[str]:
    return {tool.name for task in env.tasks.values() for tool in task.tools}


def _task_with(env: SimEnv, tool: str) -> str:
    return next(t.id for t in env.tasks.values() if any(s.name == tool for s in t.tools))


def _raw_input(tool_input: str | dict[str, Any]) -> str | None:
    """The arguments as the JSON text a tool call carries; None when a string is not
    JSON (StableToolBench's parse error)."""
    if isinstance(tool_input, dict):
        return json.dumps(tool_input, ensure_ascii=False)
    if not tool_input.strip():
        return "{}"
    try:
        json.loads(tool_input)
    except ValueError:
        return None
    return tool_input


__all__ = ["PARSE_ERROR", "VirtualRequest", "VirtualResponse", "resolve", "router", "standardize"]
