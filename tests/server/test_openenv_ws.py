"""OpenEnv's WebSocket `/ws` against a real uvicorn server: one connection is one session
(opened at the first reset, closed by `close` or by the connection ending), OpenEnv's
messages and error codes, and observations that validate against /schema.

    python -m pytest -q tests/server/test_openenv_ws.py

The hub runs without a world model (exact real backends for `mock` and `frozenlake`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import jsonschema
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from simworld.server.app import create_app
from simworld.server.hub import Hub, Limits
from simworld.server.settings import Settings
from simworld.simulators.router import RouterConfig

Serve = Callable[..., str]
EMPTY_STATE = {"episode_id": None, "step_count": 0, "task_id": None, "state": None, "done": False}


@pytest.fixture()
def exact_hub(make_hub: Callable[..., Hub]) -> Callable[..., Hub]:
    """Hubs over mock and frozenlake without a model (their real backends answer)."""
    router = RouterConfig(max_real_cost=1.0)
    return lambda limits=None: make_hub(("mock", "frozenlake"), router=router, limits=limits)


@pytest.fixture()
def hub(exact_hub: Callable[..., Hub]) -> Hub:
    return exact_hub()


@pytest.fixture()
def base(serve: Serve, hub: Hub) -> str:
    return serve(create_app(Settings(api_keys=()), hub=hub))


@pytest.fixture(autouse=True)
def no_server_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """However a connection ends, the server logs no error (no ASGI exception)."""
    yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


class Socket:
    """A /ws connection that sends a message and reads the one reply; every observation
    it reads is checked against the env's /schema."""

    def __init__(self, conn: ClientConnection, base: str, prefix: str) -> None:
        self.schemas = httpx.get(f"{base}{prefix}/schema").json()
        self.schema = self.schemas["observation"]
        self.conn = conn

    def send(self, message: Any) -> dict[str, Any]:
        self.conn.send(message if isinstance(message, str) else json.dumps(message))
        reply: dict[str, Any] = json.loads(self.conn.recv(timeout=30))
        if reply["type"] == "observation":
            assert set(reply["data"]) == {"observation", "reward", "done"}
            jsonschema.validate(reply["data"]["observation"], self.schema)
        return reply

    def error(self, message: Any) -> dict[str, Any]:
        reply = self.send(message)
        assert reply["type"] == "error", reply
        data: dict[str, Any] = reply["data"]
        assert data["message"] and data["code"]
        return data


Opener = Callable[..., Socket]


@pytest.fixture()
def sockets(base: str) -> Iterator[Opener]:
    """Opens /ws connections (`sockets(prefix, base=...)`); all closed after the test."""
    with ExitStack() as stack:

        def open_socket(prefix: str, server: str = base) -> Socket:
            conn = stack.enter_context(connect(f"ws{server.removeprefix('http')}{prefix}/ws"))
            return Socket(conn, server, prefix)

        yield open_socket


def add(n: Any) -> dict[str, Any]:
    return {"type": "call_tool", "tool_name": "add", "arguments": {"n": n}}


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_connection_is_one_session(sockets: Opener, hub: Hub) -> None:
    ws = sockets("/envs/mock")
    empty = ws.send({"type": "state"})
    assert empty == {"type": "state", "data": EMPTY_STATE}
    assert hub.live_count() == 0  # nothing opened before the first reset

    first = ws.send({"type": "reset", "data": {"seed": 1}})
    assert first["type"] == "observation" and first["data"]["reward"] is None
    assert first["data"]["observation"]["instruction"].startswith("Bring the counter")
    step = ws.send({"type": "step", "data": add(4)})["data"]
    assert step["observation"]["result"]["data"] == {"total": 4} and step["done"] is False
    state = ws.send({"type": "state"})["data"]
    assert len(state["episode_id"]) >= 32  # the hub's unguessable id
    assert (state["step_count"], state["state"], state["done"]) == (1, {"total": 4}, False)
    assert hub.live_count() == 1

    ws.send({"type": "reset", "data": {}})  # a reset restarts the same session
    again = ws.send({"type": "state"})["data"]
    assert again["episode_id"] == state["episode_id"] and again["state"] == {"total": 0}

    ws.conn.send(json.dumps({"type": "close"}))
    with pytest.raises(ConnectionClosed):
        ws.conn.recv(timeout=10)
    wait_for(lambda: hub.live_count() == 0)


def test_two_connections_two_sessions_a_disconnect_closes(sockets: Opener, hub: Hub) -> None:
    one, two = sockets("/envs/mock"), sockets("/envs/mock")
    one.send({"type": "reset", "data": {}})
    two.send({"type": "reset", "data": {}})
    one.send({"type": "step", "data": add(9)})
    assert one.send({"type": "state"})["data"]["state"] == {"total": 9}
    assert two.send({"type": "state"})["data"]["state"] == {"total": 0}
    assert hub.live_count() == 2
    one.conn.close()  # no close message: the connection ending closes the session
    wait_for(lambda: hub.live_count() == 1)
    assert two.send({"type": "step", "data": add(1)})["data"]["observation"]["result"]["data"] == {
        "total": 1
    }


def test_the_episode_plays_to_its_end(sockets: Opener) -> None:
    ws = sockets("/envs/mock")
    ws.send({"type": "reset", "data": {}})
    end = ws.send({"type": "step", "data": add(10)})["data"]
    assert (end["reward"], end["done"]) == (1.0, True)
    over = ws.error({"type": "step", "data": add(1)})
    assert over["code"] == "EXECUTION_ERROR" and "over" in over["message"]
    assert ws.send({"type": "state"})["data"]["done"] is True


def test_mistakes_answer_openenv_error_codes_and_keep_the_socket(sockets: Opener) -> None:
    ws = sockets("/envs/mock")
    assert ws.error("{not json")["code"] == "INVALID_JSON"
    assert ws.error({"type": "dance"})["code"] == "UNKNOWN_TYPE"
    assert ws.error(["reset"])["code"] == "VALIDATION_ERROR"
    before = ws.error({"type": "step", "data": add(1)})
    assert before["code"] == "SESSION_ERROR" and "reset" in before["message"]
    assert ws.error({"type": "reset", "data": {"seed": -1}})["code"] == "VALIDATION_ERROR"
    assert ws.error({"type": "reset", "data": {"task_id": "nope"}})["code"] == "VALIDATION_ERROR"
    assert ws.error({"type": "state", "extra": 1})["code"] == "VALIDATION_ERROR"
    assert ws.error({"type": "step"})["code"] == "VALIDATION_ERROR"  # no data

    ws.send({"type": "reset", "data": {}})
    bad = ws.error({"type": "step", "data": {"type": "call_tool", "arguments": {}}})
    assert bad["code"] == "VALIDATION_ERROR"
    assert [e["loc"] for e in bad["errors"]] == [["call_tool", "tool_name"]]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"type": "call_tool", "arguments": {}}, ws.schemas["action"])
    # After all that the session still works.
    assert ws.send({"type": "step", "data": add(2)})["data"]["observation"]["result"]["data"] == {
        "total": 2
    }


def test_list_tools_works_before_and_after_a_reset_and_takes_no_step(sockets: Opener) -> None:
    ws = sockets("/envs/mock")
    listed = ws.send({"type": "step", "data": {"type": "list_tools"}})["data"]
    assert [t["name"] for t in listed["observation"]["tools"]] == ["add", "get"]
    ws.send({"type": "reset", "data": {}})
    again = ws.send({"type": "step", "data": {"type": "list_tools"}})["data"]
    assert again["observation"] == listed["observation"]
    assert ws.send({"type": "state"})["data"]["step_count"] == 0


def test_mcp_messages_answer_over_the_socket(sockets: Opener) -> None:
    ws = sockets("/envs/mock")
    rpc = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
    listed = ws.send({"type": "mcp", "data": rpc})
    assert listed["type"] == "mcp" and listed["data"]["id"] == 7
    tools = listed["data"]["result"]["tools"]
    assert [t["name"] for t in tools] == ["add", "get"] and "inputSchema" in tools[0]
    call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "get"}}
    got = ws.send({"type": "mcp", "data": call})["data"]["result"]  # stateless before a reset
    assert got["isError"] is False and '"total": 0' in got["content"][0]["text"]
    unknown = {"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "nope"}}
    assert ws.send({"type": "mcp", "data": unknown})["data"]["error"]["code"] == -32602
    assert ws.send({"type": "mcp", "data": {"id": 9}})["data"]["error"]["code"] == -32600
    text = sockets("/envs/frozenlake")
    assert text.send({"type": "mcp", "data": rpc})["data"]["error"]["code"] == -32601


def test_text_env_over_ws(sockets: Opener) -> None:
    ws = sockets("/envs/frozenlake")
    first = ws.send({"type": "reset", "data": {"seed": 3}})["data"]["observation"]
    assert first["text"] == "\nAFFF\nFFFF\nFFFF\nFFHG\n"
    moved = ws.send({"type": "step", "data": {"message": "RIGHT"}})["data"]
    assert set(moved["observation"]) == {"text"} and moved["reward"] == 0.0
    assert ws.error({"type": "step", "data": {"text": "RIGHT"}})["code"] == "VALIDATION_ERROR"


def test_the_session_limit_is_capacity_reached(
    sockets: Opener, serve: Serve, exact_hub: Callable[..., Hub]
) -> None:
    hub = exact_hub(Limits(max_sessions=1))
    base = serve(create_app(Settings(api_keys=()), hub=hub))
    first, second = sockets("/envs/mock", base), sockets("/envs/mock", base)
    first.send({"type": "reset", "data": {}})
    full = second.error({"type": "reset", "data": {}})
    assert full["code"] == "CAPACITY_REACHED" and "limit" in full["message"]
    first.conn.close()
    wait_for(lambda: hub.live_count() == 0)
    assert second.send({"type": "reset", "data": {}})["type"] == "observation"


def test_the_root_ws_is_the_first_env(sockets: Opener) -> None:
    ws = sockets("")
    first = ws.send({"type": "reset", "data": {}})["data"]["observation"]
    assert [t["name"] for t in first["tools"]] == ["add", "get"]
