"""Drives a simworld server with openenv-core's own clients; run with a virtualenv that has
openenv-core (and not simworld), by tests/server/test_openenv_contract.py:

    VENV/bin/python tests/server/openenv_client_check.py TOOL_URL TEXT_URL [REFUSED_URL]

TOOL_URL serves the `mock` env (the counter), TEXT_URL the `frozenlake` env, each as an
OpenEnv base_url (`http://127.0.0.1:PORT/envs/mock`, or under a `/k/<token>` prefix).
Over `/ws`: GenericEnvClient (sync wrapper) runs list_tools, reset, step and state, and
MCPToolClient lists and calls tools; over HTTP, every route's body is parsed with
openenv's own pydantic models (ResetResponse, StepResponse, State, SchemaResponse,
EnvironmentMetadata, HealthResponse), whose `extra="forbid"` catches any stray field.
REFUSED_URL, when given, must refuse the client (a server with a key, without the key).
A failed check raises (exit status 1); success prints what was seen as one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
from openenv.core import GenericEnvClient
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    ToolErrorType,
)
from openenv.core.env_server.types import (
    EnvironmentMetadata,
    HealthResponse,
    ResetResponse,
    SchemaResponse,
    State,
    StepResponse,
)
from openenv.core.mcp_client import MCPToolClient


def tool_env_over_ws(url: str) -> dict[str, Any]:
    """list_tools (before any reset, as verifiers does), reset, calls, state."""
    with GenericEnvClient(base_url=url).sync() as env:
        listed = env.step(ListToolsAction())  # a pydantic action: sent as its model_dump()
        tools = ListToolsObservation.model_validate(listed.observation).tools
        assert [t.name for t in tools] == ["add", "get"], tools
        first = env.reset(seed=1)
        assert first.observation["instruction"] and first.done is False
        added = env.step(CallToolAction(tool_name="add", arguments={"n": 4}))
        call = CallToolObservation.model_validate(added.observation)
        assert call.error is None and call.result["data"] == {"total": 4}, call
        refused = env.step({"type": "call_tool", "tool_name": "add", "arguments": {"n": 0}})
        error = CallToolObservation.model_validate(refused.observation).error
        assert error is not None and error.error_type == ToolErrorType.INVALID_ARGS, error
        state = State.model_validate(env.state())
        assert state.step_count == 2 and state.episode_id, state
        try:
            env.step({"type": "call_tool"})
        except RuntimeError as exc:
            assert "VALIDATION_ERROR" in str(exc), exc
        else:
            raise AssertionError("an action without tool_name was accepted")
    return {
        "reset": first.observation,
        "add": {"observation": added.observation, "reward": added.reward, "done": added.done},
        "state": env_state(state),
    }


def mcp_tool_client(url: str) -> dict[str, Any]:
    """openenv's MCPToolClient: tools listed and called through step(), result unwrapped."""
    with MCPToolClient(base_url=url).sync() as env:
        env.reset()
        names = [tool.name for tool in env.list_tools()]
        total = env.call_tool("add", n=6)
        try:
            env.call_tool("add", n=-1)
        except RuntimeError as exc:
            assert "invalid_args" in str(exc), exc
        else:
            raise AssertionError("an invalid call did not raise")
    return {"tools": names, "total": total}


def text_env_over_ws(url: str) -> dict[str, Any]:
    with GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=3)
        moved = env.step({"message": "DOWN"})
        state = State.model_validate(env.state())
    assert state.step_count == 1
    return {
        "reset": first.observation,
        "step": {"observation": moved.observation, "reward": moved.reward, "done": moved.done},
        "state": env_state(state),
    }


def http_routes(url: str, action: dict[str, Any]) -> dict[str, Any]:
    """Every HTTP route, parsed with openenv's own response models."""
    with httpx.Client(base_url=url, timeout=60) as http:
        schema = SchemaResponse.model_validate(ok(http.get("/schema")))
        EnvironmentMetadata.model_validate(ok(http.get("/metadata")))
        HealthResponse.model_validate(ok(http.get("/health")))
        reset = ResetResponse.model_validate(ok(http.post("/reset", json={"seed": 3})))
        step = StepResponse.model_validate(ok(http.post("/step", json={"action": action})))
        state = State.model_validate(ok(http.get("/state")))
    assert state.step_count == 1, state
    return {
        "action_title": schema.action.get("title"),
        "reset": reset.observation,
        "step": step.model_dump(),
    }


def refused(url: str) -> str:
    try:
        GenericEnvClient(base_url=url).sync().connect()
    except ConnectionError as exc:
        return str(exc)
    raise AssertionError(f"{url} let the client in without a token")


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, (response.status_code, response.text)
    return response.json()


def env_state(state: State) -> dict[str, Any]:
    return state.model_dump()


def main(argv: list[str]) -> None:
    tool_url, text_url = argv[0], argv[1]
    report = {
        "tool_ws": tool_env_over_ws(tool_url),
        "mcp_client": mcp_tool_client(tool_url),
        "text_ws": text_env_over_ws(text_url),
        "tool_http": http_routes(tool_url, {"type": "call_tool", "tool_name": "get"}),
        "text_http": http_routes(text_url, {"message": "RIGHT"}),
    }
    if len(argv) > 2:
        report["refused"] = refused(argv[2])
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
