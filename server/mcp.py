"""MCP over streamable HTTP, plus OpenEnv's JSON-RPC session extensions, on one `/mcp`
endpoint per env; the JSON-RPC dispatcher behind it also serves the stdio command
(mcp_stdio.py) and OpenEnv's `{"type": "mcp"}` WebSocket messages (openenv.py).

    app.include_router(mcp_router("bfcl"), prefix="/envs/bfcl")   # and the first env at /

    # then, with the mcp SDK's client (1.x or 2.x) or fastmcp.Client:
    async with Client("http://127.0.0.1:8000/envs/bfcl/mcp") as client:
        await client.list_tools(); await client.call_tool("ls", {})

Routes (MCP streamable HTTP, JSON responses only; shapes and tool rendering: mcp_wire.py):
    POST   /mcp   one JSON-RPC message (or, for protocol 2025-03-26 and 2024-11-05, a batch)
                  -> 200 application/json with the response(s); 202 and no body when the
                  body held only notifications or responses
    DELETE /mcp   Mcp-Session-Id: ends that session's episode -> 200 {"session_id", "closed"}
    GET    /mcp   405: no server-to-client stream (the spec allows it; the SDK clients then
                  go on without one)

Methods: `initialize` (version negotiation, see mcp_wire), `notifications/initialized`
(and any other notification: no reply), `ping` -> {}, `tools/list` ({cursor?}: pages of
`page_size` tools, all of them in one page by default, as most servers answer),
`tools/call` ({name, arguments}), OpenEnv's `openenv/session/create` ({task_id?, seed?,
initial_state?} -> {"session_id", "task_id"}) and `openenv/session/close` ({session_id}
-> {"session_id", "closed": true}). `server/discover` (MCP's 2026 stateless handshake,
which mcp 2.x clients probe first) and anything else is -32601 Method not found, so the
client falls back to `initialize`. A text env serves no tools: its initialize declares no
tools capability and tools/* are -32601.

Sessions. A session is a hub episode (hub.py): its id is the hub's server-chosen,
unguessable episode id, scoped to the caller's API token like every session. `initialize`
starts an episode (the env's default task, or the task and seed given to the dispatcher:
the stdio command's flags) and answers its id in the `Mcp-Session-Id` header; `DELETE`
ends it; `openenv/session/create` starts one and answers its id as `session_id`, which
OpenEnv's client then sends in every request's params. A request names its session by
`params.session_id` (OpenEnv's way, it wins) or by the `Mcp-Session-Id` header; with
neither it is stateless, as OpenEnv's HTTP /mcp is: tools/list shows the default task's
tools and tools/call answers from that task's initial state without keeping anything.
An unknown, closed, expired or foreign `Mcp-Session-Id` is HTTP 404 (the client then
starts a new session); an unknown `session_id` param is -32602.

MCP has no reset and no reward, and none is added to the tool list. The episode behind
a session is the hub episode of that id, so the other protocols reach it:
    GET    /v1/episodes/{id}              state, task, steps with their rewards, done
    POST   /envs/{env}/reset              {"episode_id": id, "seed"?, "task_id"?}: a reset
    POST   /v1/episodes/{id}/step         a step outside MCP (OpenAI tool calls)
    DELETE /v1/episodes/{id}              ends it (as DELETE /mcp does)

tools/call: an unknown tool is -32602; arguments that break the tool's `inputSchema` take
a step whose result is the env's own validation error (`isError: true`, state untouched,
as the real API answers); otherwise the step is routed (rules, cache, model, real
backend) and its result rendered by mcp_wire.call_result. The hub's refusals carry
`data: {"kind", "status"}` (its error kind, and the HTTP status the REST API gives it): an
unknown task or a state the env cannot take is -32602; a finished episode, the session
limit, or a server without the model a step needs is -32000.

HTTP checks, in order, each answered with a JSON-RPC error body: an `Origin` header that
is neither this host nor a loopback one 403 (DNS rebinding); an `Accept` without JSON
406; a non-JSON `Content-Type` 415; a body that is not JSON 400 (-32700); an unsupported
`MCP-Protocol-Version` 400 (not checked on initialize and server/discover); a batch under
a version without batches, or an empty one, 400 (-32600). The body limit (413) and the
API token (401) are the app's. A bug (no client mistake) is the app's 500.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response

from simworld.data.records import JSON, ToolCall, ToolCallsAction, ToolResultsObservation
from simworld.server.deps import hub_of, owner_of
from simworld.server.hub import BadRequest, Hub, HubError, Live, NotFound
from simworld.server.mcp_wire import (
    BATCH_VERSIONS,
    DEFAULT_VERSION,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    SESSION_HEADER,
    SUPPORTED_VERSIONS,
    VERSION_HEADER,
    CallParams,
    CloseParams,
    CreateParams,
    InitializeParams,
    ListParams,
    RpcError,
    RpcRequest,
    call_result,
    dumps,
    error_result,
    failure,
    initialize_result,
    mcp_tool,
    negotiate,
    page,
    params_of,
    parse_message,
    request_id,
    success,
)
from simworld.simulators.env import SimTask
from simworld.simulators.envs.captured import CapturedEnv

log = logging.getLogger(__name__)
JSON_TYPE = "application/json"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
_UNVERSIONED = frozenset({"initialize", "server/discover"})


@dataclass
class Channel:
    """What a message arrives on: the caller (`owner`), the connection's own session (the
    Mcp-Session-Id header, the stdio process's or the /ws socket's; None: none yet), and
    whether the transport is one long connection (`socket`: /ws), which
    openenv/session/create then reuses, as OpenEnv does."""

    owner: str
    session: str | None = None
    socket: bool = False


class McpDispatcher:
    """JSON-RPC for one env of `hub` (see the module docstring); transport-agnostic and
    blocking (steps run the model): call it from a worker thread."""

    def __init__(
        self,
        hub: Hub,
        env: str,
        *,
        page_size: int | None = None,
        task_id: str | None = None,
        seed: int | None = None,
    ) -> None:
        if page_size is not None and page_size < 1:
            raise ValueError(f"page_size must be at least 1 (None: one page), got {page_size}")
        self.hub, self.env, self.page_size = hub, env, page_size
        self.task_id, self.seed = task_id, seed
        self.sim = hub.env(env)
        self.tools = self.sim.action_kind == "tool_calls"
        self._methods: dict[str, Callable[[RpcRequest, Channel], JSON]] = {
            "initialize": self._initialize,
            "ping": lambda request, channel: {},
            "tools/list": self._list,
            "tools/call": self._call,
            "openenv/session/create": self._create,
            "openenv/session/close": self._close,
        }

    def handle(self, message: Any, channel: Channel) -> dict[str, JSON] | None:
        """The response to one message (None for a notification or a client's response).
        Client mistakes and hub errors become JSON-RPC errors; a bug raises."""
        try:
            request = parse_message(message)
        except RpcError as exc:
            return failure(request_id(message), exc.code, exc.message, exc.data)
        if request is None:
            return None
        try:
            result = self._dispatch(request, channel)
        except RpcError as exc:
            reply = failure(request.id, exc.code, exc.message, exc.data)
        except HubError as exc:
            self.hub.metrics.error(exc.kind)
            reply = _hub_failure(request.id, exc)
        else:
            reply = success(request.id, result)
        return None if request.notification else reply

    def handle_safely(self, message: Any, channel: Channel) -> dict[str, JSON] | None:
        """`handle`, with a bug answered as -32603 naming an id the log repeats (for
        transports without the app's error handling: stdio and /ws)."""
        try:
            return self.handle(message, channel)
        except Exception as exc:
            incident = secrets.token_hex(6)
            log.error("internal error %s answering MCP %s", incident, self.env, exc_info=exc)
            text = f"internal error {incident}: the server log has the details under this id"
            return failure(request_id(message), INTERNAL_ERROR, text)

    def _dispatch(self, request: RpcRequest, channel: Channel) -> JSON:
        if request.notification:
            # initialized, cancelled, progress...: nothing to do. A request method sent
            # without an id would run unanswered (an initialize opening a session no one
            # learns of): it is not run either.
            return None
        method = self._methods.get(request.method)
        if method is None or (request.method.startswith("tools/") and not self.tools):
            raise RpcError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        return method(request, channel)

    # ------------------------------------------------------------------ methods

    def _initialize(self, request: RpcRequest, channel: Channel) -> JSON:
        params = params_of(InitializeParams, request)
        live, _ = self.hub.open(self.env, channel.owner, task_id=self.task_id, seed=self.seed)
        channel.session = live.id
        sim = self.hub.env(self.env)
        captured = sim.initialize if isinstance(sim, CapturedEnv) else None
        version = negotiate(params.protocol_version)
        return initialize_result(self.env, version, self.tools, captured)

    def _list(self, request: RpcRequest, channel: Channel) -> JSON:
        params = params_of(ListParams, request)
        task = self._task(self._session(params.session_id, channel))
        return page([mcp_tool(tool) for tool in task.tools], params.cursor, self.page_size)

    def _call(self, request: RpcRequest, channel: Channel) -> JSON:
        params = params_of(CallParams, request)
        session = self._session(params.session_id, channel)
        tools = {tool.name: tool for tool in self._task(session).tools}
        if params.name not in tools:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        arguments = params.arguments or {}
        if session is None:
            _, result, _ = self.hub.simulate(
                self.env, _action(0, params.name, arguments), task_id=self.task_id, seed=self.seed
            )
        else:
            step = self.hub.state(session.id, channel.owner)["step_count"]
            assert isinstance(step, int)
            action = _action(step, params.name, arguments)
            result = self.hub.step(session.id, channel.owner, action)
        observation = result.observation
        if not isinstance(observation, ToolResultsObservation) or not observation.results:
            return error_result("the simulated tool gave no result")
        return call_result(mcp_tool(tools[params.name]), observation.results[0])

    def _create(self, request: RpcRequest, channel: Channel) -> JSON:
        params = params_of(CreateParams, request)
        if channel.socket and channel.session is not None:
            live = self.hub.get(channel.session, channel.owner)
            return {"session_id": live.id, "task_id": self._task(live).id}
        live, first = self.hub.open(
            self.env,
            channel.owner,
            task_id=params.task_id,
            seed=params.seed,
            initial_state=params.initial_state,
        )
        if channel.socket:
            channel.session = live.id
        return {"session_id": live.id, "task_id": first.task.id}

    def _close(self, request: RpcRequest, channel: Channel) -> JSON:
        params = params_of(CloseParams, request)
        if channel.socket and params.session_id == channel.session:
            raise RpcError(INVALID_REQUEST, "this connection's own session ends with it")
        self._live(params.session_id, channel.owner)  # this env's, or -32602
        self.hub.close(params.session_id, channel.owner)
        return {"session_id": params.session_id, "closed": True}

    # ------------------------------------------------------------------ sessions

    def _session(self, given: str | None, channel: Channel) -> Live | None:
        """The session a request names: its `session_id` param, else the channel's."""
        if given is not None:
            return self._live(given, channel.owner)
        if channel.session is None:
            return None
        live = self.find(channel.session, channel.owner)
        if live is None:
            raise RpcError(SERVER_ERROR, "the session has ended (closed or expired): reconnect")
        return live

    def _live(self, session_id: str, owner: str) -> Live:
        live = self.find(session_id, owner)
        if live is None:
            raise RpcError(INVALID_PARAMS, f"Unknown session_id: {session_id[:80]}")
        return live

    def find(self, session_id: str, owner: str) -> Live | None:
        """The caller's live session `session_id` of this env, or None."""
        try:
            live = self.hub.get(session_id, owner)
        except NotFound:
            return None
        return live if live.env == self.env else None

    def _task(self, live: Live | None) -> SimTask:
        """The task a session plays (without one: the task stateless calls use)."""
        if live is None:
            return self.sim.task_for(self.task_id, self.seed)
        task_id = self.hub.state(live.id, live.owner)["task_id"]
        return self.sim.tasks[str(task_id)]


def _action(step: int, name: str, arguments: dict[str, Any]) -> ToolCallsAction:
    """One call, with the call id recorded data uses (`call_<step>_0`)."""
    raw = json.dumps(arguments, ensure_ascii=False)
    return ToolCallsAction([ToolCall(f"call_{step}_0", name, arguments, raw)])


def _hub_failure(rid: Any, exc: HubError) -> dict[str, JSON]:
    code = INVALID_PARAMS if isinstance(exc, NotFound | BadRequest) else SERVER_ERROR
    return failure(rid, code, exc.message, {"kind": exc.kind, "status": exc.status})


# ---------------------------------------------------------------------------- HTTP


@dataclass(frozen=True)
class HttpReply:
    status: int
    body: Any = None  # JSON to send; None: no body
    session: str | None = None  # the Mcp-Session-Id header to send
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> Response:
        headers = dict(self.headers)
        if self.session is not None:
            headers["Mcp-Session-Id"] = self.session
        if self.body is None:
            return Response(status_code=self.status, headers=headers)
        return Response(dumps(self.body), self.status, headers, media_type=JSON_TYPE)


def mcp_router(env: str, *, page_size: int | None = None) -> APIRouter:
    """The `/mcp` routes of `env` (see the module docstring); mount under any prefix."""
    router = APIRouter(tags=[f"MCP: {env}"])

    @router.post("/mcp")
    async def post(request: Request) -> Response:
        """One JSON-RPC message or batch (MCP streamable HTTP, JSON responses)."""
        refused = _check_headers(request.headers)
        if refused is not None:
            return refused.response()
        body = await request.body()
        dispatcher = McpDispatcher(hub_of(request), env, page_size=page_size)
        reply = await run_in_threadpool(
            answer_post, dispatcher, owner_of(request), request.headers, body
        )
        return reply.response()

    @router.delete("/mcp")
    def delete(request: Request) -> Response:
        """End the session named by Mcp-Session-Id, and its episode."""
        session = request.headers.get(SESSION_HEADER)
        if not session:
            return _transport_error(400, "Bad Request: DELETE needs an Mcp-Session-Id header")
        dispatcher = McpDispatcher(hub_of(request), env)
        owner = owner_of(request)
        if dispatcher.find(session, owner) is None:
            return _transport_error(404, "Not Found: unknown, closed or expired session")
        with contextlib.suppress(NotFound):  # closed by a request racing this one
            dispatcher.hub.close(session, owner)
        return JSONResponse({"session_id": session, "closed": True})

    return router


def answer_post(dispatcher: McpDispatcher, owner: str, headers: Headers, body: bytes) -> HttpReply:
    """The reply to a POSTed body (the checks that need the body, then each message)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return _error_reply(400, PARSE_ERROR, f"Parse error: the body is not JSON ({exc})")
    messages = payload if isinstance(payload, list) else [payload]
    version = headers.get(VERSION_HEADER)
    refused = _check_messages(payload, messages, version)
    if refused is not None:
        return refused
    given = headers.get(SESSION_HEADER) or None
    channel = Channel(owner, given)
    opening = any(_method(m) == "initialize" for m in messages)
    if given is not None and not opening and dispatcher.find(given, owner) is None:
        return _error_reply(404, INVALID_REQUEST, "Not Found: unknown, closed or expired session")
    replies = [dispatcher.handle(message, channel) for message in messages]
    answered = [reply for reply in replies if reply is not None]
    session = channel.session if channel.session != given else None  # a new one
    if not answered:
        return HttpReply(202, session=session)
    return HttpReply(200, answered if isinstance(payload, list) else answered[0], session)


def _check_messages(payload: Any, messages: list[Any], version: str | None) -> HttpReply | None:
    """A refusal of the body as a whole (bad batch, unsupported version), or None."""
    if isinstance(payload, list):
        effective = version or DEFAULT_VERSION
        if effective not in BATCH_VERSIONS:
            text = f"Invalid Request: protocol version {effective} has no JSON-RPC batches"
            return _error_reply(400, INVALID_REQUEST, text)
        if not messages:
            return _error_reply(400, INVALID_REQUEST, "Invalid Request: an empty batch")
        if any(_method(m) == "initialize" for m in messages):
            text = "Invalid Request: initialize must not be part of a JSON-RPC batch"
            return _error_reply(400, INVALID_REQUEST, text)
    unversioned = all(_method(m) in _UNVERSIONED for m in messages)
    if version is not None and version not in SUPPORTED_VERSIONS and not unversioned:
        supported = ", ".join(SUPPORTED_VERSIONS)
        text = f"Bad Request: unsupported protocol version {version[:40]!r} ({supported})"
        return _error_reply(400, INVALID_REQUEST, text)
    return None


def _method(message: Any) -> Any:
    return message.get("method") if isinstance(message, dict) else None


def _check_headers(headers: Headers) -> HttpReply | None:
    """A refusal for the request's Origin, Accept or Content-Type, or None."""
    origin = headers.get("origin")
    if origin is not None and not _origin_allowed(origin, headers.get("host", "")):
        return _error_reply(403, INVALID_REQUEST, f"Forbidden: origin {origin[:100]!r} not allowed")
    accept = headers.get("accept", "*/*").lower()
    if not any(kind in accept for kind in (JSON_TYPE, "application/*", "*/*")):
        return _error_reply(406, INVALID_REQUEST, "Not Acceptable: accept application/json")
    content_type = headers.get("content-type")
    if content_type is not None and content_type.split(";")[0].strip().lower() != JSON_TYPE:
        text = "Unsupported Media Type: send the message as application/json"
        return _error_reply(415, INVALID_REQUEST, text)
    return None


def _origin_allowed(origin: str, host: str) -> bool:
    """A browser page may call only from this server's own origin or a loopback one."""
    try:
        parts = urlsplit(origin)
        name = parts.hostname
    except ValueError:
        return False
    return name in _LOOPBACK or (bool(parts.netloc) and parts.netloc == host)


def _error_reply(status: int, code: int, message: str) -> HttpReply:
    return HttpReply(status, failure(None, code, message))


def _transport_error(status: int, message: str) -> Response:
    return _error_reply(status, INVALID_REQUEST, message).response()


__all__ = ["Channel", "HttpReply", "McpDispatcher", "answer_post", "mcp_router"]
