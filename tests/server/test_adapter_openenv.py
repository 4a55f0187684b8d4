"""The OpenEnv `Environment` adapter (simworld/adapters/openenv.py) with openenv-core 0.3.0's
own types, in-process as NeMo Gym uses environment classes, against a real uvicorn server
on 127.0.0.1.

    python -m pytest -q -m slow tests/server/test_adapter_openenv.py

openenv-core lives in its own venv (tests/server/client_venvs.py; the one
test_openenv_contract.py makes), where tests/server/openenv_adapter_check.py runs. The hub
runs without a world model: mock and frozenlake are answered by their exact real backends.
"""

from __future__ import annotations

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

OPENENV_CORE = "0.3.0"
CHECK = Path(__file__).with_name("openenv_adapter_check.py")


@pytest.mark.slow
def test_the_environment_subclass_proxies_to_the_server(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    python = client_python(
        f"openenv-core-{OPENENV_CORE}", [f"openenv-core=={OPENENV_CORE}"], with_simworld=True
    )
    hub = make_hub(("mock", "frozenlake"), router=RouterConfig(max_real_cost=1.0))
    report = run_check(python, CHECK, serve(create_app(Settings(api_keys=()), hub=hub)))

    tool = report["tool"]
    assert tool["is_environment"] and tool["state_before"] == {"episode_id": None, "step_count": 0}
    assert tool["reset"]["instruction"] == "Bring the counter's total to 10 or more."
    assert [t["name"] for t in tool["reset"]["tools"]] == tool["listed"] == ["add", "get"]
    assert (tool["reset"]["reward"], tool["reset"]["done"]) == (None, False)
    add = tool["add"]
    assert add["tool_name"] == "add" and add["error"] is None
    assert add["result"]["data"] == {"total": 3} and add["result"]["is_error"] is False
    assert (add["reward"], add["done"]) == (0.0, False)
    assert tool["errors"] == ["invalid_args", "tool_not_found"]
    assert tool["state"]["state"] == {"total": 3} and tool["state"]["step_count"] == 3
    assert tool["metadata"] == "mock" and tool["closed"] is True

    nemo = report["nemo"]
    schemas = {tool.name: tool.input_schema for tool in TOOLS}
    assert {t["name"]: t["input_schema"] for t in nemo["tools"]} == schemas
    assert nemo["result"]["data"] == {"total": 10} and nemo["error"] is None
    assert (nemo["reward"], nemo["done"]) == (1.0, True)
    assert nemo["after_done"] == "409 conflict"

    text = report["text"]
    task = load_sim_env("frozenlake").task_for(seed=3)
    assert text["reset"]["instruction"] == task.instruction
    assert text["reset"]["text"] == "\nAFFF\nFFFF\nFFFF\nFFHG\n" and text["reset"]["tools"] == []
    assert "invalid action 'JUMP'" in text["step"]["text"] and text["step_count"] == 1
    assert (text["step"]["reward"], text["step"]["done"]) == (0.0, False)
