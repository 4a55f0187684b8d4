"""A minimal MCP client of simworld's own: JSON-RPC over a stdio process (one JSON message
a line) or over streamable HTTP (POST, answered with JSON or an SSE stream), enough to
capture a server and to proxy one. simworld speaks JSON-RPC itself: it depends on neither
the `mcp` nor the `fastmcp` library (their pins clash with the trainers that use them).

    with McpClient(connect_stdio("python notes_server.py")) as client:
        init = client.initialize()                  # + notifications/initialized
        tools = client.list_tools()                 # every page; RawJson(value, raw text)
        result = client.call_tool("add_note", {"title": "milk"})
    McpClient(connect_http("http://127.0.0.1:8000/mcp", {"Authorization": "Bearer ..."}))

Transports move raw text: `send(body, request_id)` writes one JSON-RPC message as given and,
for a request, returns the reply as `RawJson` (the message, and its text exactly as it came:
the stdio line, the HTTP body or the SSE event's data), so a proxy can pass both directions
on unchanged and a capture can keep the tool list's bytes (`value_spans` finds each tool's
text inside the reply). While waiting for its reply, the stdio transport answers a server's
`ping` with `{}` and any other server request with -32601; notifications are dropped.

Errors: a JSON-RPC error reply raises `McpError` (code, message, data); a transport that
fails (a process that exits, an HTTP error status, no reply in `timeout` seconds, a body
that is not JSON-RPC) raises `TransportError` saying what was sent where, and for a stdio
server the end of its stderr.
"""

from __future__ import annotations

import collections
import contextlib
import json
import queue
import re
import shlex
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import httpx

from simworld.data.canonical import parse
from simworld.data.records import JSON, ToolResult

PROTOCOL_VERSION = "2025-11-25"  # the newest revision of the handshake era (protocols.md §2.1)
CLIENT_INFO = {"name": "simworld", "version": "0.1.0"}
TIMEOUT = 30.0
_STDERR_TAIL = 40  # stderr lines kept for error messages
JsonPath = tuple[str | int, ...]


class McpError(Exception):
    """A JSON-RPC error reply: `code`, `message` and `data` as the server sent them."""

    def __init__(self, method: str, error: Mapping[str, JSON]) -> None:
        self.code = error.get("code")
        self.message = str(error.get("message", ""))
        self.data = error.get("data")
        super().__init__(f"{method}: the server answered error {self.code}: {self.message}")


class TransportError(Exception):
    """The transport itself failed: no reply, a dead process, an HTTP error, not JSON-RPC."""


@dataclass(frozen=True)
class RawJson:
    """A JSON value and its text exactly as received."""

    value: JSON
    raw: str


class Transport(Protocol):
    """Moves raw JSON-RPC text to a server; `send` returns the reply to a request."""

    where: str  # the server, for error messages ("stdio `python s.py`", a URL)

    def send(
        self, body: str, request_id: JSON, headers: Mapping[str, str] | None = None
    ) -> RawJson | None: ...

    def close(self) -> None: ...


def message_text(message: Mapping[str, JSON]) -> str:
    """A JSON-RPC message as compact one-line JSON (what a client sends)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def error_reply(request_id: JSON, code: int, message: str) -> dict[str, JSON]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def _reply_to(message: JSON, request_id: JSON) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and message.get("id") == request_id
        and ("result" in message or "error" in message)
    )


# ---------------------------------------------------------------------------- stdio


class StdioTransport:
    """A server process spoken to over its stdin and stdout (see the module docstring)."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        if not command:
            raise ValueError("the stdio command is empty: give the server's command line")
        self.command = list(command)
        self.where = f"stdio `{shlex.join(self.command)}`"
        self.timeout = timeout
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self._lock = threading.Lock()
        try:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=None if env is None else dict(env),
                cwd=cwd,
            )
        except OSError as exc:
            raise TransportError(f"{self.where}: cannot start the server: {exc}") from exc
        assert self._process.stdout is not None and self._process.stderr is not None
        threading.Thread(target=self._pump, args=(self._process.stdout,), daemon=True).start()
        threading.Thread(target=self._drain, args=(self._process.stderr,), daemon=True).start()

    def send(
        self, body: str, request_id: JSON, headers: Mapping[str, str] | None = None
    ) -> RawJson | None:
        """Write `body` as one line; wait for the reply when `request_id` is not None."""
        line = body if "\n" not in body else message_text(json.loads(body))
        with self._lock:
            self._write(line)
            return None if request_id is None else self._wait(request_id)

    def close(self) -> None:
        """End the server: close its stdin, then terminate it if it lingers."""
        process = self._process
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(OSError):  # it already exited; its pipe is gone
                process.stdin.close()
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _write(self, line: str) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(line.encode("utf-8") + b"\n")
            stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise TransportError(self._dead(f"cannot write to the server ({exc})")) from exc

    def _wait(self, request_id: JSON) -> RawJson:
        while True:
            try:
                line = self._lines.get(timeout=self.timeout)
            except queue.Empty:
                raise TransportError(
                    f"{self.where}: no reply to request {request_id!r} within "
                    f"{self.timeout:g} s{self._stderr_note()}"
                ) from None
            if line is None:
                raise TransportError(
                    self._dead(f"it closed stdout before replying to {request_id!r}")
                )
            try:
                message = json.loads(line)
            except ValueError:
                self._stderr.append(f"(stdout, not JSON) {line[:200]}")
                continue
            if _reply_to(message, request_id):
                return RawJson(message, line)
            if isinstance(message, dict) and "method" in message and "id" in message:
                self._answer_server_request(message)

    def _answer_server_request(self, message: dict[str, JSON]) -> None:
        if message["method"] == "ping":
            reply: dict[str, JSON] = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        else:
            reply = error_reply(message["id"], -32601, f"method not found: {message['method']}")
        self._write(message_text(reply))

    def _pump(self, stream: Iterator[bytes]) -> None:
        for raw in stream:
            self._lines.put(raw.decode("utf-8", "replace").rstrip("\r\n"))
        self._lines.put(None)

    def _drain(self, stream: Iterator[bytes]) -> None:
        for raw in stream:
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())

    def _dead(self, what: str) -> str:
        try:
            code = self._process.wait(timeout=2)
            status = f"the server exited with code {code}"
        except subprocess.TimeoutExpired:
            status = "the server is still running"
        return f"{self.where}: {what}; {status}{self._stderr_note()}"

    def _stderr_note(self) -> str:
        tail = "\n".join(list(self._stderr)[-10:])
        return f"; its stderr ends:\n{tail}" if tail else "; its stderr is empty"


# ---------------------------------------------------------------------------- HTTP


class HttpTransport:
    """A streamable HTTP MCP endpoint (see the module docstring). `headers` go with every
    request (auth); the server's `Mcp-Session-Id` is echoed once it has sent one."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, *, timeout: float = TIMEOUT
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"the MCP URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.where = url
        self.session_id: str | None = None
        self.protocol_version: str | None = None  # sent once initialize has chosen one
        self._client = httpx.Client(headers=dict(headers or {}), timeout=timeout)

    def send(
        self, body: str, request_id: JSON, headers: Mapping[str, str] | None = None
    ) -> RawJson | None:
        sent = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        if self.session_id is not None:
            sent["mcp-session-id"] = self.session_id
        if self.protocol_version is not None:
            sent.setdefault("mcp-protocol-version", self.protocol_version)
        try:
            with self._client.stream("POST", self.url, content=body.encode(), headers=sent) as r:
                return self._read(r, request_id)
        except httpx.HTTPError as exc:
            raise TransportError(f"{self.url}: the request failed: {exc}") from exc

    def close(self) -> None:
        """End the session (DELETE, when the server gave one) and the connection pool."""
        try:
            if self.session_id is not None:
                self._client.delete(self.url, headers={"mcp-session-id": self.session_id})
        except httpx.HTTPError:
            pass  # the server is gone already: nothing left to end
        finally:
            self._client.close()

    def _read(self, response: httpx.Response, request_id: JSON) -> RawJson | None:
        session = response.headers.get("mcp-session-id")
        if session:
            self.session_id = session
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if request_id is None and response.status_code in (200, 202, 204):
            return None
        if kind == "text/event-stream" and response.status_code == 200:
            for data in _sse_data(response.iter_lines()):
                reply = _json_or_none(data)
                if _reply_to(reply, request_id):
                    return RawJson(reply, data)
            raise TransportError(
                f"{self.url}: the event stream ended without a reply to {request_id!r}"
            )
        text = response.read().decode("utf-8", "replace")
        reply = _json_or_none(text)
        if _reply_to(reply, request_id):  # also a JSON-RPC error sent with a 4xx status
            return RawJson(reply, text)
        raise TransportError(
            f"{self.url}: HTTP {response.status_code} ({kind or 'no content type'}) is not a "
            f"JSON-RPC reply to {request_id!r}: {text[:300]!r}"
        )


def _json_or_none(text: str) -> JSON:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (its `data:` lines joined by newlines)."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


# ---------------------------------------------------------------------------- the client


def connect_stdio(command: str | Sequence[str], *, timeout: float = TIMEOUT) -> StdioTransport:
    """A stdio transport to `command` (a shell-quoted string, or its argv)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return StdioTransport(argv, timeout=timeout)


def connect_http(
    url: str, headers: Mapping[str, str] | None = None, *, timeout: float = TIMEOUT
) -> HttpTransport:
    """A streamable HTTP transport to `url`, sending `headers` with every request."""
    return HttpTransport(url, headers, timeout=timeout)


class McpClient:
    """initialize, tools/list and tools/call over a transport (see the module docstring)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._next_id = 0

    def request(self, method: str, params: Mapping[str, JSON] | None = None) -> RawJson:
        """Send a request; its reply (McpError for an error reply)."""
        self._next_id += 1
        message: dict[str, JSON] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        reply = self.transport.send(message_text(message), self._next_id)
        if reply is None:  # only a buggy transport returns nothing for a request
            raise TransportError(f"{self.transport.where}: no reply to {method}")
        assert isinstance(reply.value, dict)
        if "error" in reply.value:
            error = reply.value["error"]
            raise McpError(method, error if isinstance(error, dict) else {"message": str(error)})
        return reply

    def notify(self, method: str, params: Mapping[str, JSON] | None = None) -> None:
        message: dict[str, JSON] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        self.transport.send(message_text(message), None)

    def initialize(self, protocol_version: str = PROTOCOL_VERSION) -> RawJson:
        """The handshake: initialize, then notifications/initialized; the initialize reply."""
        params = {
            "protocolVersion": protocol_version,
            "capabilities": {},
            "clientInfo": CLIENT_INFO,
        }
        reply = self.request("initialize", params)
        result = _result(reply, "initialize")
        version = result.get("protocolVersion")
        if isinstance(self.transport, HttpTransport) and isinstance(version, str):
            self.transport.protocol_version = version
        self.notify("notifications/initialized")
        return reply

    def list_tools(self, max_pages: int = 1000) -> list[RawJson]:
        """Every tool of tools/list, page after page (nextCursor), each with its text as sent."""
        tools: list[RawJson] = []
        cursor: JSON = None
        for _ in range(max_pages):
            reply = self.request("tools/list", None if cursor is None else {"cursor": cursor})
            result = _result(reply, "tools/list")
            if not isinstance(result.get("tools"), list):
                raise TransportError(f"{self.transport.where}: tools/list result has no tools list")
            tools += [
                RawJson(json.loads(raw), raw) for raw in array_items(reply.raw, ("result", "tools"))
            ]
            cursor = result.get("nextCursor")
            if not cursor:
                return tools
        raise TransportError(f"{self.transport.where}: tools/list went on past {max_pages} pages")

    def call_tool(self, name: str, arguments: Mapping[str, JSON]) -> dict[str, JSON]:
        """The CallToolResult of tools/call (a tool-level error is a result with isError)."""
        reply = self.request("tools/call", {"name": name, "arguments": dict(arguments)})
        return _result(reply, "tools/call")

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> McpClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _result(reply: RawJson, method: str) -> dict[str, JSON]:
    assert isinstance(reply.value, dict)
    result = reply.value.get("result")
    if not isinstance(result, dict):
        raise TransportError(f"{method}: the reply's result is not an object: {reply.raw[:200]!r}")
    return result


def tool_result(call_id: str, result: Mapping[str, JSON]) -> ToolResult:
    """A CallToolResult as simworld's ToolResult: the text of its text blocks (joined by
    newlines; the content array as JSON when it holds other blocks too), its
    structuredContent (else the text's JSON, when it is JSON) and isError."""
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    if all(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
        text = "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))
    else:
        text = message_text({"content": blocks})
    structured = result.get("structuredContent")
    if structured is None:
        structured = parse(text)[1] if parse(text)[0] else None
    return ToolResult(call_id, text, structured, bool(result.get("isError", False)))


# ---------------------------------------------------------------------------- raw JSON spans

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def value_spans(text: str) -> list[tuple[JsonPath, int, int]]:
    """Every value of the JSON `text` with its path and its [start, end) in `text`,
    children before their parent. `text` must be valid JSON (parse it first)."""
    spans: list[tuple[JsonPath, int, int]] = []

    def skip(pos: int) -> int:
        match = _SPACE.match(text, pos)
        assert match is not None
        return match.end()

    def walk(pos: int, path: JsonPath) -> int:
        start = pos = skip(pos)
        if text[pos] in "{[":
            close, index = ("}" if text[pos] == "{" else "]"), 0
            pos = skip(pos + 1)
            while text[pos] != close:
                key: str | int = index
                if close == "}":
                    key, pos = _DECODER.raw_decode(text, pos)
                    pos = skip(pos) + 1  # the colon
                pos = skip(walk(pos, (*path, key)))
                index += 1
                if text[pos] == ",":
                    pos = skip(pos + 1)
            end = pos + 1
        else:
            end = _DECODER.raw_decode(text, pos)[1]
        spans.append((path, start, end))
        return end

    walk(0, ())
    return spans


def array_items(text: str, path: JsonPath) -> list[str]:
    """The text of each item of the array at `path` in the JSON `text`, as it is there."""
    depth = len(path) + 1
    return [
        text[start:end]
        for where, start, end in sorted(value_spans(text), key=lambda span: span[1])
        if len(where) == depth and where[:-1] == path
    ]


__all__ = [
    "CLIENT_INFO",
    "PROTOCOL_VERSION",
    "HttpTransport",
    "McpClient",
    "McpError",
    "RawJson",
    "StdioTransport",
    "Transport",
    "TransportError",
    "array_items",
    "connect_http",
    "connect_stdio",
    "error_reply",
    "message_text",
    "tool_result",
    "value_spans",
]
