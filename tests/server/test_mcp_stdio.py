"""`simworld mcp`, the MCP stdio server, driven as a real subprocess over its pipes: one
JSON-RPC line in, one line out; sessions per process; logs on stderr only; usage
mistakes exit 2; `--record` keeps the steps.

    python -m pytest -q tests/server/test_mcp_stdio.py

The server runs without a world model on the `mock` env: `add` is answered by its exact
real backend (--real-tool add) and `get` by its rules.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simworld.data import read_episodes

COMMAND = [sys.executable, "-m", "simworld", "mcp"]
MOCK = ["--env", "mock", "--model", "none", "--real-tool", "add"]
INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"},
}
TIMEOUT = 60


class StdioServer:
    """The command's process; `ask` writes one line and reads the next line back."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [*COMMAND, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def write(self, message: Any) -> None:
        assert self.process.stdin is not None
        raw = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.process.stdin.write(raw + b"\n")
        self.process.stdin.flush()

    def ask(self, message: Any) -> Any:
        self.write(message)
        line = self.lines.get(timeout=TIMEOUT)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        return json.loads(line)

    def call(self, rid: int, method: str, params: Any = None) -> Any:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        reply = self.ask(message)
        assert reply["id"] == rid
        return reply

    def finish(self) -> tuple[int, bytes]:
        """Close stdin (the client leaves): the exit code and what went to stderr."""
        assert self.process.stdin is not None and self.process.stderr is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=TIMEOUT)
        self.reader.join(timeout=TIMEOUT)  # every line the process wrote is queued
        return code, self.process.stderr.read()


@pytest.fixture()
def server() -> Iterator[StdioServer]:
    running = StdioServer(*MOCK, "--log-level", "info")
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait()


def test_a_session_over_stdio(server: StdioServer) -> None:
    result = server.call(1, "initialize", INIT)["result"]
    assert result["protocolVersion"] == "2025-06-18" and result["capabilities"]["tools"]
    server.write({"jsonrpc": "2.0", "method": "notifications/initialized"})  # no reply
    tools = server.call(2, "tools/list")["result"]["tools"]
    assert [tool["name"] for tool in tools] == ["add", "get"] and "outputSchema" in tools[0]
    added = server.call(3, "tools/call", {"name": "add", "arguments": {"n": 4}})["result"]
    assert added["structuredContent"] == {"total": 4} and added["isError"] is False
    refused = server.call(4, "tools/call", {"name": "add", "arguments": {"n": "x"}})["result"]
    assert (
        refused["isError"] is True
        and "'x' is not of type 'integer'" in refused["content"][0]["text"]
    )
    assert server.call(5, "tools/call", {"name": "nope"})["error"]["code"] == -32602
    assert server.call(6, "server/discover")["error"]["code"] == -32601
    assert server.call(7, "ping")["result"] == {}
    assert server.ask(b"{not json")["error"]["code"] == -32700
    batch = server.ask(
        [{"jsonrpc": "2.0", "id": 8, "method": "ping"}, {"jsonrpc": "2.0", "method": "x"}]
    )
    assert batch == [{"jsonrpc": "2.0", "id": 8, "result": {}}]
    total = server.call(9, "tools/call", {"name": "get"})["result"]["structuredContent"]
    assert total == {"total": 4}  # the session kept its episode
    server.call(10, "initialize", INIT)  # a new session: a new episode
    fresh = server.call(11, "tools/call", {"name": "get"})["result"]["structuredContent"]
    assert fresh == {"total": 0}
    code, stderr = server.finish()
    assert code == 0 and b"serving mock on stdio" in stderr


def test_stdout_carries_only_the_protocol() -> None:
    server = StdioServer(*MOCK, "--log-level", "debug")
    server.call(1, "initialize", INIT)
    server.call(2, "tools/call", {"name": "add", "arguments": {"n": 1}})
    code, stderr = server.finish()
    assert code == 0 and stderr  # debug logs, all on stderr
    assert server.lines.empty()  # nothing but the two replies came out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--env", "nope"], "unknown env 'nope'"),
        (["--env", "mock", "--model", "none", "--task", "nope"], "has no task 'nope'"),
        (["--env", "mock", "--model", "/no/such/checkpoint"], "not a checkpoint directory"),
        (["--env", "mock", "--model", "none", "--page-size", "0"], "page_size must be"),
    ],
)
def test_usage_mistakes_exit_2(args: list[str], says: str) -> None:
    done = subprocess.run([*COMMAND, *args], capture_output=True, timeout=TIMEOUT, input=b"")
    assert done.returncode == 2 and done.stdout == b""
    assert says in done.stderr.decode()


def test_record_keeps_every_step(tmp_path: Path) -> None:
    dump = tmp_path / "served.jsonl"
    server = StdioServer(*MOCK, "--task", "count-0", "--seed", "5", "--record", str(dump))
    server.call(1, "initialize", INIT)
    for rid, n in ((2, 6), (3, 5)):
        server.call(rid, "tools/call", {"name": "add", "arguments": {"n": n}})
    assert server.finish()[0] == 0
    (episode,) = read_episodes(dump).episodes
    assert episode.task.id == "count-0" and episode.seed == 5
    assert [step.reward for step in episode.steps] == [0.0, 1.0]  # the total reached 11
