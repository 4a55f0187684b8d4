"""OpenEnv contract: openenv-core's real clients against our server, and the same seed
giving the same episode over the native REST API, OpenEnv HTTP and OpenEnv `/ws`.

    python -m pytest -q -m slow tests/server/test_openenv_contract.py

openenv-core pulls in gradio, fastmcp and more, so it lives in its own virtualenv, made
once and then reused (tests/server/client_venvs.py). The client script
tests/server/openenv_client_check.py runs with that venv's python. The tests skip, saying
why, only when pip cannot reach the package index.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from client_venvs import client_python, run_check
from websockets.sync.client import connect

from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.openenv_wire import OPENENV_CORE_VERSION
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.world_model import WorldModel

OPENENV_CORE = OPENENV_CORE_VERSION  # the version the wire shapes were read from
CHECK = Path(__file__).with_name("openenv_client_check.py")
KEY = "contract-key-0123456789"


Serve = Callable[..., str]


# ---------------------------------------------------------------------- openenv-core's client


@pytest.fixture(scope="module")
def openenv_python() -> Path:
    return client_python(f"openenv-core-{OPENENV_CORE}", [f"openenv-core=={OPENENV_CORE}"])


@pytest.fixture()
def exact_hub(make_hub: Callable[..., Hub]) -> Hub:
    """mock and frozenlake without a model (their exact real backends answer)."""
    return make_hub(("mock", "frozenlake"), router=RouterConfig(max_real_cost=1.0))


@pytest.mark.slow
def test_openenv_core_clients_drive_a_tool_env_and_a_text_env(
    openenv_python: Path, serve: Serve, exact_hub: Hub
) -> None:
    base = serve(create_app(Settings(api_keys=()), hub=exact_hub))
    # The tool env at the root (the first env), the text env under /envs/.
    report = run_check(openenv_python, CHECK, base, f"{base}/envs/frozenlake")
    tool = report["tool_ws"]
    assert tool["add"]["observation"]["result"]["data"] == {"total": 4}
    assert (tool["add"]["reward"], tool["add"]["done"]) == (0.0, False)
    assert tool["state"]["state"] == {"total": 4} and tool["state"]["step_count"] == 2
    assert tool["reset"]["instruction"] == "Bring the counter's total to 10 or more."
    assert report["mcp_client"] == {"tools": ["add", "get"], "total": {"total": 6}}
    text = report["text_ws"]
    assert text["reset"] == {
        "instruction": load_sim_env("frozenlake").task_for(seed=3).instruction,
        "text": "\nAFFF\nFFFF\nFFFF\nFFHG\n",
    }
    assert set(text["step"]["observation"]) == {"text"} and text["state"]["step_count"] == 1
    assert report["tool_http"]["action_title"] == "Action"
    assert report["tool_http"]["step"]["observation"]["result"]["data"] == {"total": 0}
    assert report["text_http"]["action_title"] == "MessageAction"


@pytest.mark.slow
def test_openenv_core_client_through_the_secret_url_prefix(
    openenv_python: Path, serve: Serve, exact_hub: Hub
) -> None:
    base = serve(create_app(Settings(api_keys=(KEY,)), hub=exact_hub))
    report = run_check(
        openenv_python,
        CHECK,
        f"{base}/k/{KEY}/envs/mock",
        f"{base}/k/{KEY}/envs/frozenlake",
        f"{base}/envs/mock",  # no key: the handshake is refused
    )
    assert report["tool_ws"]["state"]["state"] == {"total": 4}
    assert "401" in report["refused"]


# ---------------------------------------------------------------------- same seed, same episode


def rest_episode(http: httpx.Client, env: str, seed: int, actions: list[Any]) -> list[Any]:
    """The episode over the native REST API, as (text, is_error, reward, done) per step."""
    created = http.post("/v1/episodes", json={"env": env, "seed": seed})
    assert created.status_code == 201, created.text
    episode = created.json()["episode_id"]
    seen: list[Any] = [created.json()["task_id"]]
    for index, action in enumerate(actions):
        if isinstance(action, str):
            body: dict[str, Any] = {"text": action}
        else:
            arguments = json.dumps(action["arguments"])
            function = {"name": action["tool_name"], "arguments": arguments}
            call = {"id": f"call_{index}_0", "type": "function", "function": function}
            body = {"tool_calls": [call]}  # the call id OpenEnv's adapter gives this step
        out = http.post(f"/v1/episodes/{episode}/step", json=body).json()
        observation = out["observation"]
        text = {"text": observation.get("text"), "is_error": False}
        results = observation.get("results") or [text]
        done = out["terminated"] or out["truncated"]
        seen.append((results[0]["text"], results[0]["is_error"], out["reward"], done))
        if done:
            break
    view = http.get(f"/v1/episodes/{episode}").json()
    return [*seen, view["state"], view["step_count"]]


def openenv_step(reply: dict[str, Any]) -> tuple[Any, ...]:
    """(text, is_error, reward, done) of an OpenEnv step reply."""
    observation = reply["observation"]
    if "text" in observation:
        return (observation["text"], False, reply["reward"], reply["done"])
    if observation["error"] is not None:
        return (observation["error"]["message"], True, reply["reward"], reply["done"])
    result = observation["result"]
    return (result["content"][0]["text"], result["is_error"], reply["reward"], reply["done"])


def wire_action(action: Any) -> dict[str, Any]:
    return {"message": action} if isinstance(action, str) else {"type": "call_tool", **action}


def http_episode(http: httpx.Client, env: str, seed: int, actions: list[Any]) -> list[Any]:
    ep = {"episode_id": f"parity-{env}"}
    http.post(f"/envs/{env}/reset", json={"seed": seed, **ep}).raise_for_status()
    seen: list[Any] = [http.get(f"/envs/{env}/state", params=ep).json()["task_id"]]
    for action in actions:
        reply = http.post(f"/envs/{env}/step", json={"action": wire_action(action), **ep})
        seen.append(openenv_step(reply.json()))
        if seen[-1][-1]:
            break
    state = http.get(f"/envs/{env}/state", params=ep).json()
    return [*seen, state["state"], state["step_count"]]


def ws_episode(base: str, env: str, seed: int, actions: list[Any]) -> list[Any]:
    with connect(f"ws{base.removeprefix('http')}/envs/{env}/ws") as ws:

        def ask(message: dict[str, Any]) -> Any:
            ws.send(json.dumps(message))
            reply = json.loads(ws.recv(timeout=120))
            assert reply["type"] != "error", reply
            return reply["data"]

        ask({"type": "reset", "data": {"seed": seed}})
        seen: list[Any] = [ask({"type": "state"})["task_id"]]
        for action in actions:
            seen.append(openenv_step(ask({"type": "step", "data": wire_action(action)})))
            if seen[-1][-1]:
                break
        state = ask({"type": "state"})
    return [*seen, state["state"], state["step_count"]]


@pytest.mark.slow
def test_the_same_seed_gives_the_same_episode_over_rest_http_and_ws(
    tiny_model: WorldModel, serve: Serve, make_hub: Callable[..., Hub]
) -> None:
    # The tiny model was trained with 160-token prompts, too few for the counter's tools
    # block; its 512 positions hold a larger prompt (a copy: the fixture is shared).
    model = copy.copy(tiny_model)
    model.budget = replace(model.budget, total=360)
    # No cache, no real backend: each protocol's episode is answered by the model itself,
    # not by answers an earlier protocol's episode left behind.
    hub = make_hub(("frozenlake", "mock"), model, router=RouterConfig(use_cache=False))
    moves = ["DOWN", "RIGHT", "DOWN", "RIGHT"]
    calls = [
        {"tool_name": "add", "arguments": {"n": 3}},
        {"tool_name": "get", "arguments": {}},
        {"tool_name": "add", "arguments": {"n": 0}},  # refused by the tool's schema
        {"tool_name": "add", "arguments": {"n": 4}},
    ]
    base = serve(create_app(Settings(api_keys=()), hub=hub))
    with httpx.Client(base_url=base, timeout=300) as http:
        for env, actions in (("frozenlake", moves), ("mock", calls)):
            rest = rest_episode(http, env, 11, actions)
            assert rest == http_episode(http, env, 11, actions), env
            assert rest == ws_episode(base, env, 11, actions), env
            assert len(rest) >= 4  # the task, at least one step, the state, the step count
