"""`simworld proxy`: forwarding unchanged, sessions, recording with secrets redacted, and an
HTTP JSON tool API (a FastAPI app, through its OpenAPI document) spoken to as MCP. Real
servers on 127.0.0.1 (tests/server/conftest.py's `serve`), real processes for the command.

    python -m pytest -q tests/server/test_proxy.py
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from fake_mcp import TOOLS, FakeMcp
from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel

from simworld.data.formats import read_episodes
from simworld.data.records import Episode, ToolCallsAction, ToolResultsObservation
from simworld.server.mcp_client import McpClient, McpError, connect_http, tool_result
from simworld.server.openapi_tools import load_spec, operations
from simworld.server.proxy import McpUpstream, OpenApiUpstream, Proxy, ensure_env, proxy_app
from simworld.server.recording import Recorder
from simworld.server.redaction import MARKER, Redactor, header_secrets

TOKEN = "secret-token-0123456789"
API_TOKEN = "api-token-abcdef123456"
Serve = Callable[..., str]


# ---------------------------------------------------------------------------- redaction


def test_redactor_replaces_secret_fields_at_any_depth_and_known_values() -> None:
    redactor = Redactor(extra=["pin"], secrets=["Bearer abcdefgh12345", "abcdefgh12345"])
    value = {"user": "ann", "Password": "x", "auth": {"api-key": [1, 2]}, "PIN": 3,
             "note": "sent Bearer abcdefgh12345 ok", "tokens_used": 4}  # fmt: skip
    assert redactor.value(value) == {
        "user": "ann",
        "Password": MARKER,
        "auth": {"api-key": MARKER},
        "PIN": MARKER,
        "note": f"sent {MARKER} ok",
        "tokens_used": MARKER,  # `token` matches inside names too: redaction errs on the safe side
    }


def test_redactor_edits_json_text_in_place_and_leaves_other_text_alone() -> None:
    redactor = Redactor()
    text = (
        '{\n  "user": "ann",\n  "session": {"token": "t-1", "n": [1,\n 2]},\n'
        '  "secret": {"a": 1}\n}'
    )
    assert redactor.text(text) == (
        '{\n  "user": "ann",\n  "session": {"token": "[REDACTED]", "n": [1,\n 2]},\n'
        '  "secret": "[REDACTED]"\n}'
    )
    assert redactor.text("password: hunter2 (not JSON)") == "password: hunter2 (not JSON)"
    assert redactor.text('["token", "x"]') == '["token", "x"]'  # a value named token is no field


def test_redactor_cleans_urls_and_command_lines() -> None:
    redactor = Redactor()
    assert redactor.url("https://u:pw@h:8/mcp?api_key=k1&q=1&Token=t") == (
        "https://h:8/mcp?api_key=[REDACTED]&q=1&Token=[REDACTED]"
    )
    assert redactor.argv(["srv", "--token", "abc", "--api-key=def", "--port", "9"]) == [
        "srv", "--token", MARKER, f"--api-key={MARKER}", "--port", "9",
    ]  # fmt: skip
    assert header_secrets({"Authorization": "Bearer xyz", "X-Api-Key": "k", "Accept": "a"}) == [
        "Bearer xyz", "xyz", "k",
    ]  # fmt: skip
    with pytest.raises(ValueError, match=r"redact pattern '\(' is not a regular expression"):
        Redactor(extra=["("])


def test_tool_result_keeps_text_structured_content_and_the_error_flag() -> None:
    text_only = {"content": [{"type": "text", "text": '{"a": 1}'}], "isError": False}
    assert tool_result("c", text_only).structured == {"a": 1}
    both = {"content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}],
            "structuredContent": {"b": 2}, "isError": True}  # fmt: skip
    result = tool_result("c", both)
    assert (result.text, result.structured, result.is_error) == ("x\ny", {"b": 2}, True)
    image = {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}
    assert json.loads(tool_result("c", image).text) == {"content": image["content"]}


# ---------------------------------------------------------------------------- an MCP upstream


@pytest.fixture
def fake(serve: Serve) -> tuple[FakeMcp, str]:
    upstream = FakeMcp(token=TOKEN, sse=True)
    return upstream, serve(upstream.app()) + "/mcp"


@pytest.fixture
def proxied(
    fake: tuple[FakeMcp, str], serve: Serve, tmp_path: Path
) -> Iterator[tuple[str, Path, Proxy]]:
    """A proxy in front of the fake server (its env captured first, with the token)."""
    _, url = fake
    auth = {"Authorization": f"Bearer {TOKEN}"}
    env = ensure_env(tmp_path / "fake", McpUpstream(url=url, headers=auth), Redactor())
    dump = tmp_path / "fake" / "recordings" / "proxy.jsonl"
    with Recorder(dump) as recorder:
        proxy = Proxy(McpUpstream(url=url), env, recorder, Redactor(extra=["region"]))
        yield serve(proxy_app(proxy)) + "/mcp", dump, proxy
        proxy.close()


def episodes(dump: Path) -> list[Episode]:
    result = read_episodes(dump)
    assert result.bad == []
    return result.episodes


def test_proxy_forwards_requests_and_replies_unchanged(
    fake: tuple[FakeMcp, str], proxied: tuple[str, Path, Proxy]
) -> None:
    upstream, _ = fake
    url, _, _ = proxied
    client = httpx.Client(headers={"authorization": f"Bearer {TOKEN}", "x-trace": "t1"})
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}}
    init = {"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": params}
    sent = json.dumps(init, indent=3)  # not how any library writes it: must arrive as is
    reply = client.post(url, content=sent, headers={"content-type": "application/json"})
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    session = reply.headers["mcp-session-id"]
    assert upstream.requests[-1][2] == sent
    assert upstream.requests[-1][1]["x-trace"] == "t1"  # the client's headers go on
    result = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": {"name": "fake", "version": "9.1"},
        "instructions": "A fake server.",
    }
    expected = {"jsonrpc": "2.0", "id": 7, "result": result}
    assert reply.text == json.dumps(expected, indent=1)  # the SSE reply's bytes, unchanged
    headers = {"mcp-session-id": session, "content-type": "application/json"}
    note = client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers=headers)  # fmt: skip
    assert note.status_code == 202 and note.content == b""
    listed = client.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"},
                         headers=headers)  # fmt: skip
    assert listed.text == json.dumps(
        {"jsonrpc": "2.0", "id": 8, "result": {"tools": TOOLS}}, indent=1
    )
    unknown = client.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "resources/list"},
                          headers=headers)  # fmt: skip
    assert json.loads(unknown.text)["error"]["code"] == -32601
    assert client.delete(url, headers={"mcp-session-id": session}).status_code == 200
    assert upstream.ended  # the upstream session was ended too
    gone = client.post(url, json={"jsonrpc": "2.0", "id": 10, "method": "ping"}, headers=headers)
    assert gone.status_code == 404


def test_proxy_refuses_what_has_no_session_or_comes_from_elsewhere(
    proxied: tuple[str, Path, Proxy],
) -> None:
    url, _, _ = proxied
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    missing = httpx.post(url, json=ping)
    assert missing.status_code == 400 and "Mcp-Session-Id" in missing.json()["error"]["message"]
    discover = httpx.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "server/discover"})
    assert discover.status_code == 200 and discover.json()["error"]["code"] == -32601
    assert httpx.get(url).status_code == 405
    evil = httpx.post(url, json=ping, headers={"origin": "http://evil.example"})
    assert evil.status_code == 403
    assert httpx.post(url, content=b"{nope").json()["error"]["code"] == -32700
    batch = httpx.post(url, json=[ping])
    assert batch.status_code == 400 and "batches" in batch.json()["error"]["message"]


def test_proxy_records_each_session_as_an_episode_with_secrets_redacted(
    proxied: tuple[str, Path, Proxy],
) -> None:
    url, dump, proxy = proxied
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with McpClient(connect_http(url, auth)) as client:
        client.initialize()
        assert client.call_tool("echo", {"text": "hello", "region": "eu-1"})["isError"] is False
        login = client.call_tool("login", {"user": "ann", "password": "pw-98765"})
        assert login["structuredContent"]["token"] == f"session-of-{TOKEN}"  # the client sees it
        assert client.call_tool("boom", {})["isError"] is True
        with pytest.raises(McpError, match="Method not found"):
            client.request("prompts/list")
    with McpClient(connect_http(url, auth)) as client:
        client.initialize()
        client.call_tool("echo", {"text": "again"})
    text = dump.read_text()
    for secret in (TOKEN, "pw-98765", "eu-1"):
        assert secret not in text
    first, second = episodes(dump)
    assert (first.env, first.task.id, first.initial_state) == ("fake", "default", None)
    assert first.provenance.source == "mcp-proxy" and first.provenance.version == "fake 9.1"
    assert [t.name for t in first.tools] == ["echo", "login", "boom"]
    calls = [s.action.calls[0] for s in first.steps if isinstance(s.action, ToolCallsAction)]
    assert [(c.id, c.name) for c in calls] == [("call_0_0", "echo"), ("call_1_0", "login"),
                                               ("call_2_0", "boom")]  # fmt: skip
    assert calls[0].arguments == {"text": "hello", "region": MARKER}
    assert calls[1].arguments == {"user": "ann", "password": MARKER}
    assert json.loads(calls[1].raw_arguments) == calls[1].arguments
    results = [s.observation.results[0] for s in first.steps
               if isinstance(s.observation, ToolResultsObservation)]  # fmt: skip
    assert results[1].text == json.dumps({"user": "ann", "token": MARKER}, indent=2)
    assert results[1].structured == {"user": "ann", "token": MARKER}
    assert (results[2].text, results[2].is_error) == ("it blew up", True)
    assert all(s.info == {"source": "real"} and s.state is None for s in first.steps)
    assert len(second.steps) == 1 and second.episode_id != first.episode_id
    assert proxy.recorded_steps == 4


DYING = """
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "tools/call":
        print("crashed on purpose", file=sys.stderr)
        sys.exit(4)
    if "id" in m:
        result = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "d"}}
        if m["method"] == "tools/list":
            result = {"tools": []}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"""


def test_an_upstream_that_dies_ends_the_session_with_502(serve: Serve, tmp_path: Path) -> None:
    script = tmp_path / "dying.py"
    script.write_text(DYING)
    upstream = McpUpstream(command=(sys.executable, str(script)), timeout=10)
    env = ensure_env(tmp_path / "dying", upstream, Redactor())
    proxy = Proxy(upstream, env, None)
    url = serve(proxy_app(proxy), allow_5xx=True) + "/mcp"  # the 502 is the point
    client = httpx.Client(timeout=30)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    session = client.post(url, json=init).headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}}
    died = client.post(url, json=call, headers={"mcp-session-id": session})
    assert died.status_code == 502
    message = died.json()["error"]["message"]
    assert "exited with code 4" in message and "crashed on purpose" in message
    again = client.post(url, json=call, headers={"mcp-session-id": session})
    assert again.status_code == 404
    proxy.close()


# ---------------------------------------------------------------------------- an HTTP tool API


class NewItem(BaseModel):
    name: str
    qty: int = 1
    secret_note: str = ""


class Item(BaseModel):
    id: int
    name: str
    qty: int


def inventory_api() -> FastAPI:
    """A small inventory API that wants a bearer token."""
    app = FastAPI(title="inventory", version="2.0", description="Items in stock.")
    items: dict[int, Item] = {}

    def check(authorization: str | None) -> None:
        if authorization != f"Bearer {API_TOKEN}":
            raise HTTPException(401, "bad token")

    @app.post("/items", operation_id="add_item", summary="Add an item")
    def add_item(item: NewItem, authorization: Annotated[str | None, Header()] = None) -> Item:
        check(authorization)
        items[len(items) + 1] = Item(id=len(items) + 1, name=item.name, qty=item.qty)
        return items[len(items)]

    @app.get("/items/{item_id}", operation_id="get_item")
    def get_item(item_id: int, authorization: Annotated[str | None, Header()] = None) -> Item:
        check(authorization)
        if item_id not in items:
            raise HTTPException(404, f"no item {item_id}")
        return items[item_id]

    @app.get("/items", operation_id="list_items")
    def list_items(
        limit: int = 10, authorization: Annotated[str | None, Header()] = None
    ) -> list[Item]:
        check(authorization)
        return list(items.values())[:limit]

    return app


def test_openapi_operations_become_mcp_tools(serve: Serve) -> None:
    spec = load_spec(serve(inventory_api()) + "/openapi.json")
    tools = {op.name: op for op in operations(spec)}
    assert list(tools) == ["list_items", "add_item", "get_item"]  # paths in order, GET first
    add = tools["add_item"].tool
    assert add["description"] == "Add an item"
    schema: Any = add["inputSchema"]
    assert list(schema["properties"]) == ["authorization", "name", "qty", "secret_note"]
    assert schema["required"] == ["name"]
    assert add["outputSchema"]["properties"]["id"] == {"title": "Id", "type": "integer"}  # type: ignore[index]
    get = tools["get_item"]
    assert get.tool["inputSchema"]["required"] == ["item_id"]  # type: ignore[index]
    assert get.tool["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    assert "outputSchema" not in tools["list_items"].tool  # an array is no MCP output schema


def test_openapi_proxy_calls_the_api_and_records_without_its_token(
    serve: Serve, tmp_path: Path
) -> None:
    base = serve(inventory_api())
    spec = load_spec(base + "/openapi.json")
    upstream = OpenApiUpstream(spec, base, {"Authorization": f"Bearer {API_TOKEN}"})
    redactor = Redactor(secrets=header_secrets(upstream.headers))
    env = ensure_env(tmp_path / "inventory", upstream, redactor)
    dump = tmp_path / "inventory.jsonl"
    with Recorder(dump) as recorder:
        proxy = Proxy(upstream, env, recorder, redactor)
        url = serve(proxy_app(proxy)) + "/mcp"
        with McpClient(connect_http(url)) as client:
            init = client.initialize().value
            assert init["result"]["serverInfo"] == {"name": "inventory", "version": "2.0"}  # type: ignore[index]
            assert init["result"]["instructions"] == "Items in stock."  # type: ignore[index]
            added = client.call_tool("add_item", {"name": "bolt", "qty": 3, "secret_note": "s3"})
            assert added["structuredContent"] == {"id": 1, "name": "bolt", "qty": 3}
            got = client.call_tool("get_item", {"item_id": 1})
            assert json.loads(got["content"][0]["text"]) == {"id": 1, "name": "bolt", "qty": 3}  # type: ignore[index]
            missing = client.call_tool("get_item", {"item_id": 9})
            assert missing["isError"] is True and "no item 9" in missing["content"][0]["text"]  # type: ignore[index]
            listed = client.call_tool("list_items", {"limit": 5})
            assert json.loads(listed["content"][0]["text"])[0]["name"] == "bolt"  # type: ignore[index]
            with pytest.raises(McpError, match="Unknown tool: nope"):
                client.call_tool("nope", {})
        proxy.close()
    text = dump.read_text()
    assert API_TOKEN not in text and "s3" not in text
    (episode,) = episodes(dump)
    assert episode.env == "inventory" and len(episode.steps) == 4
    first = episode.steps[0].action
    assert isinstance(first, ToolCallsAction)
    assert first.calls[0].arguments == {"name": "bolt", "qty": 3, "secret_note": MARKER}
    meta = json.loads((tmp_path / "inventory" / "env.json").read_text())
    assert meta["source"] == {"transport": "openapi", "base_url": base}


# ---------------------------------------------------------------------------- the command


def test_proxy_command_captures_serves_records_and_stops_cleanly(
    fake: tuple[FakeMcp, str], tmp_path: Path
) -> None:
    _, url = fake
    env_dir, dump = tmp_path / "fake", tmp_path / "dump.jsonl"
    command = [sys.executable, "-m", "simworld", "proxy", "--upstream-url", url,
               "--header", f"Authorization=Bearer {TOKEN}", "--env", str(env_dir),
               "--record", str(dump), "--port", "0"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.startswith("simworld proxy: ready at http://127.0.0.1:"), process.stderr
        assert TOKEN not in ready and "env 'fake'" in ready
        proxy_url = ready.split("ready at ")[1].split(" ")[0]
        with McpClient(connect_http(proxy_url)) as client:
            client.initialize()
            assert client.call_tool("echo", {"text": "via the command"})["isError"] is False
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert f"recorded 1 tool calls to {dump}" in out
    (episode,) = episodes(dump)
    assert episode.steps[0].observation == ToolResultsObservation(
        [tool_result("call_0_0", {"content": [{"type": "text", "text": "via the command"}]})]
    )
    assert (
        json.loads((env_dir / "env.json").read_text())["initialize"]["serverInfo"]["name"] == "fake"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--openapi", "spec.json", "--upstream-stdio", "x"], "--openapi needs --upstream-url"),
        (["--upstream-stdio", "x", "--header", "A=b"], "--header goes with --upstream-url"),
        (["--upstream-url", "http://127.0.0.1:1/mcp", "--redact", "("], "not a regular expression"),
    ],
)
def test_proxy_usage_mistakes_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "simworld", "proxy", *args, "--env", str(tmp_path / "e")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
