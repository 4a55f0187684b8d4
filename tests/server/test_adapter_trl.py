"""The TRL adapter (simworld/adapters/trl.py): the classes it builds expose each tool as TRL
finds tools (public functions on the class) with the signature, type hints and docstring
that transformers' `get_json_schema` turns back into the tool's JSON Schema; calling them
steps a real episode on a uvicorn server on 127.0.0.1.

    python -m pytest -q tests/server/test_adapter_trl.py

TRL itself is not installed (it pulls torch and accelerate into the trainer's env); its
discovery is two lines (trl 1.16.0 grpo_trainer.py), reproduced in `trl_tools`, and the
schema side is transformers' own `get_json_schema`, which TRL's tool rendering calls.
The servers run without a world model: mock and frozenlake are answered by their exact
real backends, and bfcl (whose tasks differ in their tools) is only reset, never stepped.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
from transformers.utils import get_json_schema

from simworld.adapters.client import SimworldClient
from simworld.adapters.trl import (
    SimworldTrlEnv,
    environment_factory,
    python_type,
    tool_env_class,
    tool_method,
)
from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.envs.mock import TOOLS
from simworld.simulators.router import RouterConfig

Serve = Callable[..., str]
SEARCH: dict[str, Any] = {
    "name": "search",
    "description": "Search the catalogue.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "limit": {"type": "integer", "default": 10, "description": "At most this many."},
            "order": {"type": "string", "enum": ["asc", "desc"], "description": "Sort order."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
            "price": {"type": ["number", "null"], "description": "Highest price\nor null."},
            "extra": {"type": "object", "additionalProperties": {"type": "integer"}},
        },
        "required": ["order", "query"],
    },
}


def trl_tools(cls: type) -> list[str]:
    """The tools GRPOTrainer finds on an environment class (trl 1.16.0, grpo_trainer.py)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


@pytest.fixture()
def base(serve: Serve, make_hub: Callable[..., Hub]) -> str:
    hub = make_hub(("mock", "frozenlake"), router=RouterConfig(max_real_cost=1.0))
    return serve(create_app(Settings(api_keys=()), hub=hub))


@pytest.fixture()
def counter(base: str) -> Iterator[SimworldTrlEnv]:
    with environment_factory(base, "mock")() as env:
        yield env


# ---------------------------------------------------------------------- signatures


def test_the_class_exposes_each_tool_as_trl_finds_tools(base: str) -> None:
    counter = environment_factory(base, "mock")
    assert counter.__name__ == "SimworldMock" and issubclass(counter, SimworldTrlEnv)
    assert trl_tools(counter) == ["add", "get"]
    assert str(inspect.signature(counter.add)) == "(self, n: int) -> str"
    assert str(inspect.signature(counter.get)) == "(self) -> str"
    assert counter.add.__annotations__ == {"n": int, "return": str}
    assert inspect.getdoc(counter.add) == (
        "Add n to the counter's total and return the new total.\n\nArgs:\n    n: how much"
    )


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_get_json_schema_gives_back_each_mock_tool(base: str, tool: Any) -> None:
    counter = environment_factory(base, "mock")
    rendered = get_json_schema(getattr(counter(), tool.name))["function"]  # a bound method
    assert rendered["name"] == tool.name and rendered["description"] == tool.description
    schema = rendered["parameters"]
    assert schema.get("required", []) == tool.input_schema.get("required", [])
    expected = {name: prop["type"] for name, prop in tool.input_schema["properties"].items()}
    assert {name: prop["type"] for name, prop in schema["properties"].items()} == expected


def test_required_optional_defaults_and_types_follow_the_schema() -> None:
    cls = tool_env_class([{"type": "function", "function": SEARCH}], base_url="x", env="shop")
    assert str(inspect.signature(cls.search)) == (
        "(self, query: str, order: Literal['asc', 'desc'], limit: int = 10, "
        "tags: list[str] = None, price: float | None = None, "
        "extra: dict[str, int] = None) -> str"
    )
    rendered = get_json_schema(cls.search)["function"]
    assert rendered["description"] == "Search the catalogue."
    schema = rendered["parameters"]
    assert schema["required"] == ["query", "order"]
    assert schema["properties"] == {
        "query": {"type": "string", "description": "What to look for."},
        "order": {"type": "string", "enum": ["asc", "desc"], "description": "Sort order."},
        "limit": {"type": "integer", "description": "At most this many."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        "price": {"type": "number", "nullable": True, "description": "Highest price or null."},
        "extra": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "The extra argument.",
        },
    }


def test_type_mapping() -> None:
    assert python_type({"type": "boolean"}) is bool
    assert python_type({"enum": [1, 2]}) == Literal[1, 2]
    assert python_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == str | None
    assert python_type({"type": "array"}) is list and python_type({}) is Any
    assert python_type({"anyOf": [{"type": "string"}, {}]}) is Any


def test_names_trl_cannot_take_are_refused() -> None:
    with pytest.raises(ValueError, match="reserves reset"):
        tool_method({"name": "reset", "parameters": {}})
    with pytest.raises(ValueError, match="not Python identifiers"):
        schema = {"type": "object", "properties": {"from": {}, "max-n": {}}}
        tool_method({"name": "move", "parameters": schema})


# ---------------------------------------------------------------------- episodes


def test_tool_methods_step_the_episode_and_get_reward_sums(counter: SimworldTrlEnv) -> None:
    first = counter.reset(task_id="count-0", prompt="ignored", answer="ignored")
    assert first == "Bring the counter's total to 10 or more."
    assert counter.add(n=3) == '{"total": 3}'  # type: ignore[attr-defined]
    assert counter.add(2) == '{"total": 5}'  # type: ignore[attr-defined]  # positional
    refused = counter.add(n=0)  # type: ignore[attr-defined]
    assert "minimum of 1" in refused and counter.get_reward() == 0.0
    tools = dict(inspect.getmembers(counter, inspect.ismethod))
    assert tools["add"](**{"n": 5}) == '{"total": 10}'  # how TRL calls a tool
    assert counter.get_reward() == 1.0 and counter.done
    with pytest.raises(RuntimeError, match="episode is over"):
        counter.get()  # type: ignore[attr-defined]
    with SimworldClient(counter._base_url) as client:
        assert client.episode(str(counter.episode_id))["step_count"] == 4


def test_reset_starts_a_fresh_episode_and_deletes_the_last(counter: SimworldTrlEnv) -> None:
    counter.reset(seed=1)
    before = counter.episode_id
    counter.add(n=4)  # type: ignore[attr-defined]
    counter.reset(seed=1)
    assert counter.episode_id != before and counter.get_reward() == 0.0
    assert counter.get() == '{"total": 0}'  # type: ignore[attr-defined]
    with SimworldClient(counter._base_url) as client:
        assert [e["episode_id"] for e in [client.episode(str(counter.episode_id))]]
        with pytest.raises(Exception, match="404"):
            client.episode(str(before))


def test_a_text_env_gets_one_act_tool(base: str) -> None:
    lake = environment_factory(base, "frozenlake")
    assert trl_tools(lake) == ["act"]
    assert str(inspect.signature(lake.act)) == "(self, action: str) -> str"
    assert get_json_schema(lake.act)["function"]["parameters"]["required"] == ["action"]
    with lake() as env:
        task = load_sim_env("frozenlake").task_for(seed=3)
        first = "\nAFFF\nFFFF\nFFFF\nFFHG\n"  # the observation as recorded
        assert env.reset(seed=3) == f"{task.instruction}\n\n{first}"
        assert "invalid action 'JUMP'" in env.act("JUMP")  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match="one argument, action"):
            env.act(move="LEFT")  # type: ignore[attr-defined]


def test_a_task_with_another_tool_set_is_refused_at_reset(
    serve: Serve, make_hub: Callable[..., Hub]
) -> None:
    base = serve(create_app(Settings(api_keys=()), hub=make_hub(("bfcl",))))
    bfcl = environment_factory(base, "bfcl", task_id="bfcl-0")
    assert "cd" in trl_tools(bfcl)
    with bfcl() as env:
        env.reset(task_id="bfcl-0")
        with pytest.raises(ValueError, match="one class per tool set"):
            env.reset(task_id="bfcl-1")
        assert env.episode_id is None
