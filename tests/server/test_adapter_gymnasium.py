"""The gymnasium adapter (simworld/adapters/gymnasium.py) against a real uvicorn server on
127.0.0.1: gymnasium's own env checker on a text env and a tool env, terminated and
truncated kept apart, seeds, and the episode's life on the server.

    python -m pytest -q tests/server/test_adapter_gymnasium.py

The server serves frozenlake on the tiny world model (tests/conftest.py) and mock (its
`add` answered by the exact real backend, `get` by rules), with steps capped at 3 so that
truncation is reachable.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from simworld.adapters.client import ServerError, SimworldClient
from simworld.adapters.gymnasium import SimworldGymEnv, action_json
from simworld.server.app import create_app
from simworld.server.hub import Hub, Limits
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.world_model import WorldModel

CAP = 3


@pytest.fixture(scope="module")
def base(
    tiny_model: WorldModel, running_server: Callable[..., AbstractContextManager[str]]
) -> Iterator[str]:
    envs = {name: load_sim_env(name) for name in ("frozenlake", "mock")}
    router = RouterConfig(real_tools=frozenset({"add"}))
    hub = Hub(envs, tiny_model, router=router, limits=Limits(max_steps=CAP))
    with running_server(create_app(Settings(api_keys=()), hub=hub)) as url:
        yield url


@pytest.fixture
def lake(base: str) -> Iterator[SimworldGymEnv]:
    env = SimworldGymEnv(base, "frozenlake")
    yield env
    env.close()


@pytest.fixture
def counter(base: str) -> Iterator[SimworldGymEnv]:
    env = SimworldGymEnv(base, "mock")
    yield env
    env.close()


def checked(env: SimworldGymEnv) -> list[str]:
    """Run gymnasium's env checker; the warnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    return [str(w.message) for w in caught]


def test_the_env_checker_passes_on_a_text_env(lake: SimworldGymEnv) -> None:
    assert isinstance(lake.action_space, spaces.Text)
    assert checked(lake) == []


def test_the_env_checker_passes_on_a_tool_env(counter: SimworldGymEnv) -> None:
    assert isinstance(counter.action_space, spaces.Dict)
    assert checked(counter) == []


def test_a_text_episode_steps_the_world_model(lake: SimworldGymEnv) -> None:
    task = load_sim_env("frozenlake").task_for(seed=3)
    obs, info = lake.reset(seed=3)
    assert info["task_id"] == task.id and info["instruction"] == task.instruction
    assert obs == "\nAFFF\nFFFF\nFFFF\nFFHG\n" and obs in lake.observation_space
    assert info["tools"] == [] and info["observation"] == {"kind": "text", "text": obs}

    obs, reward, terminated, truncated, info = lake.step("DOWN")
    assert info["source"] == "model" and info["step"] == 0 and info["messages"] == []
    assert isinstance(obs, str) and obs == info["observation"]["text"]
    assert isinstance(reward, float) and isinstance(terminated, bool) and truncated is False

    obs, *_ = lake.step("JUMP")  # not a FrozenLake action: the env's rule answers it
    assert "invalid action 'JUMP'" in obs


def test_a_tool_episode_reports_termination(counter: SimworldGymEnv) -> None:
    obs, info = counter.reset(seed=0)
    assert obs == "Bring the counter's total to 10 or more." and info["observation"] is None
    assert [t["function"]["name"] for t in info["tools"]] == ["add", "get"]

    obs, reward, terminated, truncated, info = counter.step(action_json("add", {"n": 4}))
    assert (obs, reward, terminated, truncated) == ('{"total": 4}', 0.0, False, False)
    assert info["messages"] == [{"role": "tool", "tool_call_id": "call_0_0", "content": obs}]

    # Several calls in one step (a list), arguments as a dict: outside the declared space.
    calls = [{"name": "add", "arguments": {"n": 2}}, {"name": "add", "arguments": '{"n": 1}'}]
    obs, reward, terminated, truncated, _ = counter.step(calls)
    assert (obs, reward, terminated, truncated) == ('{"total": 6}\n{"total": 7}', 0.0, False, False)

    obs, reward, terminated, truncated, _ = counter.step(action_json("add", {"n": 3}))
    assert (obs, reward, terminated, truncated) == ('{"total": 10}', 1.0, True, False)


def test_the_step_cap_truncates_without_terminating(counter: SimworldGymEnv) -> None:
    counter.reset(seed=0)
    outcomes = [counter.step(action_json("get", {}))[2:4] for _ in range(CAP)]
    assert outcomes == [(False, False), (False, False), (False, True)]
    with pytest.raises(ServerError) as finished:
        counter.step(action_json("get", {}))
    assert finished.value.status == 409


def test_bad_tool_calls_are_steps_answered_with_the_api_error(counter: SimworldGymEnv) -> None:
    counter.reset(seed=0)
    obs, reward, terminated, truncated, info = counter.step({"name": "nope", "arguments": "{"})
    assert info["source"] == "validation" and info["step"] == 0
    assert "nope" in obs and (reward, terminated, truncated) == (0.0, False, False)
    with pytest.raises(TypeError, match="name"):
        counter.step({"tool": "add"})


def test_seeds_pick_tasks_and_seedless_resets_replay(lake: SimworldGymEnv) -> None:
    first = [lake.reset(seed=11)[1]["task_id"], lake.reset()[1]["task_id"]]
    again = [lake.reset(seed=11)[1]["task_id"], lake.reset()[1]["task_id"]]
    assert first == again
    task_id = "frozenlake-8x8-1785905302"
    assert lake.reset(options={"task_id": task_id})[1]["task_id"] == task_id
    with pytest.raises(ValueError, match="task_id and initial_state"):
        lake.reset(options={"task": task_id})


def test_reset_and_close_delete_the_episode_on_the_server(base: str) -> None:
    env = SimworldGymEnv(base, "mock")
    with SimworldClient(base) as client:
        first = env.reset(seed=0)[1]["episode_id"]
        second = env.reset(seed=0)[1]["episode_id"]
        assert second != first
        with pytest.raises(ServerError) as gone:
            client.episode(first)
        assert gone.value.status == 404
        assert client.episode(second)["step_count"] == 0
        env.close()
        env.close()  # a second close is harmless
        with pytest.raises(ServerError):
            client.episode(second)


def test_an_env_the_server_does_not_serve_is_refused(base: str) -> None:
    with pytest.raises(ValueError, match="no env 'bfcl'"):
        SimworldGymEnv(base, "bfcl")
