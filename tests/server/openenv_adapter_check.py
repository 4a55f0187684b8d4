"""Drives simworld's OpenEnv `Environment` adapter (simworld/adapters/openenv.py) with
openenv-core's own types, against a running simworld server; prints one JSON report line.
Run by tests/server/test_adapter_openenv.py with the python of a venv that has
openenv-core 0.3.0 and simworld (editable, no dependencies).

    python openenv_adapter_check.py http://127.0.0.1:PORT

Three uses: a tool env by hand; a tool env the way NeMo Gym's OpenEnv resources server
uses an environment class (zero-argument construction, `reset()`, `ListToolsAction` to
discover tools, `CallToolAction` per call, rewards summed, `close()`); a text env through
the async entry points OpenEnv's servers call.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
)

from simworld.adapters.client import ServerError, SimworldClient
from simworld.adapters.openenv import (
    MessageAction,
    SimworldEnvironment,
    SimworldResetObservation,
    SimworldTextObservation,
)


def tool_env(base: str) -> dict[str, Any]:
    env = SimworldEnvironment(base, "mock")
    report: dict[str, Any] = {"is_environment": isinstance(env, Environment)}
    report["state_before"] = env.state.model_dump()
    first = env.reset(task_id="count-0")
    assert isinstance(first, SimworldResetObservation)
    report["reset"] = first.model_dump(mode="json")
    listed = env.step(ListToolsAction())
    assert isinstance(listed, ListToolsObservation)
    report["listed"] = [tool.name for tool in listed.tools]
    added = env.step(CallToolAction(tool_name="add", arguments={"n": 3}))
    assert isinstance(added, CallToolObservation)
    report["add"] = added.model_dump(mode="json")
    invalid = env.step(CallToolAction(tool_name="add", arguments={"n": 0}))
    unknown = env.step(CallToolAction(tool_name="nope", arguments={}))
    report["errors"] = [invalid.error.error_type.value, unknown.error.error_type.value]
    report["state"] = env.state.model_dump()
    report["metadata"] = env.get_metadata().name
    episode = env.episode_id
    env.close()
    with SimworldClient(base) as client:
        try:
            client.episode(str(episode))
            report["closed"] = False
        except ServerError as exc:
            report["closed"] = exc.status == 404
    return report


def nemo_gym_style(base: str) -> dict[str, Any]:
    """As nemo_gym's resources_servers/openenv/app.py (0.4.0) drives `env_class`."""
    os.environ["SIMWORLD_URL"], os.environ["SIMWORLD_ENV"] = base, "mock"
    probe = SimworldEnvironment()
    probe.reset()
    tools = probe.step(ListToolsAction()).tools
    probe.close()
    env = SimworldEnvironment()
    first = env.reset()
    reward = float(first.reward) if first.reward is not None else 0.0
    observation = env.step(CallToolAction(tool_name="add", arguments={"n": 10}))
    reward += float(observation.reward)
    try:
        env.step(CallToolAction(tool_name="get", arguments={}))
        after_done = "answered"
    except ServerError as exc:
        after_done = f"{exc.status} {exc.kind}"
    env.close()
    return {
        "tools": [{"name": t.name, "input_schema": t.input_schema} for t in tools],
        "result": observation.result,
        "error": observation.error,
        "reward": reward,
        "done": observation.done,
        "after_done": after_done,
    }


def text_env(base: str) -> dict[str, Any]:
    env = SimworldEnvironment(base, "frozenlake")

    async def episode() -> tuple[Any, Any]:
        first = await env.reset_async(seed=3)
        return first, await env.step_async(MessageAction(message="JUMP"))

    first, step = asyncio.run(episode())
    assert isinstance(step, SimworldTextObservation)
    report = {
        "reset": first.model_dump(mode="json"),
        "step": step.model_dump(mode="json"),
        "step_count": env.state.step_count,
    }
    env.close()
    return report


def main() -> None:
    base = sys.argv[1]
    report = {"tool": tool_env(base), "nemo": nemo_gym_style(base), "text": text_env(base)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
