"""The proxy behind `simworld proxy` (the command: proxy_cli.py): an MCP endpoint in front of
a real MCP server (stdio or streamable HTTP) or a plain HTTP JSON tool API (an OpenAPI 3
document), forwarding every call and recording each tool call as a transition, secrets
redacted. What it records is what `simworld train sft --data` reads and what the captured
env answers exactly once served.

    proxy = Proxy(McpUpstream(command=("python", "notes_server.py")), env, Recorder(path))
    app = proxy_app(proxy)            # clients POST to /mcp (streamable HTTP, JSON replies)
    proxy.close()                     # ends every session (the recorder is the caller's)

Sessions: each client `initialize` opens a session of its own upstream (a new process for a
stdio server, a new MCP session for a URL, a new JSON-RPC server over the API) and gets an
`Mcp-Session-Id`; later requests carry it (unknown: 404; missing: 400), DELETE ends it, and
one idle for `idle_seconds` is ended. A session is one recorded episode (task: the env's
first task, state unknown), recorded from its first tools/call on.

Forwarding: a client's request goes to its upstream as sent (its text, and for a URL
upstream its headers but the transport's own), and the reply comes back as the upstream
wrote it (JSON; an SSE upstream's reply is sent back as its JSON message). What the upstream
sends on its own is not relayed: notifications, and requests to the client (a stdio
server's ping is answered by the transport). Before a session exists, `server/discover`
(what mcp 2.x clients probe first) is answered -32601 here, so they fall back to
initialize. An upstream that fails mid-session (a process that dies) ends the client's
session with a 502; the client starts a new one.

Recording: each tools/call answered with a result is a Step: the call (id `call_<i>_0`), the
result as a ToolResult (mcp_client.tool_result), no state, info {"source": "real"}; an
error reply (an unknown tool) is no transition and is not recorded. Episodes stream into
the dump through server/recording.py's Recorder (line-atomic appends; by default a new file
in the env's recordings/). Secrets (redaction.py): headers are never recorded; the fields of
arguments and results whose names match the redact patterns become "[REDACTED]", and so
does every occurrence of a secret header's value (a server echoing a token).

When `--env DIR` holds no captured env yet, the proxy captures one first: the MCP server
through one session of its own, or the tools the OpenAPI document describes.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from simworld.data.canonical import parse
from simworld.data.jsonio import dumps
from simworld.data.records import (
    JSON,
    Episode,
    Provenance,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.server.capture import capture
from simworld.server.mcp_client import (
    PROTOCOL_VERSION,
    RawJson,
    Transport,
    TransportError,
    connect_http,
    connect_stdio,
    error_reply,
    message_text,
    tool_result,
)
from simworld.server.openapi_tools import OpenApiServer, initialize_result
from simworld.server.recording import Recorder
from simworld.server.redaction import Redactor, header_secrets, is_secret_header
from simworld.simulators.envs.captured import (
    RECORDINGS,
    CapturedEnv,
    is_captured_env,
    load_captured_env,
    write_captured_env,
)

SESSION_HEADER = "mcp-session-id"
# Headers a transport sets itself: never forwarded from the client.
_OWN_HEADERS = {
    "host", "content-length", "content-type", "accept", "accept-encoding", "connection",
    "mcp-session-id", "transfer-encoding", "keep-alive", "upgrade", "te", "origin",
}  # fmt: skip
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


class UpstreamSession(Protocol):
    """One session with the real server: forwards a message, returns a request's reply."""

    def forward(
        self, body: str, request_id: JSON, headers: Mapping[str, str]
    ) -> RawJson | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class McpUpstream:
    """A real MCP server: a stdio command (a process per session) or a URL."""

    command: tuple[str, ...] = ()
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0

    def connect(self) -> Transport:
        if self.command:
            return connect_stdio(self.command, timeout=self.timeout)
        return connect_http(self.url, self.headers, timeout=self.timeout)

    def open(self) -> UpstreamSession:
        return _TransportSession(self.connect())

    def describe(self, redactor: Redactor) -> str:
        if self.command:
            return "stdio " + " ".join(redactor.argv(self.command))
        return redactor.url(self.url)


class _TransportSession:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def forward(self, body: str, request_id: JSON, headers: Mapping[str, str]) -> RawJson | None:
        return self.transport.send(body, request_id, headers)

    def close(self) -> None:
        self.transport.close()


@dataclass(frozen=True)
class OpenApiUpstream:
    """A plain HTTP JSON tool API at `base_url`, described by `spec`."""

    spec: Mapping[str, JSON]
    base_url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0

    def open(self) -> UpstreamSession:
        server = OpenApiServer(self.spec, self.base_url, self.headers, timeout=self.timeout)
        return _OpenApiSession(server)

    def describe(self, redactor: Redactor) -> str:
        return "openapi " + redactor.url(self.base_url)


class _OpenApiSession:
    def __init__(self, server: OpenApiServer) -> None:
        self.server = server

    def forward(self, body: str, request_id: JSON, headers: Mapping[str, str]) -> RawJson | None:
        ok, message = parse(body)
        # The API gets the client's credentials, not its MCP headers.
        auth = {k: v for k, v in headers.items() if is_secret_header(k)}
        reply = self.server.handle(message, auth) if ok and isinstance(message, dict) else None
        return None if reply is None else RawJson(reply, message_text(reply))

    def close(self) -> None:
        self.server.close()


Upstream = McpUpstream | OpenApiUpstream


@dataclass
class _Session:
    """A client's session: its upstream, what it records, its secrets."""

    id: str
    upstream: UpstreamSession
    secrets: list[str]
    last_used: float
    record_id: str | None = None
    steps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ProxyError(Exception):
    """A request the proxy refuses: `status` is the HTTP status, the message says why."""

    def __init__(self, status: int, message: str, code: int = -32600) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Proxy:
    """Sessions, forwarding and recording (see the module docstring). Thread-safe."""

    def __init__(
        self,
        upstream: Upstream,
        env: CapturedEnv,
        recorder: Recorder | None,
        redactor: Redactor | None = None,
        *,
        max_sessions: int = 64,
        idle_seconds: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.upstream = upstream
        self.env = env
        self.recorder = recorder
        self.redactor = redactor or Redactor()
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self.recorded_steps = 0
        self._clock = clock
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def initialize(
        self, body: str, request_id: JSON, headers: Mapping[str, str]
    ) -> tuple[str, RawJson]:
        """Open a session of the upstream and forward the client's initialize to it."""
        with self._lock:
            self._sweep()
            if len(self._sessions) >= self.max_sessions:
                raise ProxyError(429, f"{self.max_sessions} sessions are open: end one (DELETE)")
        try:
            upstream = self.upstream.open()
        except TransportError as exc:
            raise ProxyError(502, f"the upstream could not be started: {exc}", -32603) from exc
        session = _Session(
            secrets.token_urlsafe(24), upstream, header_secrets(headers), self._clock()
        )
        try:
            reply = upstream.forward(body, request_id, forwarded(headers))
        except TransportError as exc:
            upstream.close()
            raise ProxyError(502, f"the upstream failed: {exc}", -32603) from exc
        if reply is None:
            upstream.close()
            raise ProxyError(502, "the upstream sent no reply to initialize", -32603)
        with self._lock:
            self._sessions[session.id] = session
        return session.id, reply

    def forward(
        self, session_id: str, body: str, message: Mapping[str, JSON], headers: Mapping[str, str]
    ) -> RawJson | None:
        """Forward a message of session `session_id`; record it when it is a tools/call."""
        session = self._session(session_id)
        request_id = message.get("id") if "method" in message else None
        failure: TransportError | None = None
        with session.lock:
            session.secrets += [s for s in header_secrets(headers) if s not in session.secrets]
            try:
                reply = session.upstream.forward(body, request_id, forwarded(headers))
            except TransportError as exc:
                failure, reply = exc, None
            if reply is not None and message.get("method") == "tools/call":
                self._record(session, message.get("params"), reply)
        if failure is not None:  # the upstream session is gone: so is the client's
            self.close_session(session_id)
            raise ProxyError(502, f"the upstream failed: {failure}", -32603) from failure
        return reply

    def close_session(self, session_id: str) -> None:
        """End a session: its upstream, its record."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise ProxyError(404, f"no session {session_id[:8]}... (unknown, ended or expired)")
        self._end(session)

    def close(self) -> None:
        """End every session (the recorder is the caller's to close)."""
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            self._end(session)

    def _session(self, session_id: str) -> _Session:
        with self._lock:
            self._sweep()
            session = self._sessions.get(session_id)
            if session is None:
                raise ProxyError(
                    404, "no such session (unknown, ended or expired): initialize again"
                )
            session.last_used = self._clock()
            return session

    def _sweep(self) -> None:
        deadline = self._clock() - self.idle_seconds
        for key in [k for k, s in self._sessions.items() if s.last_used < deadline]:
            threading.Thread(target=self._end, args=(self._sessions.pop(key),), daemon=True).start()

    def _end(self, session: _Session) -> None:
        with session.lock:
            session.upstream.close()
            if self.recorder is not None and session.record_id is not None:
                self.recorder.end(session.record_id)

    def _record(self, session: _Session, params: JSON, reply: RawJson) -> None:
        result = reply.value.get("result") if isinstance(reply.value, dict) else None
        if self.recorder is None or not isinstance(result, dict) or not isinstance(params, dict):
            return
        redactor = self.redactor.with_secrets(session.secrets)
        arguments = params.get("arguments")
        arguments = redactor.value(arguments if isinstance(arguments, dict) else {})
        assert isinstance(arguments, dict)
        call = ToolCall(
            f"call_{session.steps}_0", str(params.get("name")), arguments, dumps(arguments)
        )
        got = tool_result(call.id, result)
        observed = ToolResult(
            call.id, redactor.text(got.text), redactor.value(got.structured), got.is_error
        )
        step = Step(
            action=ToolCallsAction([call]),
            observation=ToolResultsObservation([observed]),
            info={"source": "real"},
        )
        if session.record_id is None:
            session.record_id = self.recorder.begin(self._episode(session.id))
        self.recorder.step(session.record_id, session.steps, step)
        session.steps += 1
        with self._lock:
            self.recorded_steps += 1

    def _episode(self, session_id: str) -> Episode:
        task = self.env.task_for()
        info = self.env.initialize.get("serverInfo")
        version = ""
        if isinstance(info, dict):
            version = f"{info.get('name', '')} {info.get('version', '')}".strip()
        return Episode(
            episode_id=session_id,
            env=self.env.name,
            task=Task(task.id, task.instruction, list(task.apis)),
            steps=[],
            tools=list(task.tools),
            rules=list(self.env.rules),
            initial_state=task.initial_state,
            provenance=Provenance(
                source="mcp-proxy",
                version=version,
                origin=self.upstream.describe(self.redactor),
                policy="client",
            ),
            volatile=list(self.env.volatile),
        )


def forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers that go on to a URL upstream (the transport sets the others)."""
    return {k: v for k, v in headers.items() if k.lower() not in _OWN_HEADERS}


# ---------------------------------------------------------------------------- the HTTP side


def proxy_app(proxy: Proxy) -> Starlette:
    """The proxy's ASGI app: streamable HTTP MCP at /mcp (POST, DELETE; GET is 405)."""

    async def mcp(request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin and (urlsplit(origin).hostname or "") not in _LOCAL_HOSTS:
            return _refuse(
                ProxyError(403, f"origin {origin!r} is not allowed (local clients only)")
            )
        if request.method == "GET":
            return Response(status_code=405, headers={"allow": "POST, DELETE"})
        session_id = request.headers.get(SESSION_HEADER)
        try:
            if request.method == "DELETE":
                if not session_id:
                    raise ProxyError(400, "DELETE needs the Mcp-Session-Id header")
                await run_in_threadpool(proxy.close_session, session_id)
                return Response(status_code=200)
            body = (await request.body()).decode("utf-8", "replace")
            return await _post(proxy, body, session_id, dict(request.headers))
        except ProxyError as exc:
            return _refuse(exc)

    return Starlette(routes=[Route("/mcp", mcp, methods=["GET", "POST", "DELETE"])])


async def _post(
    proxy: Proxy, body: str, session_id: str | None, headers: dict[str, str]
) -> Response:
    ok, message = parse(body)
    if not ok:
        raise ProxyError(400, "the body is not JSON", -32700)
    if not isinstance(message, dict):
        raise ProxyError(400, "expected one JSON-RPC message (batches are not supported)")
    request_id = message.get("id")
    if message.get("method") == "initialize":
        new_id, opened = await run_in_threadpool(proxy.initialize, body, request_id, headers)
        return _json(opened.raw, {"mcp-session-id": new_id})
    if not session_id:
        if message.get("method") == "server/discover":
            return JSONResponse(
                error_reply(request_id, -32601, "Method not found: server/discover")
            )
        raise ProxyError(400, "missing the Mcp-Session-Id header: initialize first")
    reply: RawJson | None = await run_in_threadpool(
        proxy.forward, session_id, body, message, headers
    )
    if reply is None:
        return Response(status_code=202)
    return _json(reply.raw)


def _json(raw: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(raw.encode("utf-8"), media_type="application/json", headers=dict(headers or {}))


def _refuse(exc: ProxyError) -> Response:
    return JSONResponse(error_reply(None, exc.code, exc.message), status_code=exc.status)


# ---------------------------------------------------------------------------- setting up


def ensure_env(directory: Path, upstream: Upstream, redactor: Redactor) -> CapturedEnv:
    """The captured env in `directory`, captured from the upstream first when there is none."""
    if not is_captured_env(directory):
        if isinstance(upstream, McpUpstream):
            source: dict[str, JSON] = {
                "transport": "stdio",
                "command": redactor.argv(upstream.command),
            }
            if not upstream.command:
                source = {"transport": "streamable-http", "url": redactor.url(upstream.url)}
            capture(upstream.connect(), directory, source=source)
        else:
            init = initialize_result(upstream.spec, PROTOCOL_VERSION)
            tools = [
                message_text(op.tool)
                for op in OpenApiServer(upstream.spec, upstream.base_url).operations.values()
            ]
            source = {"transport": "openapi", "base_url": redactor.url(upstream.base_url)}
            name = directory.resolve().name
            write_captured_env(directory, name=name, initialize=init, tools=tools, source=source)
    return load_captured_env(directory)


def default_record_path(directory: Path) -> Path:
    """A new dump in the env's recordings/ folder, named by the time and the process."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return directory / RECORDINGS / f"proxy-{stamp}-{os.getpid()}.jsonl"


__all__ = [
    "McpUpstream",
    "OpenApiUpstream",
    "Proxy",
    "ProxyError",
    "Upstream",
    "default_record_path",
    "ensure_env",
    "forwarded",
    "proxy_app",
]
