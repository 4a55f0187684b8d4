"""Search-R1's `POST /retrieve` (server/retrieve.py) over raw HTTP against a real uvicorn
server: the request and response shapes Search-R1 and SkyRL use, answers from the real
BM25 retriever, the world model and the cache with each source reported and counted, and
every client mistake as a clear 4xx.

    python -m pytest -q tests/server/test_retrieve.py
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from scripted import ScriptedModel

from simworld.data.envs.search import search_call
from simworld.data.records import ToolCallsAction, ToolResult, ToolResultsObservation
from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.envs.search import SearchReal
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target

Serve = Callable[..., str]
REAL = RouterConfig(real_tools=frozenset({"search"}))


def passages(count: int = 1, broken: bool = False) -> ScriptedModel:
    """A world model that answers a search with `count` made-up passages naming the query
    (or, with `broken`, text that is not a list of passages)."""

    def answer(ctx: Context, attempt: int) -> str:
        action = ctx.action_record
        assert isinstance(action, ToolCallsAction)
        query = (action.calls[0].arguments or {})["query"]
        hits = [
            {"id": f"made-{i}", "title": "Made", "text": f"about {query}", "score": 2.0 - i}
            for i in range(count)
        ]
        text = '{"not": "a list"}' if broken else json.dumps(hits)
        return format_target(ToolResultsObservation([ToolResult("call_0_0", text)]), None)

    return ScriptedModel(answer)


def client(serve: Serve, make_hub: Callable[..., Hub], *envs: str, **hub: Any) -> httpx.Client:
    app = create_app(Settings(api_keys=()), hub=make_hub(envs or ("search",), **hub))
    return httpx.Client(base_url=serve(app))


def post(http: httpx.Client, body: dict[str, Any], path: str = "/retrieve") -> httpx.Response:
    return http.post(path, json=body)


def test_real_retrieval_in_search_r1_shape(serve: Serve, make_hub: Callable[..., Hub]) -> None:
    real = load_sim_env("search").real
    assert isinstance(real, SearchReal)
    queries = ["for loop else clause", "yield expression generator"]
    with client(serve, make_hub, router=REAL) as http:
        reply = post(http, {"queries": queries, "topk": 2, "return_scores": True})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["sources"] == ["real", "real"]
        for query, items in zip(queries, body["result"], strict=True):
            hits = real.index.search(query, 2)
            assert [item["score"] for item in items] == [h.score for h in hits]
            assert [item["document"] for item in items] == [
                {"id": h.passage.id, "title": h.passage.title, "contents": h.passage.contents}
                for h in hits
            ]
        assert body["result"][0][0]["document"]["contents"].startswith('"')
        plain = post(http, {"query": "for loop else clause"}).json()  # topk 3, no scores
        assert [list(item) for item in plain["result"][0]] == [["document"]] * 3
        metrics = http.get("/metrics").text
        assert 'simworld_steps_total{env="search",source="real"} 3' in metrics


def test_the_model_answers_then_the_cache(serve: Serve, make_hub: Callable[..., Hub]) -> None:
    with client(serve, make_hub, model=passages(count=4)) as http:
        first = post(http, {"queries": ["walrus operator"], "topk": 2, "return_scores": True})
        again = post(http, {"query": "walrus operator", "topk": 2, "return_scores": True})
        assert first.status_code == again.status_code == 200, first.text
        assert first.json()["sources"] == ["model"] and again.json()["sources"] == ["cache"]
        items = first.json()["result"][0]
        assert len(items) == 2  # the model wrote 4; at most topk are returned
        assert items[0] == {
            "document": {
                "id": "made-0",
                "title": "Made",
                "contents": '"Made"\nabout walrus operator',
            },
            "score": 2.0,
        }
        assert again.json()["result"] == first.json()["result"]


def test_cost_aware_routing_mixes_real_and_model(
    serve: Serve, make_hub: Callable[..., Hub]
) -> None:
    real = load_sim_env("search").real
    assert isinstance(real, SearchReal)
    cheap, dear = "quagga walrus", "the statement expression"
    assert real.cost(None, ToolCallsAction([search_call("c", cheap, 3)])) == 0.0
    assert real.cost(None, ToolCallsAction([search_call("c", dear, 3)])) > 0.05
    config = RouterConfig(max_real_cost=0.05)
    with client(serve, make_hub, model=passages(), router=config) as http:
        body = post(http, {"queries": [cheap, dear]}).json()
        assert body["sources"] == ["real", "model"]
        assert body["result"][0] == []  # no passage has either word


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"queries": []}, "body.queries"),
        ({"query": "a", "queries": ["b"]}, 'give either "queries"'),
        ({}, 'give either "queries"'),
        ({"query": "x", "topk": 0}, "body.topk"),
        ({"query": "x", "topk": 11}, "body.topk"),
        ({"query": "x", "top_k": 3}, "body.top_k: Extra inputs are not permitted"),
        ({"queries": "one string"}, "body.queries"),
        ({"query": ""}, "query '': Invalid arguments for tool 'search'"),
    ],
)
def test_bad_requests_are_422_naming_the_field(
    serve: Serve, make_hub: Callable[..., Hub], body: dict[str, Any], where: str
) -> None:
    with client(serve, make_hub, router=REAL) as http:
        reply = post(http, body)
        assert reply.status_code == 422 and where in reply.json()["error"]["message"]


def test_env_choice_and_its_errors(serve: Serve, make_hub: Callable[..., Hub]) -> None:
    with client(serve, make_hub, "search", "mock", router=REAL) as http:
        ok = post(http, {"query": "lambda"}, "/envs/search/retrieve")
        assert ok.status_code == 200 and ok.json()["sources"] == ["real"]
        assert post(http, {"query": "lambda", "env": "search"}).status_code == 200
        no_tool = post(http, {"query": "lambda"}, "/envs/mock/retrieve")
        assert no_tool.status_code == 404 and "no 'search' tool" in no_tool.text
        unknown = post(http, {"query": "lambda"}, "/envs/nope/retrieve")
        assert unknown.status_code == 404 and "no env 'nope'" in unknown.text
        clash = post(http, {"query": "lambda", "env": "mock"}, "/envs/search/retrieve")
        assert clash.status_code == 422
    with client(serve, make_hub, "mock") as http:
        none = post(http, {"query": "lambda"})
        assert none.status_code == 404 and "no served env has a 'search' tool" in none.text


def test_no_model_or_a_broken_answer_is_503(serve: Serve, make_hub: Callable[..., Hub]) -> None:
    with client(serve, make_hub) as http:
        reply = post(http, {"query": "lambda"})
        assert reply.status_code == 503 and "without a world model" in reply.text
    with client(serve, make_hub, model=passages(broken=True)) as http:
        reply = post(http, {"query": "lambda"})
        assert reply.status_code == 503 and "could not produce a list of passages" in reply.text
