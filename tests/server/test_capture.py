"""`simworld capture` and captured envs: a real FastMCP server over stdio and streamable
HTTP (SSE and JSON replies), a hand-written server with a token and paged tools, the env
directory's files and how envs load from it, and the raw JSON spans the capture keeps.

    python -m pytest -q tests/server/test_capture.py              # slow ones need the mcp venv
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from client_venvs import mcp_python
from fake_mcp import TOOLS, FakeMcp

from simworld.server.mcp_client import (
    McpClient,
    StdioTransport,
    TransportError,
    array_items,
    connect_stdio,
    value_spans,
)
from simworld.simulators.envs import load_sim_env, sim_env_name
from simworld.simulators.envs.captured import (
    CapturedEnv,
    CapturedEnvError,
    load_captured_env,
    write_captured_env,
)

NOTES = Path(__file__).with_name("notes_mcp_server.py")
TOKEN = "secret-token-0123456789"
Serve = Callable[..., str]


def simworld(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the `simworld` command in a real process."""
    command = [sys.executable, "-m", "simworld", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def python() -> Path:
    return mcp_python()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def notes_http(python: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """The notes server over streamable HTTP (SSE replies; JSON ones when parametrized)."""
    port = free_port()
    extra = ["--json"] if getattr(request, "param", False) else []
    process = subprocess.Popen(
        [str(python), str(NOTES), "--http", str(port), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("the notes server did not start") from None
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def raw_tools_line(python: Path) -> str:
    """The notes server's tools/list reply line exactly as it writes it (no simworld code)."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion":
         "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]  # fmt: skip
    stdin = "".join(json.dumps(line) + "\n" for line in lines)
    process = subprocess.Popen(
        [str(python), str(NOTES)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(stdin)
    process.stdin.flush()
    replies = [process.stdout.readline(), process.stdout.readline()]
    process.stdin.close()
    process.wait(timeout=10)
    return next(r for r in replies if '"id":2' in r).rstrip("\n")


# ---------------------------------------------------------------------------- a real server


@pytest.mark.slow
def test_capture_over_stdio_keeps_the_tools_bytes_and_the_server_identity(
    python: Path, tmp_path: Path
) -> None:
    out = tmp_path / "notes"
    done = simworld("capture", "--stdio", f"{python} {NOTES}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"simworld capture: 5 tools of notes 1.30.0 (protocol 2025-11-25) saved to {out} "
        "as env 'notes'"
    )
    meta = json.loads((out / "env.json").read_text())
    assert meta["initialize"]["serverInfo"] == {"name": "notes", "version": "1.30.0"}
    assert meta["initialize"]["protocolVersion"] == "2025-11-25"
    assert meta["rules"] == ["A notes store: add, list, read and delete short notes."]
    assert meta["source"] == {"transport": "stdio", "command": [str(python), str(NOTES)]}
    # Every tool's bytes, as the server wrote them, one per line of tools.json.
    saved = (out / "tools.json").read_text().splitlines()[1:-1]
    raw = raw_tools_line(python)
    assert len(saved) == 5
    for line in saved:
        assert line.rstrip(",") in raw
    env = load_sim_env(str(out))
    assert isinstance(env, CapturedEnv) and env.name == "notes"
    task = env.task_for()
    assert task.id == "default" and task.initial_state is None
    names = [tool.name for tool in task.tools]
    assert names == ["add_note", "list_notes", "get_note", "delete_note", "login"]
    get_note = task.tools[2]
    assert get_note.output_schema is not None and get_note.output_schema["title"] == "Note"
    assert list(get_note.original) == ["name", "description", "inputSchema", "outputSchema"]


@pytest.mark.slow
@pytest.mark.parametrize("notes_http", [False, True], ids=["sse", "json"], indirect=True)
def test_capture_over_http_gives_the_same_tools_as_over_stdio(
    python: Path, notes_http: str, tmp_path: Path
) -> None:
    over_http = tmp_path / "http"
    done = simworld("capture", "--url", notes_http, "--out", str(over_http), "--name", "notes")
    assert done.returncode == 0, done.stderr
    over_stdio = tmp_path / "stdio"
    assert (
        simworld("capture", "--stdio", f"{python} {NOTES}", "--out", str(over_stdio)).returncode
        == 0
    )
    assert (over_http / "tools.json").read_bytes() == (over_stdio / "tools.json").read_bytes()
    meta = json.loads((over_http / "env.json").read_text())
    assert meta["name"] == "notes"
    assert meta["source"] == {"transport": "streamable-http", "url": notes_http, "headers": []}


# ---------------------------------------------------------------------------- a strict server


def test_capture_sends_the_token_pages_the_tools_and_saves_no_secret(
    serve: Serve, tmp_path: Path
) -> None:
    upstream = FakeMcp(token=TOKEN, page_size=2, sse=True)
    url = serve(upstream.app()) + f"/mcp?api_key={TOKEN}&region=eu"
    out = tmp_path / "fake"
    done = simworld("capture", "--url", url, "--header", f"Authorization=Bearer {TOKEN}",
                    "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "3 tools of fake 9.1 (protocol 2025-11-25)" in done.stdout
    # Two pages, each tool kept as its bytes (the server writes indented JSON).
    page = json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"tools": TOOLS[:2]}}, indent=1)
    saved = (out / "tools.json").read_text()
    assert json.loads(saved) == TOOLS
    for item in array_items(page, ("result", "tools")):
        assert item in saved and "\n   " in item  # indented as the server wrote it
    methods = [json.loads(b).get("method") for m, _, b in upstream.requests if m == "POST"]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "tools/list"]
    (session,) = upstream.issued
    later = [h for m, h, _ in upstream.requests[1:] if m == "POST"]
    assert all(h["mcp-session-id"] == session for h in later)
    assert all(h["mcp-protocol-version"] == "2025-11-25" for h in later)
    assert all(h["authorization"] == f"Bearer {TOKEN}" for _, h, _ in upstream.requests)
    assert upstream.ended == [session]  # the session was ended with DELETE
    for name in ("env.json", "tools.json", "tasks.json"):
        assert TOKEN not in (out / name).read_text()
    source = json.loads((out / "env.json").read_text())["source"]
    assert source["headers"] == ["Authorization"]
    assert source["url"].endswith("/mcp?api_key=[REDACTED]&region=eu")


def test_capture_reports_a_refused_token_and_writes_nothing(serve: Serve, tmp_path: Path) -> None:
    url = serve(FakeMcp(token=TOKEN).app()) + "/mcp"
    out = tmp_path / "fake"
    done = simworld(
        "capture", "--url", url, "--header", "Authorization=Bearer wrong", "--out", str(out)
    )
    assert done.returncode == 1
    assert "HTTP 401" in done.stderr and "unauthorized" in done.stderr
    assert not (out / "env.json").exists()


def test_capture_reports_a_server_that_dies_with_its_stderr(tmp_path: Path) -> None:
    script = "import sys; print('no config file', file=sys.stderr); sys.exit(3)"
    done = simworld(
        "capture", "--stdio", f'{sys.executable} -c "{script}"', "--out", str(tmp_path / "x")
    )
    assert done.returncode == 1
    assert "exited with code 3" in done.stderr and "no config file" in done.stderr
    missing = simworld("capture", "--stdio", "no-such-command-xyz", "--out", str(tmp_path / "y"))
    assert missing.returncode == 1 and "cannot start the server" in missing.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://127.0.0.1:1/mcp", "--header", "nope"], "expected NAME=VALUE"),
        (["--stdio", "true", "--header", "A=b"], "--header goes with --url"),
        (["--stdio", "true", "--name", "bad name"], "env name 'bad name' is not usable"),
        (["--url", "ftp://x/mcp"], "must start with http://"),
    ],
)
def test_capture_usage_mistakes_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    done = simworld("capture", *args, "--out", str(tmp_path / "env"))
    assert done.returncode == 2
    assert message in done.stderr


def test_capture_keeps_an_existing_env_unless_forced(serve: Serve, tmp_path: Path) -> None:
    url = serve(FakeMcp().app()) + "/mcp"
    out = tmp_path / "fake"
    assert simworld("capture", "--url", url, "--out", str(out)).returncode == 0
    again = simworld("capture", "--url", url, "--out", str(out))
    assert again.returncode == 2 and "pass --force to replace it" in again.stderr
    assert simworld("capture", "--url", url, "--out", str(out), "--force").returncode == 0


# ---------------------------------------------------------------------------- the client


def test_stdio_client_answers_server_pings_and_skips_notifications(tmp_path: Path) -> None:
    server = tmp_path / "pinger.py"
    server.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' not in m: continue\n"
        "    if m.get('method') is None: print('got', json.dumps(m), file=sys.stderr); continue\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'method': 'notifications/message'}))\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'id': 'p1', 'method': 'ping'}), flush=True)\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'ok': m['method']}}),"
        " flush=True)\n"
    )
    with McpClient(connect_stdio([sys.executable, str(server)], timeout=10)) as client:
        reply = client.request("tools/list")
        assert reply.value == {"jsonrpc": "2.0", "id": 1, "result": {"ok": "tools/list"}}
        assert reply.raw == '{"jsonrpc": "2.0", "id": 1, "result": {"ok": "tools/list"}}'


def test_stdio_client_times_out_with_a_clear_message() -> None:
    silent = StdioTransport([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    try:
        with pytest.raises(TransportError, match=r"no reply to request 1 within 0.5 s"):
            silent.send('{"jsonrpc": "2.0", "id": 1, "method": "ping"}', 1)
    finally:
        silent.close()


def test_value_spans_locate_every_value_as_written() -> None:
    text = '{"a" : [1, {"b":"x,y"} ],"c":{ }, "d": "}"}'
    spans = {path: text[start:end] for path, start, end in value_spans(text)}
    assert spans[("a", 0)] == "1"
    assert spans[("a", 1, "b")] == '"x,y"'
    assert spans[("a", 1)] == '{"b":"x,y"}'
    assert spans[("a",)] == '[1, {"b":"x,y"} ]'
    assert spans[("c",)] == "{ }"
    assert spans[("d",)] == '"}"'
    assert spans[()] == text
    reply = '{"result": {"tools": [ {"name":"a"} ,\n{ "name" : "b" }], "n": 1}}'
    assert array_items(reply, ("result", "tools")) == ['{"name":"a"}', '{ "name" : "b" }']


# ---------------------------------------------------------------------------- env directories


def write_env(directory: Path, name: str = "fake") -> Path:
    tools = [json.dumps(t, separators=(",", ":")) for t in TOOLS]
    init = {"protocolVersion": "2025-06-18", "serverInfo": {"name": "fake", "version": "1"}}
    source = {"transport": "stdio", "command": ["fake"]}
    return write_captured_env(directory, name=name, initialize=init, tools=tools, source=source)


def test_envs_load_by_directory_and_by_name_on_the_search_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_env(tmp_path / "envs" / "fake")
    monkeypatch.setenv("SIMWORLD_ENV_PATH", f"{tmp_path / 'nowhere'}:{tmp_path / 'envs'}")
    env = load_sim_env("fake")
    assert env.name == "fake" and env.action_kind == "tool_calls"
    assert [t.name for t in env.task_for().tools] == ["echo", "login", "boom"]
    assert sim_env_name(str(tmp_path / "envs" / "fake")) == "fake"
    (tmp_path / "other").mkdir()
    write_env(tmp_path / "other" / "fake")
    with pytest.raises(ValueError, match="another env is already called 'fake'"):
        sim_env_name(str(tmp_path / "other" / "fake"))
    with pytest.raises(ValueError, match=r"unknown simulated env 'nope'.*SIMWORLD_ENV_PATH"):
        load_sim_env("nope")


def test_tasks_file_gives_tasks_and_states(tmp_path: Path) -> None:
    root = write_env(tmp_path / "fake")
    tasks = [{"id": "empty", "instruction": "start"}, {"id": "one", "initial_state": {"n": 1}}]
    (root / "tasks.json").write_text(json.dumps(tasks))
    env = load_captured_env(root)
    assert list(env.tasks) == ["empty", "one"]
    assert env.tasks["one"].initial_state == {"n": 1} and env.tasks["empty"].instruction == "start"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: (r / "env.json").unlink(), "env.json: missing"),
        (lambda r: (r / "tools.json").write_text("[{"), "tools.json: not valid JSON"),
        (lambda r: (r / "tools.json").write_text('[{"name": 3}]'), r"tools.json: \[0\].name"),
        (
            lambda r: (r / "tools.json").write_text('[{"name": "a"}, {"name": "a"}]'),
            "tool 'a' is listed twice",
        ),
        (lambda r: (r / "tasks.json").write_text('[{"id": ""}]'), r"tasks.json: \[0\].id"),
        (lambda r: (r / "env.json").write_text('{"format": "x"}'), "format: expected"),
    ],
)
def test_broken_env_directories_say_which_file_and_what(
    tmp_path: Path, edit: Callable[[Path], object], message: str
) -> None:
    root = write_env(tmp_path / "fake")
    edit(root)
    with pytest.raises(CapturedEnvError, match=message):
        load_captured_env(root)


def test_env_names_must_be_usable_in_urls(tmp_path: Path) -> None:
    with pytest.raises(CapturedEnvError, match="is not usable"):
        write_env(tmp_path / "x", name="../up")
    assert not (tmp_path / "x" / "env.json").exists()
