"""OpenEnv over HTTP, against a real uvicorn server on 127.0.0.1: /reset, /step, /state,
/schema, /metadata, /health per env and at the root; sessions keyed by episode_id within
the caller's token; OpenEnv's payloads; every observation validates against /schema.

    python -m pytest -q tests/server/test_openenv_http.py

The hub runs without a world model: `mock` and `frozenlake` steps go to their exact real
backends (max_real_cost), so every answer is known in advance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig

Serve = Callable[..., str]
EMPTY_STATE = {"episode_id": None, "step_count": 0, "task_id": None, "state": None, "done": False}
KEY_A, KEY_B = "key-a-0123456789abcdef", "key-b-0123456789abcdef"


@pytest.fixture()
def exact_hub(make_hub: Callable[..., Hub]) -> Callable[[], Hub]:
    """Hubs over mock and frozenlake without a model (their real backends answer)."""
    return lambda: make_hub(("mock", "frozenlake"), router=RouterConfig(max_real_cost=1.0))


@pytest.fixture()
def base(serve: Serve, exact_hub: Callable[[], Hub]) -> str:
    """A fresh server without API keys; mock is the first env (also at the root)."""
    return serve(create_app(Settings(api_keys=()), hub=exact_hub()))


@pytest.fixture()
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


def add(n: Any) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "add", "arguments": {"n": n}}


class Checked:
    """Posts to an env's routes; checks every reply's observation against its /schema."""

    def __init__(self, client: httpx.Client, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.schema = client.get(f"{prefix}/schema").json()["observation"]

    def post(self, route: str, body: Any = None, **params: str) -> dict[str, Any]:
        response = self.client.post(f"{self.prefix}{route}", json=body, params=params)
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = response.json()
        assert set(reply) == {"observation", "reward", "done"}
        jsonschema.validate(reply["observation"], self.schema)
        return reply


def test_tool_env_episode_in_the_default_session(http: httpx.Client) -> None:
    env = Checked(http, "/envs/mock")
    first = env.post("/reset")  # no body at all, as OpenEnv allows
    assert first["reward"] is None and first["done"] is False
    assert first["observation"]["instruction"] == "Bring the counter's total to 10 or more."
    assert [t["name"] for t in first["observation"]["tools"]] == ["add", "get"]
    assert first["observation"]["tools"][0]["input_schema"]["required"] == ["n"]

    step = env.post("/step", {"action": add(3)})
    result = step["observation"]["result"]
    assert step["observation"]["tool_name"] == "add" and step["observation"]["error"] is None
    assert result["content"] == [{"type": "text", "text": '{"total": 3}'}]
    assert result["structured_content"] == {"total": 3} == result["data"]
    assert result["is_error"] is False and (step["reward"], step["done"]) == (0.0, False)

    state = http.get("/envs/mock/state").json()
    assert state == {
        "episode_id": "mock-default",
        "step_count": 1,
        "task_id": "count-0",
        "state": {"total": 3},
        "done": False,
    }
    last = env.post("/step", {"action": add(7)})
    assert (last["reward"], last["done"]) == (1.0, True)
    over = http.post("/envs/mock/step", json={"action": add(1)})
    assert over.status_code == 409 and "reset" in over.json()["detail"]
    env.post("/reset", {})  # a reset restarts the same default session
    assert http.get("/envs/mock/state").json()["state"] == {"total": 0}


def test_sessions_are_keyed_by_episode_id(http: httpx.Client) -> None:
    env = Checked(http, "/envs/mock")
    env.post("/reset", {"episode_id": "left"})
    env.post("/reset", {"episode_id": "right", "seed": 5})
    env.post("/step", {"action": add(2), "episode_id": "left"})
    env.post("/step", {"action": add(4)}, episode_id="right")  # the id in the query
    env.post("/step", {"action": add(1), "episode_id": "right"})

    left = http.get("/envs/mock/state", params={"episode_id": "left"}).json()
    right = http.get("/envs/mock/state", params={"episode_id": "right"}).json()
    assert (left["episode_id"], left["step_count"], left["state"]) == ("left", 1, {"total": 2})
    assert (right["episode_id"], right["step_count"], right["state"]) == ("right", 2, {"total": 5})

    unknown = http.post("/envs/mock/step", json={"action": add(1), "episode_id": "nowhere"})
    assert unknown.status_code == 404 and "nowhere" in unknown.json()["detail"]
    assert http.get("/envs/mock/state", params={"episode_id": "nowhere"}).status_code == 404
    # An episode of another env is not reachable through this env's routes.
    elsewhere = http.get("/envs/frozenlake/state", params={"episode_id": "left"})
    assert elsewhere.status_code == 404 and "'mock'" in elsewhere.json()["detail"]


def test_sessions_are_scoped_to_the_token(serve: Serve, exact_hub: Callable[[], Hub]) -> None:
    url = serve(create_app(Settings(api_keys=(KEY_A, KEY_B)), hub=exact_hub()))
    with httpx.Client(base_url=url, timeout=30) as http:
        as_a = {"Authorization": f"Bearer {KEY_A}"}
        as_b = {"Authorization": f"Bearer {KEY_B}"}
        assert http.post("/reset", json={"episode_id": "shared"}, headers=as_a).status_code == 200
        assert http.post("/step", json={"action": add(6)}, headers=as_a).status_code == 404
        ok = http.post("/step", json={"action": add(6), "episode_id": "shared"}, headers=as_a)
        assert ok.status_code == 200
        # The same episode_id under another token is another caller's: unknown to B.
        foreign = http.get("/state", params={"episode_id": "shared"}, headers=as_b)
        assert foreign.status_code == 404
        # B's own "shared" is a separate session; A's is untouched by it.
        http.post(f"/k/{KEY_B}/reset", json={"episode_id": "shared"})
        mine = http.get("/state", params={"episode_id": "shared"}, headers=as_a).json()
        theirs = http.get(f"/k/{KEY_B}/state", params={"episode_id": "shared"}).json()
        assert (mine["state"], theirs["state"]) == ({"total": 6}, {"total": 0})
        assert http.post("/reset", json={}).status_code == 401  # no token at all


def test_text_env_takes_a_message(http: httpx.Client) -> None:
    env = Checked(http, "/envs/frozenlake")
    first = env.post("/reset", {"seed": 3, "episode_id": "lake"})
    assert first["observation"]["text"] == "\nAFFF\nFFFF\nFFFF\nFFHG\n"
    assert first["observation"]["instruction"].startswith("Cross this 4x4 frozen lake")
    step = env.post("/step", {"action": {"message": "JUMP"}, "episode_id": "lake"})
    assert "LEFT, DOWN, RIGHT, UP" in step["observation"]["text"]  # the exact rules
    # The bare action of OpenEnv 0.1.x, with the session in the query.
    moved = env.post("/step", {"message": "DOWN"}, episode_id="lake")
    assert set(moved["observation"]) == {"text"} and moved["reward"] == 0.0
    state = http.get("/envs/frozenlake/state", params={"episode_id": "lake"}).json()
    assert state["step_count"] == 2 and state["state"]["size"] == 4

    given = {"board": ["SF", "FG"], "position": 1, "size": 2}
    explicit = env.post("/reset", {"episode_id": "lake", "initial_state": given})
    assert explicit["observation"]["text"] is None  # no first observation for a given state
    assert (
        http.get("/envs/frozenlake/state", params={"episode_id": "lake"}).json()["state"] == given
    )


@pytest.mark.parametrize(
    ("prefix", "action"),
    [
        ("/envs/mock", {"type": "call_tool", "arguments": {"n": 1}}),  # no tool_name
        ("/envs/mock", {"type": "bogus"}),
        ("/envs/mock", {"tool_name": "add", "arguments": {"n": 1}}),  # no type
        ("/envs/mock", {"type": "call_tool", "tool_name": "add", "arguments": [1]}),
        ("/envs/mock", {**add(1), "extra": True}),
        ("/envs/frozenlake", {"text": "DOWN"}),  # the field is "message"
        ("/envs/frozenlake", {"message": 3}),
    ],
)
def test_an_action_outside_the_schema_is_422(
    http: httpx.Client, prefix: str, action: dict[str, Any]
) -> None:
    http.post(f"{prefix}/reset", json={})
    schema = http.get(f"{prefix}/schema").json()["action"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(action, schema)
    response = http.post(f"{prefix}/step", json={"action": action})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    assert all(e["loc"][:2] == ["body", "action"] and e["msg"] for e in detail)


@pytest.mark.parametrize(
    ("prefix", "action"),
    [
        ("/envs/mock", {"type": "list_tools"}),
        ("/envs/mock", {"type": "call_tool", "tool_name": "get"}),  # arguments default {}
        ("/envs/mock", {**add(1), "metadata": {"from": "CallToolAction.model_dump()"}}),
        ("/envs/frozenlake", {"message": "LEFT", "metadata": {}}),
    ],
)
def test_an_action_inside_the_schema_is_taken(
    http: httpx.Client, prefix: str, action: dict[str, Any]
) -> None:
    env = Checked(http, prefix)
    env.post("/reset", {})
    jsonschema.validate(action, http.get(f"{prefix}/schema").json()["action"])
    env.post("/step", {"action": action})


def test_a_call_the_tool_schema_refuses_is_a_tool_level_error(http: httpx.Client) -> None:
    env = Checked(http, "/envs/mock")
    env.post("/reset", {"episode_id": "errors"})
    env.post("/step", {"action": add(2), "episode_id": "errors"})
    invalid = env.post("/step", {"action": add(-1), "episode_id": "errors"})["observation"]
    assert invalid["result"] is None and invalid["error"]["error_type"] == "invalid_args"
    assert "minimum of 1" in invalid["error"]["message"]
    unknown = {"type": "call_tool", "tool_name": "mul", "arguments": {}}
    missing = env.post("/step", {"action": unknown, "episode_id": "errors"})["observation"]
    assert missing["result"] is None and missing["error"]["error_type"] == "tool_not_found"
    assert "mul" in missing["error"]["message"]
    state = http.get("/envs/mock/state", params={"episode_id": "errors"}).json()
    assert state["state"] == {"total": 2} and state["step_count"] == 3  # refused, but counted


def test_list_tools_takes_no_step(http: httpx.Client) -> None:
    env = Checked(http, "/envs/mock")
    env.post("/reset", {"episode_id": "tools"})
    listed = env.post("/step", {"action": {"type": "list_tools"}, "episode_id": "tools"})
    assert [t["name"] for t in listed["observation"]["tools"]] == ["add", "get"]
    assert (listed["reward"], listed["done"]) == (None, False)
    assert http.get("/envs/mock/state", params={"episode_id": "tools"}).json()["step_count"] == 0


def test_reset_and_session_mistakes_are_clear_4xx(http: httpx.Client) -> None:
    unknown_task = http.post("/envs/mock/reset", json={"task_id": "count-99"})
    assert unknown_task.status_code == 404 and "count-99" in unknown_task.json()["detail"]
    assert http.post("/envs/mock/reset", json={"seed": -1}).status_code == 422
    assert http.post("/envs/mock/reset", content=b"{not json").status_code == 422
    assert http.post("/envs/textworld/reset", json={}).status_code == 404  # not served
    before = http.post("/envs/frozenlake/step", json={"action": {"message": "UP"}})
    assert before.status_code == 404 and "reset" in before.json()["detail"]
    # Before its first reset the default session reads as OpenEnv's fresh env does.
    empty = http.get("/envs/frozenlake/state").json()
    assert empty == EMPTY_STATE


def test_schema_metadata_and_health(http: httpx.Client) -> None:
    tools, text = http.get("/envs/mock/schema").json(), http.get("/envs/frozenlake/schema").json()
    assert set(tools) == set(text) == {"action", "observation", "state"}
    assert tools["action"]["title"] == "Action"  # what OpenEnv's MCP envs expose
    call_type = tools["action"]["$defs"]["CallToolAction"]["properties"]["type"]
    assert call_type["enum"] == ["call_tool"]  # what verifiers' OpenEnvEnv looks for
    assert text["action"]["required"] == ["message"] and text["action"]["title"] != "Action"
    assert tools["state"]["title"] == "State" and "step_count" in tools["state"]["properties"]
    assert http.get("/schema").json() == tools  # the root serves the first env

    meta = http.get("/envs/frozenlake/metadata").json()
    assert meta["name"] == "frozenlake" and "Actions are LEFT, DOWN" in meta["readme_content"]
    assert http.get("/metadata").json()["name"] == "mock"
    for path in ("/health", "/envs/mock/health", "/envs/frozenlake/health"):
        assert http.get(path).json() == {"status": "healthy"}


def test_the_root_is_the_first_env_and_shares_its_sessions(http: httpx.Client) -> None:
    root = Checked(http, "")
    root.post("/reset", {"episode_id": "rooted"})
    root.post("/step", {"action": add(5), "episode_id": "rooted"})
    via_env = http.get("/envs/mock/state", params={"episode_id": "rooted"}).json()
    assert via_env["state"] == {"total": 5}


@pytest.mark.slow
def test_bfcl_reset_shows_the_tasks_tools_and_validates_calls(serve: Serve) -> None:
    hub = Hub({"bfcl": load_sim_env("bfcl")}, None)  # no model: only validation answers
    url = serve(create_app(Settings(api_keys=()), hub=hub))
    with httpx.Client(base_url=url, timeout=60) as http:
        env = Checked(http, "")
        task = load_sim_env("bfcl").task_for(seed=3)
        first = env.post("/reset", {"seed": 3})["observation"]
        assert first["instruction"] == task.instruction
        assert [t["name"] for t in first["tools"]] == [t.name for t in task.tools]
        listed = env.post("/step", {"action": {"type": "list_tools"}})["observation"]
        assert listed["tools"] == first["tools"]
        call = {"type": "call_tool", "tool_name": task.tools[0].name, "arguments": {"x": 1}}
        refused = env.post("/step", {"action": call})["observation"]
        assert refused["error"]["error_type"] == "invalid_args" and refused["result"] is None
