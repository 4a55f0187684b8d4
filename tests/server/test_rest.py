"""The native REST API over a real uvicorn server on 127.0.0.1 (httpx, real sockets):
episodes created, stepped in all three action forms, read and deleted; tool-level errors
for bad tool calls; the 4xx contract (404, 409, 413, 422, 429, 503) and the 500 handler;
session expiry, limits and isolation under concurrency; /v1/simulate; /metrics.

    python -m pytest -q tests/server/test_rest.py

The module's shared server serves `mock` (its `add` answered by the exact real backend,
`get` by rules) and `frozenlake` on the tiny world model (tests/conftest.py). One test runs
`bfcl` on the shipped default model. Every server here fails its test if it ever answered
5xx (tests/server/conftest.py), and the last test reads the shared server's metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from simworld.server.app import create_app
from simworld.server.hub import Hub, Limits
from simworld.server.recording import Recorder
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.world_model import WorldModel

NO_KEYS = Settings(model=None, envs=("mock",), api_keys=())


def app_for(hub: Hub) -> FastAPI:
    return create_app(NO_KEYS, hub=hub)


def call(name: str, arguments: Any, call_id: str = "call-1") -> dict[str, Any]:
    """An OpenAI tool call; `arguments` is sent as given when a string, else as JSON."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


@pytest.fixture(scope="module")
def hub(tiny_model: WorldModel) -> Hub:
    envs = {name: load_sim_env(name) for name in ("mock", "frozenlake")}
    return Hub(envs, tiny_model, router=RouterConfig(real_tools=frozenset({"add"})))


@pytest.fixture(scope="module")
def base(hub: Hub, running_server: Callable[..., AbstractContextManager[str]]) -> Iterator[str]:
    with running_server(app_for(hub)) as url:
        yield url


@pytest.fixture
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=60) as client:
        yield client


def create(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/episodes", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def step(http: httpx.Client, episode_id: str, body: Any, status: int = 200) -> dict[str, Any]:
    response = http.post(f"/v1/episodes/{episode_id}/step", json=body)
    assert response.status_code == status, response.text
    reply: dict[str, Any] = response.json()
    return reply


# ---------------------------------------------------------------------------- discovery


def test_envs_lists_each_env_with_tasks_tools_and_limits(http: httpx.Client) -> None:
    envs = {env["name"]: env for env in http.get("/v1/envs").json()["envs"]}
    assert list(envs) == ["mock", "frozenlake"]
    assert envs["mock"] == {
        "name": "mock",
        "action_kind": "tool_calls",
        "tasks": 1,
        "task_ids": ["count-0"],
        "max_steps": 20,
        "tools": ["add", "get"],
    }
    lake = envs["frozenlake"]
    assert lake["action_kind"] == "text" and lake["tools"] == [] and lake["max_steps"] == 200
    assert lake["tasks"] == 347 and len(lake["task_ids"]) == 5


# ---------------------------------------------------------------------------- a tool env


def test_a_tool_episode_from_create_to_delete(http: httpx.Client) -> None:
    first = create(http, env="mock")
    eid = first["episode_id"]
    assert len(eid) >= 32 and first["task_id"] == "count-0" and first["observation"] is None
    assert first["action_kind"] == "tool_calls" and first["max_steps"] == 20
    add_tool = first["tools"][0]
    assert add_tool["type"] == "function" and add_tool["function"]["name"] == "add"
    assert add_tool["function"]["parameters"]["required"] == ["n"]

    ok = step(http, eid, {"tool_calls": [call("add", {"n": 3}, "c-ok")]})
    assert ok["messages"] == [{"role": "tool", "tool_call_id": "c-ok", "content": '{"total": 3}'}]
    assert ok["observation"]["kind"] == "tool_results"
    assert ok["observation"]["results"][0]["structured"] == {"total": 3}
    assert (ok["reward"], ok["terminated"], ok["truncated"]) == (0.0, False, False)
    assert ok["info"]["source"] == "real" and ok["info"]["step"] == 0

    invalid = step(http, eid, {"tool_calls": [call("add", {"n": 0}, "c-bad")]})
    (result,) = invalid["observation"]["results"]
    assert result["is_error"] and "minimum of 1" in result["text"]
    assert invalid["messages"][0]["tool_call_id"] == "c-bad"
    assert invalid["info"]["source"] == "validation"

    unknown = step(http, eid, {"tool_calls": [call("multiply", {"n": 2}, "c-unknown")]})
    assert unknown["observation"]["results"][0]["text"] == '{"error": "Unknown tool \'multiply\'"}'

    malformed = step(http, eid, {"tool_calls": [call("add", '{"n": 2', "c-json")]})
    (result,) = malformed["observation"]["results"]
    assert result["is_error"] and "not a JSON object" in result["text"]
    assert malformed["info"]["source"] == "validation"

    got = step(http, eid, {"tool_calls": [call("get", {}, "c-get")]})
    assert got["messages"][0]["content"] == '{"total": 3}'  # the errors left the state alone
    assert got["info"]["source"] == "rules"

    view = http.get(f"/v1/episodes/{eid}").json()
    assert view["episode_id"] == eid and view["task_id"] == "count-0"
    assert view["step_count"] == 5 and view["done"] is False and view["state"] == {"total": 3}
    steps = view["steps"]
    assert [s["action"]["calls"][0]["id"] for s in steps] == [
        "c-ok", "c-bad", "c-unknown", "c-json", "c-get"
    ]  # fmt: skip
    assert steps[3]["action"]["calls"][0] == {
        "id": "c-json", "name": "add", "arguments": None, "raw_arguments": '{"n": 2'
    }  # fmt: skip
    assert steps[0]["next_state"] == {"total": 3} and steps[1]["info"]["source"] == "validation"

    closed = http.delete(f"/v1/episodes/{eid}")
    assert closed.status_code == 200 and closed.json() == {"episode_id": eid, "closed": True}
    for response in (
        http.get(f"/v1/episodes/{eid}"),
        http.delete(f"/v1/episodes/{eid}"),
        http.post(f"/v1/episodes/{eid}/step", json={"tool_calls": [call("get", {})]}),
    ):
        assert response.status_code == 404
        assert response.json()["error"]["kind"] == "not_found"
        assert eid in response.json()["error"]["message"]


def test_the_action_form_takes_a_simworld_action(http: httpx.Client) -> None:
    eid = create(http, env="mock")["episode_id"]
    action = {
        "kind": "tool_calls",
        "calls": [{"id": "a1", "name": "add", "arguments": {"n": 4}, "raw_arguments": '{"n": 4}'}],
        "content": "adding four",
    }
    reply = step(http, eid, {"action": action})
    assert reply["messages"][0]["content"] == '{"total": 4}'
    view = http.get(f"/v1/episodes/{eid}").json()
    assert view["steps"][0]["action"] == action


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({}, "exactly one of tool_calls, text, action; got none of them"),
        ({"text": "x", "tool_calls": [call("get", {})]}, "got tool_calls and text"),
        ({"tool_calls": []}, "body.tool_calls: a tool-calls action needs at least one call"),
        ({"tool_calls": [{"id": "c", "function": {"name": "add", "arguments": {"n": 1}}}]},
         "body.tool_calls[0].function.arguments: Input should be a valid string"),
        ({"tool_calls": [{"function": {"name": "get", "arguments": "{}"}}]},
         "body.tool_calls[0].id: Field required"),
        ({"tool_calls": [call("get", {}, "same"), call("get", {}, "same")]},
         "body.tool_calls[1].id: call id 'same' is used twice"),
        ({"action": {"kind": "tool_calls", "calls": [{"id": "a", "name": 3}]}},
         "body.action.calls[0].name: expected a string"),
        ({"action": {"kind": "teleport"}}, "body.action.kind"),
        ({"text": "hello"}, "env 'mock' takes tool calls, not a text action"),
        ({"tool_calls": [call("get", {})], "extra": 1}, "body.extra: Extra inputs are not"),
    ],
)  # fmt: skip
def test_a_body_that_is_no_action_is_a_422_naming_the_field(
    http: httpx.Client, body: dict[str, Any], where: str
) -> None:
    eid = create(http, env="mock")["episode_id"]
    reply = step(http, eid, body, status=422)
    assert reply["error"]["kind"] == "validation"
    assert where in reply["error"]["message"]
    assert http.get(f"/v1/episodes/{eid}").json()["step_count"] == 0


def test_malformed_json_bodies_are_422(http: httpx.Client) -> None:
    eid = create(http, env="mock")["episode_id"]
    for path in ("/v1/episodes", f"/v1/episodes/{eid}/step", "/v1/simulate"):
        response = http.post(
            path, content=b'{"env": ', headers={"content-type": "application/json"}
        )
        assert response.status_code == 422, response.text
        assert "not valid JSON" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"env": "chess"}, 404, "no env 'chess' is served here; envs: mock, frozenlake"),
        ({"env": "mock", "task_id": "count-99"}, 404, "has no task 'count-99'"),
        ({"env": "mock", "seed": -1}, 422, "body.seed: Input should be greater than or equal"),
        ({"env": "mock", "initial_state": [1, 2]}, 422, "keeps its state as an object, got an"),
        ({}, 422, "body.env: Field required"),
    ],
)  # fmt: skip
def test_bad_create_requests(http: httpx.Client, body: Any, status: int, says: str) -> None:
    response = http.post("/v1/episodes", json=body)
    assert response.status_code == status and says in response.json()["error"]["message"]


def test_a_client_state_the_env_cannot_read_is_the_clients_mistake(http: httpx.Client) -> None:
    eid = create(http, env="mock", initial_state={"totl": 3})["episode_id"]
    reply = step(http, eid, {"tool_calls": [call("get", {})]}, status=422)
    assert reply["error"]["message"].startswith("initial_state: env 'mock' could not take a step")
    good = create(http, env="mock", initial_state={"total": 9})["episode_id"]
    done = step(http, good, {"tool_calls": [call("add", {"n": 1})]})
    assert (done["reward"], done["terminated"]) == (1.0, True)
    again = step(http, good, {"tool_calls": [call("get", {})]}, status=409)
    assert again["error"]["kind"] == "conflict" and "terminated" in again["error"]["message"]


# ---------------------------------------------------------------------------- a text env


def test_a_text_episode_answered_by_rules_and_the_model(http: httpx.Client) -> None:
    first = create(http, env="frozenlake", task_id="frozenlake-4x4-1054101787")
    assert first["tools"] == [] and first["observation"]["kind"] == "text"
    assert "AHHF" in first["observation"]["text"]
    eid = first["episode_id"]
    ruled = step(http, eid, {"text": "JUMP"})
    assert ruled["info"]["source"] == "rules" and ruled["messages"] == []
    assert "invalid action 'JUMP'" in ruled["observation"]["text"]
    wrong = step(http, eid, {"tool_calls": [call("get", {})]}, status=422)
    assert wrong["error"]["message"] == "env 'frozenlake' takes a text action, not tool calls"
    modelled = step(http, eid, {"text": "DOWN"})
    assert modelled["info"]["source"] == "model" and modelled["observation"]["kind"] == "text"


# ---------------------------------------------------------------------------- simulate


def test_simulate_answers_from_a_state_and_keeps_no_session(http: httpx.Client, hub: Hub) -> None:
    live = hub.live_count()
    body = {"env": "mock", "state": {"total": 8}, "tool_calls": [call("add", {"n": 3}, "s1")]}
    reply = http.post("/v1/simulate", json=body).json()
    assert reply["messages"] == [{"role": "tool", "tool_call_id": "s1", "content": '{"total": 11}'}]
    assert (reply["reward"], reply["terminated"]) == (1.0, True)
    assert reply["state"] == {"total": 11} and reply["task_id"] == "count-0"
    assert reply["info"]["source"] == "real" and hub.live_count() == live

    own = http.post("/v1/simulate", json={"env": "mock", "tool_calls": [call("get", {})]}).json()
    assert own["state"] == {"total": 0} and own["info"]["source"] == "rules"
    invalid = {"env": "mock", "tool_calls": [call("add", {"n": "two"})]}
    rejected = http.post("/v1/simulate", json=invalid).json()
    assert rejected["info"]["source"] == "validation" and rejected["state"] == {"total": 0}

    lake = {"env": "frozenlake", "task_id": "frozenlake-4x4-1054101787", "text": "LEFT"}
    assert http.post("/v1/simulate", json=lake).json()["info"]["source"] == "model"
    missing = http.post("/v1/simulate", json={"env": "mock"})
    assert missing.status_code == 422


# ---------------------------------------------------------------------------- limits


def test_an_idle_session_expires_and_reads_as_unknown(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    now = [1000.0]
    hub = make_hub(("mock",), limits=Limits(idle_seconds=30), clock=lambda: now[0])
    with httpx.Client(base_url=serve(app_for(hub)), timeout=30) as http:
        kept, dropped = (
            create(http, env="mock")["episode_id"],
            create(http, env="mock")["episode_id"],
        )
        now[0] += 20
        step(http, kept, {"tool_calls": [call("get", {})]})  # a call keeps it alive
        now[0] += 20
        assert http.get(f"/v1/episodes/{kept}").status_code == 200
        gone = http.get(f"/v1/episodes/{dropped}")
        assert gone.status_code == 404 and "expired" in gone.json()["error"]["message"]
        assert hub.live_count() == 1


def test_past_max_sessions_is_429_until_one_is_closed(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock",), limits=Limits(max_sessions=2))
    with httpx.Client(base_url=serve(app_for(hub)), timeout=30) as http:
        first = create(http, env="mock")["episode_id"]
        create(http, env="mock")
        refused = http.post("/v1/episodes", json={"env": "mock"})
        assert refused.status_code == 429 and refused.json()["error"]["kind"] == "limit"
        assert "the limit is 2" in refused.json()["error"]["message"]
        http.delete(f"/v1/episodes/{first}")
        create(http, env="mock")
        # simulate keeps no session, so it is not refused at the limit
        simulate = {"env": "mock", "tool_calls": [call("get", {})]}
        assert http.post("/v1/simulate", json=simulate).status_code == 200


def test_max_steps_truncates_then_a_further_step_is_409(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock",), limits=Limits(max_steps=2))
    with httpx.Client(base_url=serve(app_for(hub)), timeout=30) as http:
        assert http.get("/v1/envs").json()["envs"][0]["max_steps"] == 2
        eid = create(http, env="mock")["episode_id"]
        assert step(http, eid, {"tool_calls": [call("add", {"n": 1})]})["truncated"] is False
        last = step(http, eid, {"tool_calls": [call("add", {"n": 1})]})
        assert (last["truncated"], last["terminated"]) == (True, False)
        over = step(http, eid, {"tool_calls": [call("get", {})]}, status=409)
        assert "truncated at 2 steps" in over["error"]["message"]
        view = http.get(f"/v1/episodes/{eid}").json()
        assert view["done"] is True and view["step_count"] == 2 and view["state"] == {"total": 2}


def test_an_oversized_body_is_413_declared_or_streamed(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock",), limits=Limits(max_request_bytes=4096))
    with httpx.Client(base_url=serve(app_for(hub)), timeout=30) as http:
        eid = create(http, env="mock")["episode_id"]
        big = {"tool_calls": [call("add", {"n": 1, "pad": "x" * 8000})]}
        declared = http.post(f"/v1/episodes/{eid}/step", json=big)
        assert declared.status_code == 413
        assert declared.json()["error"] == {
            "kind": "too_large",
            "message": "the request body is larger than this server's limit of 4096 bytes",
        }

        def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
            data = json.dumps(big).encode()
            for i in range(0, len(data), 1000):
                yield data[i : i + 1000]

        streamed = http.post(
            f"/v1/episodes/{eid}/step",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert streamed.status_code == 413 and streamed.json()["error"]["kind"] == "too_large"
        assert http.get(f"/v1/episodes/{eid}").json()["step_count"] == 0
        assert step(http, eid, {"tool_calls": [call("get", {})]})["messages"]  # still serving
        assert 'simworld_errors_total{kind="too_large"} 2' in http.get("/metrics").text


def test_a_server_without_a_model_answers_503_where_the_model_is_needed(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    hub = make_hub(("mock", "frozenlake"), router=RouterConfig())  # no real backend either
    with httpx.Client(base_url=serve(app_for(hub)), timeout=30) as http:
        eid = create(http, env="mock")["episode_id"]
        assert step(http, eid, {"tool_calls": [call("get", {})]})["info"]["source"] == "rules"
        refused = step(http, eid, {"tool_calls": [call("add", {"n": 1})]}, status=503)
        assert refused["error"]["kind"] == "unavailable"
        assert "without a world model" in refused["error"]["message"]
        assert http.get(f"/v1/episodes/{eid}").json()["step_count"] == 1  # nothing taken


# ---------------------------------------------------------------------------- concurrency


def test_concurrent_sessions_stay_isolated(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    base = serve(app_for(make_hub(("mock",))))
    threads, errors = 16, []
    seen: dict[int, dict[str, Any]] = {}
    barrier = threading.Barrier(threads)

    def player(k: int) -> None:
        try:
            with httpx.Client(base_url=base, timeout=60) as http:
                eid = create(http, env="mock")["episode_id"]
                barrier.wait()  # every session is live before anyone steps
                n = k % 4 + 1  # totals stay below 10: no episode terminates
                for i in range(2):
                    step(http, eid, {"tool_calls": [call("add", {"n": n}, f"t{k}-{i}")]})
                got = step(http, eid, {"tool_calls": [call("get", {}, f"t{k}-get")]})
                seen[k] = {"view": http.get(f"/v1/episodes/{eid}").json(), "get": got}
        except Exception as exc:  # reported below, with the thread that raised it
            errors.append((k, exc))

    workers = [threading.Thread(target=player, args=(k,)) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert not errors, errors
    assert len(seen) == threads and len({s["view"]["episode_id"] for s in seen.values()}) == threads
    for k, s in seen.items():
        total = 2 * (k % 4 + 1)
        ids = [st["action"]["calls"][0]["id"] for st in s["view"]["steps"]]
        assert ids == [f"t{k}-0", f"t{k}-1", f"t{k}-get"]
        assert s["view"]["state"] == {"total": total}
        assert s["get"]["messages"][0]["content"] == json.dumps({"total": total})


def test_the_lifespan_loads_batches_records_and_closes(
    tiny_checkpoint: Path,
    tmp_path: Path,
    running_server: Callable[..., AbstractContextManager[str]],
) -> None:
    players, dump = 6, tmp_path / "served.jsonl"
    settings = Settings(
        model=str(tiny_checkpoint),
        envs=("frozenlake", "mock"),
        api_keys=(),
        max_batch=players,  # a batch closes as soon as every player's step has arrived
        max_wait_ms=2000,
        record=dump,
    )
    barrier, replies = threading.Barrier(players), []
    with running_server(create_app(settings)) as base:

        def player() -> None:
            with httpx.Client(base_url=base, timeout=120) as http:
                eid = create(http, env="frozenlake", seed=0)["episode_id"]
                barrier.wait()
                replies.append(step(http, eid, {"text": "RIGHT"}))

        workers = [threading.Thread(target=player) for _ in range(players)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(300)
        metrics = httpx.get(f"{base}/metrics").text
    assert len(replies) == players and all(r["info"]["source"] == "model" for r in replies)
    singles = float(metrics.split('simworld_batch_size_bucket{le="1.0"} ')[1].split()[0])
    batches = float(metrics.split("simworld_batch_size_count ")[1].split()[0])
    assert batches > singles  # at least one model call served several sessions at once
    lines = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(lines) == 1 + 2 * players  # the header, then each episode and its step
    with Recorder(dump):  # the server's recorder let go of the file when it stopped
        pass


# ---------------------------------------------------------------------------- bfcl


@pytest.mark.slow
def test_bfcl_on_the_default_model(serve: Callable[..., str]) -> None:
    from simworld.worldmodel.world_model import load_world_model

    hub = Hub({"bfcl": load_sim_env("bfcl")}, load_world_model("default"))
    with httpx.Client(base_url=serve(app_for(hub)), timeout=300) as http:
        first = create(http, env="bfcl", task_id="bfcl-4")
        eid, tools = first["episode_id"], {t["function"]["name"]: t for t in first["tools"]}
        assert "ls" in tools and first["observation"] is None
        ok = step(http, eid, {"tool_calls": [call("ls", {}, "b1")]})
        assert ok["info"]["source"] == "model" and ok["messages"][0]["tool_call_id"] == "b1"
        assert ok["observation"]["results"][0]["call_id"] == "b1"
        missing = step(http, eid, {"tool_calls": [call("cd", {}, "b2")]})
        assert missing["messages"][0]["content"] == (
            "Error during execution: GorillaFileSystem.cd() missing 1 required positional "
            "argument: 'folder'"
        )
        unknown = step(http, eid, {"tool_calls": [call("teleport", {}, "b3")]})
        assert unknown["messages"][0]["content"] == (
            "Error during execution: name 'teleport' is not defined"
        )
        broken = step(http, eid, {"tool_calls": [call("cd", '{"folder": ', "b4")]})
        assert broken["observation"]["results"][0]["is_error"] is True
        assert broken["info"]["source"] == "validation"
        # an action too long for the model's context is the client's mistake: a 422
        huge = step(http, eid, {"tool_calls": [call("cd", {"folder": "x" * 20000}, "b5")]}, 422)
        assert "does not fit the world model's context" in huge["error"]["message"]
        view = http.get(f"/v1/episodes/{eid}").json()
        assert view["step_count"] == 4 and view["task_id"] == "bfcl-4"
        sources = [s["info"]["source"] for s in view["steps"]]
        assert sources == ["model", "validation", "validation", "validation"]
        assert http.delete(f"/v1/episodes/{eid}").status_code == 200


# ---------------------------------------------------------------------------- errors


def test_unknown_routes_and_methods(http: httpx.Client) -> None:
    missing = http.get("/v2/episodes")
    assert missing.status_code == 404 and missing.json()["error"]["kind"] == "not_found"
    wrong = http.put("/v1/envs")
    assert wrong.status_code == 405 and "allowed: GET" in wrong.json()["error"]["message"]
    assert http.get("/health").json() == {"status": "healthy"}
    assert http.get("/mcp").status_code == 405  # MCP's optional server stream: not offered


def test_an_unexpected_exception_is_a_500_with_an_id_in_the_log(
    serve: Callable[..., str], make_hub: Callable[..., Hub], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_for(make_hub(("mock",)))

    def broken() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/broken", broken)
    with httpx.Client(base_url=serve(app, allow_5xx=True), timeout=30) as http:
        response = http.get("/broken")
        assert response.status_code == 500
        body = response.json()
        assert body["error"]["kind"] == "internal" and body["id"] in body["error"]["message"]
        assert "a bug" not in response.text  # no internals in the answer
        assert 'simworld_errors_total{kind="internal"} 1' in http.get("/metrics").text
    logged = [r for r in caplog.records if r.name == "simworld.server.app"]
    assert any(body["id"] in r.getMessage() and r.exc_info for r in logged)


def test_metrics_count_steps_errors_and_sessions(http: httpx.Client) -> None:
    eid = create(http, env="mock")["episode_id"]
    step(http, eid, {"tool_calls": [call("get", {})]})
    text = http.get("/metrics").text
    assert http.get("/metrics").headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'simworld_steps_total{env="mock",source="rules"}' in text
    assert 'simworld_steps_total{env="mock",source="validation"}' in text
    assert 'simworld_errors_total{kind="validation"}' in text
    assert "simworld_sessions_live " in text


def test_no_request_to_the_shared_server_was_a_500(http: httpx.Client) -> None:
    # Last in the module: every request above went to this server or its own (whose
    # conftest guard fails a test on any 5xx). The metrics say the same independently.
    text = http.get("/metrics").text
    assert 'kind="internal"' not in text
    assert 'simworld_errors_total{kind="not_found"}' in text  # errors are being counted
