"""MCP streamable HTTP and OpenEnv's JSON-RPC extensions on `/mcp`, raw JSON-RPC over
httpx against a real uvicorn server on 127.0.0.1: the handshake and version negotiation,
notifications, ping, paging, byte-for-byte tool replay, tools/call (results, schema
failures, unknown tools), sessions (Mcp-Session-Id, DELETE, params.session_id, tokens),
batches, the transport's refusals, and MCP over OpenEnv's /ws.

    python -m pytest -q tests/server/test_mcp_http.py

No world model: `mock` steps go to its exact real backend (`add`) and its rules (`get`),
and the `captured` env (a captured MCP server, built here) answers from its rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from simworld.data.formats.tools import tool_from_json
from simworld.data.records import (
    JSON,
    Action,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
)
from simworld.server.app import create_app
from simworld.server.hub import Hub, Limits
from simworld.server.mcp import mcp_router
from simworld.server.settings import Settings
from simworld.simulators.env import Answer, SimEnv, SimTask
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig

Serve = Callable[..., str]
KEY_A, KEY_B = "key-a-0123456789abcdef", "key-b-0123456789abcdef"
INIT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}
# The tool list of a captured MCP server, as its tools/list sent it: odd key orders,
# non-ASCII text, a title, annotations and _meta, an output schema or none.
CAPTURED = [
    {
        "name": "weather",
        "title": "Météo",
        "description": "Current weather of a city, in °C — 天气.",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string", "minLength": 1}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "outputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
            "required": ["city", "celsius"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": True},
        "_meta": {"vendor.example/tier": 2},
    },
    {
        "inputSchema": {"type": "object", "properties": {}},
        "outputSchema": {"type": "object", "required": ["ok"]},
        "name": "broken",
        "description": "Always answers something its output schema refuses.",
    },
    {"name": "note", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
]


def captured_env() -> SimEnv:
    """A stateless env over the CAPTURED tools, answered by rules."""

    def respond(state: JSON, action: Action) -> Answer | None:
        assert isinstance(action, ToolCallsAction)
        results = []
        for call in action.calls:
            args = call.arguments or {}
            value: JSON = {"city": args.get("city"), "celsius": 21.5}
            if call.name == "broken":
                value = {"nope": 1}
            text = "saved" if call.name == "note" else json.dumps(value, ensure_ascii=False)
            results.append(ToolResult(call.id, text, None if call.name == "note" else value))
        return Answer(ToolResultsObservation(results))

    tools = tuple(tool_from_json(tool, f"tools[{i}]") for i, tool in enumerate(CAPTURED))
    task = SimTask(id="t0", instruction="Use the tools.", initial_state=None, tools=tools)
    return SimEnv(name="captured", tasks={"t0": task}, action_kind="tool_calls", responder=respond)


def exact_hub(**options: Any) -> Hub:
    envs = {"captured": captured_env()} | {n: load_sim_env(n) for n in ("mock", "frozenlake")}
    router = RouterConfig(real_tools=frozenset({"add"}))
    return Hub(envs, None, router=router, **options)


class Mcp:
    """JSON-RPC over POST to one `/mcp` endpoint."""

    def __init__(self, http: httpx.Client, path: str = "/mcp") -> None:
        self.http, self.path = http, path
        self.session: str | None = None
        self.version = "2025-11-25"
        self.token: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self.session is not None:
            headers["Mcp-Session-Id"] = self.session
        if self.version:
            headers["MCP-Protocol-Version"] = self.version
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers | extra

    def post(self, body: Any, **headers: str) -> httpx.Response:
        return self.http.post(self.path, json=body, headers=self.headers(**headers))

    def call(self, method: str, params: Any = None, rid: Any = 1, **headers: str) -> Any:
        """The JSON-RPC response (asserting HTTP 200 and the id)."""
        message = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        response = self.post(message, **headers)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        reply = response.json()
        assert reply["jsonrpc"] == "2.0" and reply["id"] == rid
        return reply

    def result(self, method: str, params: Any = None) -> Any:
        reply = self.call(method, params)
        assert "result" in reply, reply
        return reply["result"]

    def error(self, method: str, params: Any = None) -> dict[str, Any]:
        reply = self.call(method, params)
        assert "error" in reply and "result" not in reply, reply
        error: dict[str, Any] = reply["error"]
        return error

    def initialize(self, version: str = "2025-11-25") -> dict[str, Any]:
        self.version = ""
        response = self.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": INIT | {"protocolVersion": version},
            }
        )
        assert response.status_code == 200, response.text
        self.session = response.headers["mcp-session-id"]
        result: dict[str, Any] = response.json()["result"]
        self.version = result["protocolVersion"]
        notified = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert notified.status_code == 202 and notified.content == b""
        return result


@pytest.fixture()
def base(serve: Serve) -> str:
    """A server without keys: captured first (also at /mcp), mock, frozenlake, and mock
    again at /paged/mcp with one tool per tools/list page."""
    app = create_app(Settings(api_keys=()), hub=exact_hub())
    app.include_router(mcp_router("mock", page_size=1), prefix="/paged")
    return serve(app)


@pytest.fixture()
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


@pytest.fixture()
def mock(http: httpx.Client) -> Mcp:
    return Mcp(http, "/envs/mock/mcp")


# ---------------------------------------------------------------------- lifecycle


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"])
def test_initialize_answers_the_clients_supported_version(mock: Mcp, version: str) -> None:
    result = mock.initialize(version)
    assert result["protocolVersion"] == version
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["serverInfo"]["name"] == "simworld-mock"
    assert len(mock.session or "") >= 32  # the hub's unguessable id


def test_initialize_negotiates_an_unknown_version_down_to_the_latest(mock: Mcp) -> None:
    assert mock.initialize("2099-01-01")["protocolVersion"] == "2025-11-25"
    assert mock.error("initialize", {"capabilities": {}})["code"] == -32602
    assert "protocolVersion" in mock.error("initialize", {"capabilities": {}})["message"]


def test_notifications_and_client_responses_get_202_and_ping_an_empty_result(mock: Mcp) -> None:
    mock.initialize()
    for message in (
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},  # a response to a server request
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "add"}},  # not run
    ):
        response = mock.post(message)
        assert response.status_code == 202 and response.content == b""
    assert mock.result("ping") == {}
    assert mock.result("tools/call", {"name": "get"})["structuredContent"] == {"total": 0}


def test_server_discover_and_unknown_methods_are_method_not_found(mock: Mcp) -> None:
    # mcp 2.x probes server/discover at the 2026 version first, then falls back.
    reply = mock.call("server/discover", {}, **{"MCP-Protocol-Version": "2026-07-28"})
    assert reply["error"]["code"] == -32601
    assert mock.error("resources/list")["code"] == -32601


def test_the_episode_is_reachable_over_rest_and_openenv(mock: Mcp, http: httpx.Client) -> None:
    mock.initialize()
    mock.result("tools/call", {"name": "add", "arguments": {"n": 4}})
    view = http.get(f"/v1/episodes/{mock.session}").json()
    assert view["env"] == "mock" and view["step_count"] == 1 and view["state"] == {"total": 4}
    assert view["steps"][0]["reward"] == 0.0
    reset = http.post("/envs/mock/reset", json={"episode_id": mock.session, "seed": 2})
    assert reset.status_code == 200  # OpenEnv's reset restarts the session's episode
    assert mock.result("tools/call", {"name": "get"})["structuredContent"] == {"total": 0}
    done = mock.result("tools/call", {"name": "add", "arguments": {"n": 12}})
    assert done["structuredContent"] == {"total": 12}
    last = http.get(f"/v1/episodes/{mock.session}").json()
    assert last["done"] is True and last["steps"][-1]["reward"] == 1.0
    over = mock.error("tools/call", {"name": "get"})
    assert over["code"] == -32000 and over["data"] == {"kind": "conflict", "status": 409}


# ---------------------------------------------------------------------- tools


def test_tools_list_replays_a_captured_servers_tools_byte_for_byte(http: httpx.Client) -> None:
    for path in ("/mcp", "/envs/captured/mcp"):  # the first env is also at the root
        response = Mcp(http, path).post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 200
        listed = response.json()["result"]["tools"]
        assert listed == CAPTURED and "nextCursor" not in response.json()["result"]
        assert [list(tool) for tool in listed] == [list(tool) for tool in CAPTURED]
        for tool in CAPTURED:
            exact = json.dumps(tool, ensure_ascii=False, separators=(",", ":")).encode()
            assert exact in response.content


def test_tools_without_an_mcp_original_are_rendered(serve: Serve) -> None:
    doc = {  # a BFCL function doc, as the bfcl env keeps it in `original`
        "name": "cd",
        "description": "Change directory.",
        "parameters": {"type": "dict", "properties": {"folder": {"type": "string"}}},
        "response": {"type": "dict", "properties": {"current_working_directory": {}}},
    }
    schema = {"type": "object", "properties": {"folder": {"type": "string"}}}
    bfcl = ToolSpec(
        name="cd",
        description="Change directory.",
        input_schema=schema,
        output_schema={"type": "object", "properties": {"current_working_directory": {}}},
        annotations={"bfcl_class": "GorillaFileSystem", "readOnlyHint": False},
        original=doc,
    )
    openai = tool_from_json(
        {"type": "function", "function": {"name": "f", "parameters": schema}}, "tools[1]"
    )
    declared = replace(
        openai, name="g", output_schema=schema, original={"name": "g", "output_schema": schema}
    )
    task = SimTask(id="t", instruction="", initial_state=None, tools=(bfcl, openai, declared))
    env = SimEnv(name="functions", tasks={"t": task}, action_kind="tool_calls")
    base = serve(create_app(Settings(api_keys=()), hub=Hub({"functions": env}, None)))
    with httpx.Client(base_url=base, timeout=30) as http:
        tools = Mcp(http).result("tools/list")["tools"]
    # BFCL's docs only describe their response: no outputSchema; bfcl_class stays inside.
    assert tools[0] == {
        "name": "cd",
        "description": "Change directory.",
        "inputSchema": schema,
        "annotations": {"readOnlyHint": False},
    }
    assert tools[1] == {"name": "f", "description": "", "inputSchema": schema}
    assert tools[2]["outputSchema"] == schema  # declared by the tool JSON itself


@pytest.mark.slow
def test_the_bfcl_env_lists_its_tools(serve: Serve) -> None:
    base = serve(create_app(Settings(api_keys=()), hub=Hub({"bfcl": load_sim_env("bfcl")}, None)))
    with httpx.Client(base_url=base, timeout=30) as http:
        tools = Mcp(http).result("tools/list")["tools"]
    task = load_sim_env("bfcl").task_for()
    assert [tool["name"] for tool in tools] == [tool.name for tool in task.tools]
    assert all(list(tool) == ["name", "description", "inputSchema"] for tool in tools)


def test_tools_list_pages_with_a_cursor(http: httpx.Client) -> None:
    paged = Mcp(http, "/paged/mcp")
    first = paged.result("tools/list")
    assert [tool["name"] for tool in first["tools"]] == ["add"]
    second = paged.result("tools/list", {"cursor": first["nextCursor"]})
    assert [tool["name"] for tool in second["tools"]] == ["get"] and "nextCursor" not in second
    assert paged.error("tools/list", {"cursor": "not-a-cursor"})["code"] == -32602
    whole = Mcp(http, "/envs/mock/mcp").result("tools/list")
    assert whole["tools"] == first["tools"] + second["tools"]


def test_tools_call_results_errors_and_unknown_tools(mock: Mcp) -> None:
    mock.initialize()
    added = mock.result("tools/call", {"name": "add", "arguments": {"n": 3}})
    assert added == {
        "content": [{"type": "text", "text": '{"total": 3}'}],
        "structuredContent": {"total": 3},
        "isError": False,
    }
    refused = mock.result("tools/call", {"name": "add", "arguments": {"n": 0}})
    assert refused["isError"] is True and "structuredContent" not in refused
    assert "arguments.n: 0 is less than the minimum of 1" in refused["content"][0]["text"]
    unknown = mock.error("tools/call", {"name": "reset", "arguments": {}})
    assert unknown == {"code": -32602, "message": "Unknown tool: reset"}
    assert mock.error("tools/call", {"arguments": {}})["code"] == -32602  # no name
    bad = mock.error("tools/call", {"name": "add", "arguments": [1]})
    assert bad["code"] == -32602 and "params.arguments" in bad["message"]
    assert mock.error("tools/call", [1, 2])["code"] == -32602  # params not an object
    assert mock.result("tools/call", {"name": "get"})["structuredContent"] == {"total": 3}


def test_output_schemas_are_checked(http: httpx.Client) -> None:
    captured = Mcp(http)
    captured.initialize()
    weather = captured.result("tools/call", {"name": "weather", "arguments": {"city": "Zürich"}})
    assert weather["structuredContent"] == {"city": "Zürich", "celsius": 21.5}
    assert json.loads(weather["content"][0]["text"]) == weather["structuredContent"]
    broken = captured.result("tools/call", {"name": "broken"})
    assert broken == {
        "content": [
            {"type": "text", "text": "Output validation error: result: 'ok' is a required property"}
        ],
        "isError": True,
    }
    note = captured.result("tools/call", {"name": "note", "arguments": {"text": "hi"}})
    assert note == {"content": [{"type": "text", "text": "saved"}], "isError": False}


def test_a_text_env_serves_no_tools(http: httpx.Client) -> None:
    text = Mcp(http, "/envs/frozenlake/mcp")
    assert text.initialize()["capabilities"] == {}
    assert text.error("tools/list")["code"] == -32601
    assert text.error("tools/call", {"name": "DOWN"})["code"] == -32601


def test_a_step_that_needs_a_missing_model_is_a_server_error(serve: Serve) -> None:
    base = serve(create_app(Settings(api_keys=()), hub=Hub({"mock": load_sim_env("mock")}, None)))
    with httpx.Client(base_url=base, timeout=30) as http:
        mock = Mcp(http)
        mock.initialize()
        error = mock.error("tools/call", {"name": "add", "arguments": {"n": 1}})
    assert error["code"] == -32000 and error["data"] == {"kind": "unavailable", "status": 503}


# ---------------------------------------------------------------------- sessions


def test_delete_ends_the_session_and_its_episode(mock: Mcp, http: httpx.Client) -> None:
    mock.initialize()
    session = mock.session
    deleted = http.delete("/envs/mock/mcp", headers=mock.headers())
    assert deleted.status_code == 200 and deleted.json() == {"session_id": session, "closed": True}
    assert http.get(f"/v1/episodes/{session}").status_code == 404
    gone = mock.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == -32600
    assert http.delete("/envs/mock/mcp", headers=mock.headers()).status_code == 404
    assert http.delete("/envs/mock/mcp").status_code == 400  # no session named
    assert mock.initialize()["protocolVersion"] == "2025-11-25"  # a new session starts
    assert mock.session != session


def test_without_a_session_requests_are_stateless(mock: Mcp) -> None:
    for _ in range(2):
        added = mock.result("tools/call", {"name": "add", "arguments": {"n": 2}})
        assert added["structuredContent"] == {"total": 2}  # nothing was kept
    mock.session = "no-such-session"
    assert mock.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 404


def test_a_session_belongs_to_its_env_and_its_token(serve: Serve) -> None:
    base = serve(create_app(Settings(api_keys=(KEY_A, KEY_B)), hub=exact_hub()))
    with httpx.Client(base_url=base, timeout=30) as http:
        mine = Mcp(http, "/envs/mock/mcp")
        mine.token = KEY_A
        mine.initialize()
        assert http.post("/envs/mock/mcp", json={}).status_code == 401
        theirs = Mcp(http, "/envs/mock/mcp")
        theirs.token, theirs.session = KEY_B, mine.session
        assert theirs.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 404
        other_env = Mcp(http, "/envs/captured/mcp")
        other_env.token, other_env.session = KEY_A, mine.session
        assert other_env.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}).status_code == 404
        prefixed = Mcp(http, f"/k/{KEY_A}/envs/mock/mcp")  # the secret URL prefix
        prefixed.session = mine.session
        assert (
            prefixed.result("tools/call", {"name": "add", "arguments": {"n": 5}})["isError"]
            is False
        )
        assert http.get(f"/k/{KEY_A}/v1/episodes/{mine.session}").json()["step_count"] == 1


def test_the_session_limit_is_a_server_error(serve: Serve) -> None:
    base = serve(create_app(Settings(api_keys=()), hub=exact_hub(limits=Limits(max_sessions=1))))
    with httpx.Client(base_url=base, timeout=30) as http:
        Mcp(http).initialize()
        refused = Mcp(http).call("initialize", INIT)
    assert refused["error"]["code"] == -32000 and refused["error"]["data"]["kind"] == "limit"


def test_openenv_session_extensions(mock: Mcp, http: httpx.Client) -> None:
    mock.version = ""  # OpenEnv's client sends no MCP headers, and no initialize
    created = mock.result("openenv/session/create", {})
    session = created["session_id"]
    assert created["task_id"] == "count-0"
    named = {"session_id": session}
    assert [t["name"] for t in mock.result("tools/list", named)["tools"]] == ["add", "get"]
    added = mock.result("tools/call", {"name": "add", "arguments": {"n": 7}, **named})
    assert added["structuredContent"] == {"total": 7}
    assert http.get(f"/v1/episodes/{session}").json()["state"] == {"total": 7}
    assert mock.result("openenv/session/close", named) == {"session_id": session, "closed": True}
    assert mock.error("openenv/session/close", named)["code"] == -32602
    assert mock.error("tools/call", {"name": "get", **named})["code"] == -32602
    assert mock.error("openenv/session/close", {})["code"] == -32602
    seeded = mock.result("openenv/session/create", {"task_id": "count-0", "seed": 4})
    assert http.get(f"/v1/episodes/{seeded['session_id']}").json()["task_id"] == "count-0"
    unknown = mock.error("openenv/session/create", {"task_id": "nope"})
    assert unknown["code"] == -32602 and unknown["data"]["kind"] == "not_found"


# ---------------------------------------------------------------------- transport


def test_batches_follow_the_protocol_version(mock: Mcp) -> None:
    mock.initialize("2025-03-26")
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
        {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "get"}},
        {"jsonrpc": "2.0", "id": "c", "method": "nope"},
    ]
    response = mock.post(batch)
    assert response.status_code == 200
    replies = response.json()
    assert [r["id"] for r in replies] == ["a", "b", "c"] and replies[2]["error"]["code"] == -32601
    assert mock.post(batch[1:2]).status_code == 202  # notifications only
    assert mock.post([]).status_code == 400
    assert (
        mock.post([{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}]).status_code
        == 400
    )
    mock.version = "2025-06-18"  # batches were removed in this revision
    refused = mock.post(batch)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32600


def test_malformed_messages(mock: Mcp, http: httpx.Client) -> None:
    response = http.post("/envs/mock/mcp", content=b'{"jsonrpc": "2.0",', headers=mock.headers())
    assert response.status_code == 400 and response.json()["error"]["code"] == -32700
    for message, code in (
        ({"id": 1, "method": "ping"}, -32600),  # no jsonrpc
        ({"jsonrpc": "2.0", "id": 1}, -32600),  # no method
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, -32600),  # MCP ids are never null
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, -32600),
        ("ping", -32600),
    ):
        reply = mock.post(message)
        assert reply.status_code == 200 and reply.json()["error"]["code"] == code, message


def test_transport_refusals(mock: Mcp, http: httpx.Client) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert mock.post(ping, **{"MCP-Protocol-Version": "2024-01-01"}).status_code == 400
    assert mock.post(ping, Origin="https://evil.example").status_code == 403
    assert mock.post(ping, Origin="http://localhost:3000").status_code == 200
    assert mock.post(ping, Accept="text/html").status_code == 406
    assert mock.post(ping, Accept="*/*").status_code == 200
    plain = http.post(
        "/envs/mock/mcp", content=json.dumps(ping), headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 415 and plain.json()["error"]["code"] == -32600
    assert http.get("/envs/mock/mcp").status_code == 405  # no server-to-client stream


def test_mcp_over_openenv_websocket(base: str) -> None:
    with connect(f"ws{base.removeprefix('http')}/envs/mock/ws") as ws:

        def rpc(message: dict[str, Any]) -> Any:
            ws.send(json.dumps({"type": "mcp", "data": message}))
            reply = json.loads(ws.recv(timeout=30))
            assert reply["type"] == "mcp", reply
            return reply["data"]

        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        before = rpc(call | {"params": {"name": "add", "arguments": {"n": 2}}})
        assert before["result"]["structuredContent"] == {"total": 2}  # stateless
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"
        rpc(call | {"params": {"name": "add", "arguments": {"n": 3}}})
        again = rpc(call | {"params": {"name": "add", "arguments": {"n": 3}}})
        assert again["result"]["structuredContent"] == {"total": 6}  # the socket's episode
        ws.send(json.dumps({"type": "state"}))
        assert json.loads(ws.recv(timeout=30))["data"]["step_count"] == 2
        session = rpc({"jsonrpc": "2.0", "id": 2, "method": "openenv/session/create"})
        state = rpc(
            call | {"params": {"name": "get", "session_id": session["result"]["session_id"]}}
        )
        assert state["result"]["structuredContent"] == {"total": 6}  # the socket's own session
        assert rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})["result"] == {}
        unknown = rpc(call | {"params": {"name": "nope"}})
        assert unknown["error"]["code"] == -32602
