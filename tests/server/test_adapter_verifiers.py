"""The verifiers adapter (simworld/adapters/verifiers.py, verifiers 0.1.14): the dataset
`load_environment` builds, and whole rollouts through verifiers' own loop with a scripted
model in place of an LLM, scored by the env's rubric, against a real uvicorn server on
127.0.0.1.

    python -m pytest -q -m slow tests/server/test_adapter_verifiers.py

verifiers 0.1.14 pins datasets<4.7, so it lives in its own venv (tests/server/
client_venvs.py), where tests/server/verifiers_adapter_check.py runs. The hub runs
without a world model: mock and frozenlake are answered by their exact real backends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from client_venvs import client_python, run_check

from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.envs.mock import TOOLS
from simworld.simulators.router import RouterConfig

VERIFIERS = "0.1.14"
CHECK = Path(__file__).with_name("verifiers_adapter_check.py")


@pytest.mark.slow
def test_load_environment_runs_rollouts_through_verifiers(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    python = client_python(
        f"verifiers-{VERIFIERS}", [f"verifiers=={VERIFIERS}"], with_simworld=True
    )
    hub = make_hub(("mock", "frozenlake"), router=RouterConfig(max_real_cost=1.0))
    report = run_check(python, CHECK, serve(create_app(Settings(api_keys=()), hub=hub)))
    assert report["version"] == VERIFIERS

    tool = report["tool"]
    assert tool["is_multiturn"] and tool["row"]["answer"] == ""
    assert tool["row"]["prompt"] == [
        {"role": "user", "content": "Bring the counter's total to 10 or more."}
    ]
    info = json.loads(tool["row"]["info"])
    assert info["task_id"] == "count-0"
    assert info["tool_defs"] == [
        {"name": t.name, "description": t.description, "parameters": t.input_schema} for t in TOOLS
    ]
    assert tool["offered"] == [["add", "get"]] * 3

    won = tool["won"]
    assert won["error"] is None and won["stop"] == "has_final_env_response"
    tool_messages = [m for m in won["completion"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages[:2]] == [
        ("c1", '{"total": 4}'),
        ("c2", '{"total": 4}'),
    ]
    assert (
        tool_messages[2]["tool_call_id"] == "c3" and "minimum of 1" in tool_messages[2]["content"]
    )
    assert tool_messages[3] == {"role": "tool", "tool_call_id": "c4", "content": '{"total": 10}'}
    assert (won["reward"], won["steps"], won["deleted"]) == (1.0, 3, True)

    idle = tool["no_tools"]
    assert idle["stop"] == "no_tools_called" and idle["steps"] == 0
    assert (idle["reward"], idle["deleted"]) == (0.0, True)

    text = report["text"]
    lake = load_sim_env("frozenlake")
    first = lake.task_for(seed=0)
    assert json.loads(text["rows"][0]["info"]) == {"task_id": first.id}
    assert text["rows"][0]["question"].startswith(first.instruction + "\n\n")
    rollout = text["rollout"]
    assert rollout["stop"] == "max_turns_reached" and rollout["steps"] == 1
    user = [m["content"] for m in rollout["completion"] if m["role"] == "user"]
    assert len(user) == 1 and "invalid action 'JUMP'" in user[0]
