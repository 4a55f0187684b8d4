"""The search simulated env: the tool's input and output schemas, the real BM25 backend and
its cost, a user corpus, and the router choosing cache, real and model as the env's
docstring says.

    python -m pytest -q tests/simulators/test_search_env.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted import ScriptedModel

from simworld.data.envs.search import SEARCH_TOOL, search_call
from simworld.data.output_schemas import schema_validator
from simworld.data.records import (
    Episode,
    Task,
    TextAction,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.data.search_corpus import Passage, load_corpus
from simworld.simulators.env import SimEnv
from simworld.simulators.envs import load_sim_env
from simworld.simulators.envs.search import TASK_ID, SearchReal, build_search_env
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target

ROWS = [
    {"id": "fruit", "title": "Fruit", "text": "apple banana cherry apple"},
    {"id": "tree", "title": "Trees", "text": "oak apple birch"},
    {"id": "rare", "title": "Rare", "text": "zebra quagga"},
]


def made_passage(ctx: Context, attempt: int) -> str:
    """One made-up passage naming the query: a world model's answer to every search."""
    action = ctx.action_record
    assert isinstance(action, ToolCallsAction)
    query = (action.calls[0].arguments or {})["query"]
    hit = [{"id": "made-0", "title": "Made", "text": f"about {query}", "score": 1.5}]
    return format_target(
        ToolResultsObservation([ToolResult(action.calls[0].id, json.dumps(hit))]), None
    )


@pytest.fixture
def env(tmp_path: Path) -> SimEnv:
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return build_search_env(load_corpus(path))


def step(session: Session, query: object, **extra: object) -> tuple[ToolResult, str]:
    arguments = {"query": query, **extra}
    action = ToolCallsAction([ToolCall("c", "search", arguments, json.dumps(arguments))])
    result = session.step(action)
    assert isinstance(result.observation, ToolResultsObservation)
    return result.observation.results[0], str(result.info["source"])


def session_of(env: SimEnv, config: RouterConfig, model: ScriptedModel | None = None) -> Session:
    session = Session(env, Router(env, model, config), episode_id="t")
    session.reset(TASK_ID)
    return session


def test_the_registered_env_is_the_demo_corpus_with_one_search_task() -> None:
    env = load_sim_env("search")
    assert env.action_kind == "tool_calls" and list(env.tasks) == [TASK_ID]
    assert env.tasks[TASK_ID].tools == (SEARCH_TOOL,)
    assert "Python language reference" in env.tasks[TASK_ID].instruction
    assert isinstance(env.real, SearchReal) and len(env.real.index.passages) > 1000


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": ""}, "should be non-empty"),
        ({"query": "apple", "top_k": 0}, "less than the minimum of 1"),
        ({"query": "apple", "top_k": 11}, "greater than the maximum of 10"),
        ({"query": "apple", "k": 2}, "'k' was unexpected"),
        ({"query": 3}, "3 is not of type 'string'"),
        ({"top_k": 2}, "'query' is a required property"),
    ],
)
def test_the_input_schema_refuses_bad_calls_before_any_backend(
    env: SimEnv, arguments: dict[str, object], message: str
) -> None:
    model = ScriptedModel(made_passage)
    session = session_of(env, RouterConfig(real_tools=frozenset({"search"})), model)
    action = ToolCallsAction([ToolCall("c", "search", arguments, json.dumps(arguments))])
    result = session.step(action)
    assert isinstance(result.observation, ToolResultsObservation)
    answer = result.observation.results[0]
    assert result.info["source"] == "validation" and answer.is_error
    assert message in json.loads(answer.text)["error"]
    assert model.asked == 0


def test_real_results_fit_the_output_schema_and_the_bm25_order(env: SimEnv) -> None:
    session = session_of(env, RouterConfig(real_tools=frozenset({"search"})))
    answer, source = step(session, "apple", top_k=3)
    hits = json.loads(answer.text)
    assert source == "real" and [h["id"] for h in hits] == ["fruit-0", "tree-0"]
    assert hits[0]["title"] == "Fruit" and hits[0]["score"] > hits[1]["score"] > 0
    assert not list(schema_validator(SEARCH_TOOL.output_schema or {}).iter_errors(hits))
    assert json.loads(step(session, "apple")[0].text)[0]["id"] == "fruit-0"  # top_k default 3
    assert json.loads(step(session, "unknownword")[0].text) == []


def test_cost_is_the_postings_read_over_the_passage_count(env: SimEnv) -> None:
    assert env.real is not None
    cost = env.real.cost
    assert cost(None, ToolCallsAction([search_call("c", "apple", 1)])) == pytest.approx(2 / 3)
    assert cost(None, ToolCallsAction([search_call("c", "zebra quagga", 1)])) == pytest.approx(
        2 / 3
    )
    assert cost(None, ToolCallsAction([search_call("c", "oak", 1)])) == pytest.approx(1 / 3)
    assert cost(None, ToolCallsAction([search_call("c", "nothing", 1)])) == 0.0


def test_default_routing_is_cache_then_model(env: SimEnv) -> None:
    model = ScriptedModel(made_passage)
    router = Router(env, model, RouterConfig())
    task = env.tasks[TASK_ID]
    sources = []
    for query in ("apple", "apple", "oak", "apple"):
        fresh = Episode("e", env.name, Task(task.id, task.instruction), [], list(task.tools))
        routed = router.answer(fresh, None, ToolCallsAction([search_call("x", query, 1)]), 0)
        sources.append(routed.source)
    assert sources == ["model", "cache", "model", "cache"] and model.asked == 2


def test_real_tools_send_every_search_to_bm25(env: SimEnv) -> None:
    model = ScriptedModel(made_passage)
    session = session_of(env, RouterConfig(real_tools=frozenset({"search"})), model)
    assert [step(session, q)[1] for q in ("apple", "apple", "zebra")] == ["real"] * 3
    assert model.asked == 0


def test_cost_aware_routing_sends_cheap_searches_to_bm25(env: SimEnv) -> None:
    model = ScriptedModel(made_passage)
    session = session_of(env, RouterConfig(max_real_cost=0.5), model)
    got = [step(session, q) for q in ("oak", "apple", "birch oak")]
    assert [source for _, source in got] == ["real", "model", "model"]
    assert json.loads(got[0][0].text)[0]["id"] == "tree-0"
    assert json.loads(got[1][0].text) == [
        {"id": "made-0", "title": "Made", "text": "about apple", "score": 1.5}
    ]


def test_the_real_backend_errors_on_another_tool(env: SimEnv) -> None:
    real = SearchReal(env.real.index) if isinstance(env.real, SearchReal) else None
    assert real is not None
    answer = real.execute(None, ToolCallsAction([ToolCall("c", "other", {}, "{}")]))
    assert isinstance(answer.observation, ToolResultsObservation)
    assert answer.observation.results[0].is_error
    with pytest.raises(ValueError, match="takes tool calls"):
        real.execute(None, TextAction("apple"))


def test_passages_keep_search_r1_contents() -> None:
    assert Passage("p-0", "T", "body").contents == '"T"\nbody'
