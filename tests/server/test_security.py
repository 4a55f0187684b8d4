"""API tokens over a real uvicorn server on 127.0.0.1: a bearer header or a secret URL
prefix `/k/<token>/`, for HTTP and for OpenEnv's WebSocket; missing or wrong tokens are
401 (a refused handshake for WebSockets); /health is open; every key is its own namespace
of sessions; the token never reaches the server's log.

    python -m pytest -q tests/server/test_security.py
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from simworld.server.app import create_app
from simworld.server.hub import Hub
from simworld.server.settings import Settings
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig

KEY_A = "key-a-0123456789abcdefghij"
KEY_B = "key-b-9876543210zyxwvutsrq"
WRONG = "key-x-not-a-key-of-this-server"


@pytest.fixture
def base(serve: Callable[..., str]) -> str:
    """A server with two API keys, serving mock (also at the root) and frozenlake."""
    envs = {name: load_sim_env(name) for name in ("mock", "frozenlake")}
    hub = Hub(envs, None, router=RouterConfig(real_tools=frozenset({"add"})))
    settings = Settings(model=None, envs=("mock",), api_keys=(KEY_A, KEY_B))
    url: str = serve(create_app(settings, hub=hub), log_level="info")
    return url


@pytest.fixture
def access_log() -> Iterator[list[str]]:
    """Every line uvicorn and the app log while the test runs."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(level=logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("uvicorn.access", "uvicorn.error", "simworld")]
    for logger in loggers:
        logger.addHandler(handler)
    yield lines
    for logger in loggers:
        logger.removeHandler(handler)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_no_token_is_401_with_how_to_send_one(base: str) -> None:
    response = httpx.get(f"{base}/v1/envs")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["kind"] == "unauthorized"
    assert "Authorization: Bearer <token>" in error["message"] and "/k/<token>/" in error["message"]


@pytest.mark.parametrize(
    ("path", "headers", "says"),
    [
        ("/v1/envs", bearer(WRONG), "sent in the Authorization header is not valid"),
        (f"/k/{WRONG}/v1/envs", {}, "sent in the URL prefix /k/<token>/ is not valid"),
        ("/v1/envs", {"Authorization": f"Basic {KEY_A}"}, "needs an API token"),
        (f"/k/{KEY_A[:-1]}/v1/envs", {}, "is not valid"),  # a prefix of the key
        (f"/k/{WRONG}/v1/envs", bearer(KEY_A), "URL prefix"),  # the prefix is the one used
    ],
)
def test_a_wrong_token_either_way_is_401(
    base: str, path: str, headers: dict[str, str], says: str
) -> None:
    response = httpx.get(f"{base}{path}", headers=headers)
    assert response.status_code == 401 and says in response.json()["error"]["message"]
    assert WRONG not in response.text and KEY_A not in response.text


def test_the_right_token_either_way_is_200(base: str) -> None:
    by_header = httpx.get(f"{base}/v1/envs", headers=bearer(KEY_A))
    by_prefix = httpx.get(f"{base}/k/{KEY_B}/v1/envs")
    assert by_header.status_code == by_prefix.status_code == 200
    assert by_header.json() == by_prefix.json()
    assert [e["name"] for e in by_prefix.json()["envs"]] == ["mock", "frozenlake"]
    assert httpx.get(f"{base}/k/{KEY_A}/envs/mock/schema").status_code == 200  # OpenEnv too
    metrics = httpx.get(f"{base}/k/{KEY_A}/metrics").text
    assert 'simworld_errors_total{kind="unauthorized"}' not in metrics  # nothing refused yet


def test_health_is_open_but_a_presented_token_is_checked(base: str) -> None:
    for path in ("/health", "/envs/mock/health", "/envs/frozenlake/health"):
        assert httpx.get(f"{base}{path}").json() == {"status": "healthy"}
    assert httpx.get(f"{base}/k/{KEY_A}/health").status_code == 200
    assert httpx.get(f"{base}/k/{WRONG}/health").status_code == 401
    assert httpx.get(f"{base}/health", headers=bearer(WRONG)).status_code == 401
    assert httpx.get(f"{base}/metrics").status_code == 401  # only health is open
    counted = httpx.get(f"{base}/metrics", headers=bearer(KEY_A)).text
    assert 'simworld_errors_total{kind="unauthorized"} 3' in counted


def test_each_key_is_its_own_namespace_of_sessions(base: str) -> None:
    created = httpx.post(f"{base}/k/{KEY_A}/v1/episodes", json={"env": "mock"})
    assert created.status_code == 201
    eid = created.json()["episode_id"]
    step = {"tool_calls": [{"id": "c", "function": {"name": "add", "arguments": '{"n": 2}'}}]}
    # The same key by header reaches the session; the other key does not, as if unknown.
    mine = httpx.post(f"{base}/v1/episodes/{eid}/step", json=step, headers=bearer(KEY_A))
    assert mine.status_code == 200 and mine.json()["messages"][0]["content"] == '{"total": 2}'
    for method in ("GET", "DELETE"):
        theirs = httpx.request(method, f"{base}/k/{KEY_B}/v1/episodes/{eid}")
        assert theirs.status_code == 404 and theirs.json()["error"]["kind"] == "not_found"
    foreign_step = httpx.post(f"{base}/v1/episodes/{eid}/step", json=step, headers=bearer(KEY_B))
    assert foreign_step.status_code == 404
    view = httpx.get(f"{base}/v1/episodes/{eid}", headers=bearer(KEY_A)).json()
    assert view["step_count"] == 1 and view["state"] == {"total": 2}


def test_the_websocket_takes_the_token_by_prefix_or_header(base: str) -> None:
    ws = base.replace("http://", "ws://")
    for url, headers in ((f"{ws}/k/{KEY_A}/ws", None), (f"{ws}/envs/mock/ws", bearer(KEY_B))):
        with connect(url, additional_headers=headers) as conn:
            conn.send(json.dumps({"type": "reset", "data": {}}))
            reply = json.loads(conn.recv(timeout=30))
            assert reply["type"] == "observation", reply
            assert reply["data"]["done"] is False


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/ws", None), (f"/k/{WRONG}/ws", None), ("/envs/mock/ws", bearer(WRONG))],
)
def test_a_websocket_without_the_right_token_is_refused_at_the_handshake(
    base: str, path: str, headers: dict[str, str] | None
) -> None:
    with pytest.raises(InvalidStatus) as refused:
        connect(base.replace("http://", "ws://") + path, additional_headers=headers)
    response = refused.value.response
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["kind"] == "unauthorized"


def test_the_token_never_reaches_the_log(base: str, access_log: list[str]) -> None:
    httpx.get(f"{base}/k/{KEY_A}/v1/envs")
    httpx.get(f"{base}/k/{WRONG}/v1/envs")
    httpx.get(f"{base}/v1/envs", headers=bearer(KEY_B))
    httpx.get(f"{base}/k/{KEY_A}/no/such/route")
    with connect(base.replace("http://", "ws://") + f"/k/{KEY_A}/ws") as conn:
        conn.send(json.dumps({"type": "state"}))
        conn.recv(timeout=30)
    with pytest.raises(InvalidStatus):
        connect(base.replace("http://", "ws://") + f"/k/{WRONG}/ws")
    logged = "\n".join(access_log)
    assert "GET /v1/envs" in logged and "/no/such/route" in logged  # the log is on
    assert "WebSocket /ws" in logged
    for secret in (KEY_A, KEY_B, WRONG):
        assert secret not in logged


def test_without_keys_a_prefix_is_ignored_and_no_token_is_needed(
    serve: Callable[..., str],
) -> None:
    hub = Hub({"mock": load_sim_env("mock")}, None)
    base = serve(create_app(Settings(model=None, envs=("mock",), api_keys=()), hub=hub))
    assert httpx.get(f"{base}/v1/envs").status_code == 200
    assert httpx.get(f"{base}/k/anything-at-all/v1/envs").status_code == 200
    eid = httpx.post(f"{base}/v1/episodes", json={"env": "mock"}).json()["episode_id"]
    assert httpx.get(f"{base}/k/whatever/v1/episodes/{eid}").status_code == 200  # one owner ""


def test_keys_come_from_the_environment_and_must_be_strong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SIMWORLD_API_KEY", f"{KEY_A}, {KEY_B}")
    assert Settings(model=None, envs=("mock",)).api_keys == (KEY_A, KEY_B)
    monkeypatch.setenv("SIMWORLD_API_KEY", "")
    assert Settings(model=None, envs=("mock",)).api_keys == ()
    with pytest.raises(ValueError, match="at least 16 URL-safe characters") as short:
        Settings(model=None, envs=("mock",), api_keys=("short",))
    assert "short" not in str(short.value)  # the key is not echoed
    with pytest.raises(ValueError, match="URL-safe"):
        Settings(model=None, envs=("mock",), api_keys=("has/a/slash/in/it/0123456",))
