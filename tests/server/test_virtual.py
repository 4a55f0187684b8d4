"""StableToolBench's `POST /virtual` (server/virtual.py) over raw HTTP against a real
uvicorn server on 127.0.0.1: the request and response shapes StableToolBench's clients
use, the env and tool mapping, and every error in StableToolBench's form.

    python -m pytest -q tests/server/test_virtual.py

The hub serves mock and bfcl (both have an `add` tool) without a world model: mock's
calls are answered by its exact real backend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.server.virtual import PARSE_ERROR, standardize
from simworld.simulators.router import RouterConfig

Serve = Callable[..., str]
KEY = "virtual-key-0123456789"


@pytest.fixture()
def http(serve: Serve, make_hub: Callable[..., Hub]) -> Iterator[httpx.Client]:
    hub = make_hub(("mock", "bfcl"), router=RouterConfig(max_real_cost=1.0))
    with httpx.Client(base_url=serve(create_app(Settings(api_keys=()), hub=hub))) as client:
        yield client


def request(**fields: Any) -> dict[str, Any]:
    """A StableToolBench request (all six fields, as its clients send them)."""
    body = {
        "category": "Data",
        "tool_name": "mock",
        "api_name": "add",
        "tool_input": '{"n": 3}',
        "strip": "truncate",
        "toolbench_key": "unused",
    }
    return {**body, **fields}


def virtual(http: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post("/virtual", json=body, headers={"toolbench_key": "unused"})
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    assert set(reply) == {"error", "response"}
    return reply


def test_a_stabletoolbench_request_gets_the_simulated_answer(http: httpx.Client) -> None:
    assert virtual(http, request()) == {"error": "", "response": '{"total": 3}'}
    as_object = request(tool_input={"n": 5}, category="mock", tool_name="Counter")
    assert virtual(http, as_object) == {"error": "", "response": '{"total": 5}'}
    empty = request(api_name="get", tool_input="")  # "" is {}, as in StableToolBench
    assert virtual(http, empty) == {"error": "", "response": '{"total": 0}'}


def test_strip_and_key_may_be_left_out_and_extra_fields_are_ignored(http: httpx.Client) -> None:
    body = request(source_api_doc={"ignored": True})
    del body["strip"], body["toolbench_key"]
    assert virtual(http, body)["response"] == '{"total": 3}'


def test_simworld_state_and_task_fields(http: httpx.Client) -> None:
    body = request(state={"total": 5}, task_id="count-0")
    assert virtual(http, body) == {"error": "", "response": '{"total": 8}'}
    unknown = virtual(http, request(task_id="count-9"))
    assert unknown["response"] == "" and "count-9" in unknown["error"]


def test_api_names_in_toolbench_form_are_standardized(http: httpx.Client) -> None:
    assert virtual(http, request(api_name="GET ", tool_input="{}"))["response"] == '{"total": 0}'
    assert standardize("Search Flights (v2)") == "search_flights_v2"
    assert standardize("3D-model") == "get_3d_model"


def test_tool_level_refusals_fill_the_error_field(http: httpx.Client) -> None:
    refused = virtual(http, request(tool_input='{"n": 0}'))
    assert refused["response"] == "" and "minimum of 1" in refused["error"]
    assert virtual(http, request(tool_input="{n: 3")) == {"error": PARSE_ERROR, "response": ""}


def test_unmatched_and_ambiguous_names_are_errors_in_form(http: httpx.Client) -> None:
    missing = virtual(http, request(api_name="nope"))
    assert missing["response"] == ""
    assert missing["error"] == "no tool of env 'mock' is named 'nope' or 'nope_for_mock'"
    both = virtual(http, request(tool_name="calculator", category="Math"))
    assert "several envs (mock, bfcl)" in both["error"]
    chat = request(api_name="chat_with_user", tool_name="x", category="y")
    assert virtual(http, chat) == {"error": "", "response": "Chat with user."}


def test_a_malformed_body_is_a_422(http: httpx.Client) -> None:
    body = request()
    del body["api_name"]
    response = http.post("/virtual", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["message"] == "body.api_name: Field required"
    assert http.post("/virtual", json=request(tool_input=[1])).status_code == 422


def test_no_model_is_an_error_in_form_and_counted(
    serve: Serve, make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock",), router=RouterConfig())  # no real backend, no model: unanswerable
    with httpx.Client(base_url=serve(create_app(Settings(api_keys=()), hub=hub))) as http:
        reply = virtual(http, request())
        assert reply["response"] == "" and "without a world model" in reply["error"]
        assert 'simworld_errors_total{kind="unavailable"} 1' in http.get("/metrics").text


def test_the_token_guards_it_and_the_url_prefix_carries_it(
    serve: Serve, make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock",))
    base = serve(create_app(Settings(api_keys=(KEY,)), hub=hub))
    with httpx.Client(base_url=base) as http:
        assert http.post("/virtual", json=request()).status_code == 401
        headers = {"Content-Type": "application/json", "toolbench_key": "unused"}
        reply = http.post(f"/k/{KEY}/virtual", content=json.dumps(request()), headers=headers)
        assert reply.json() == {"error": "", "response": '{"total": 3}'}
