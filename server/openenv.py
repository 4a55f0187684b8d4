"""OpenEnv over HTTP and WebSocket (the wire of openenv-core 0.3.0), one router per env.

    app.include_router(openenv_router("bfcl"), prefix="/envs/bfcl")
    app.include_router(openenv_router("bfcl"))         # the first env, at the root as well

    # then, with openenv-core's own client:
    env = GenericEnvClient(base_url="http://127.0.0.1:8000/envs/bfcl").sync()
    with env:
        env.reset(seed=3)
        env.step({"type": "call_tool", "tool_name": "get", "arguments": {}})
        env.state()

Routes (shapes and per-kind actions and observations: openenv_wire.py):
    POST /reset     {seed?, episode_id?, task_id?, initial_state?, ...ignored} (body optional)
                    -> {"observation", "reward": null, "done": false}
    POST /step      {"action": {...}, "episode_id"?, "timeout_s"?, "request_id"?}, or the bare
                    action (0.1.x); ?episode_id= also works -> {"observation", "reward", "done"}
    GET  /state     ?episode_id= -> {"episode_id", "step_count", "task_id", "state", "done"}
    GET  /schema    -> {"action", "observation", "state"} (JSON Schemas)
    GET  /metadata  -> {"name", "description", "readme_content", "version", "author", ...}
    GET  /health    -> {"status": "healthy"}
    WS   /ws        OpenEnv's session protocol: one connection is one session
`/mcp` is the MCP adapter's (mcp.py).

HTTP sessions. OpenEnv 0.3's HTTP routes build a fresh env per request and 0.1's kept one
shared env; here a reset opens (or resets) the caller's session keyed by its `episode_id`,
within the caller's credential (hub.py's owner), and one default session per env and
owner (`<env>-default`) serves requests without an `episode_id`: a superset of both.
/step takes the id from the body, else the query; /state from the query. /state without
an id and before any reset answers an empty State, as OpenEnv's fresh env does; an id
that names no live session of this env is a 404.

WebSocket sessions. The first `reset` opens a session with a server-chosen id (an
`episode_id` in the reset's data is ignored: the id is the hub's); later resets restart
it; `close`, or the connection ending, closes it. `state` before a reset answers an empty
State. `list_tools` (tool envs) does not take a step: it answers the task's tools, or
before a reset every tool of the env's tasks. `{"type": "mcp"}` carries JSON-RPC, answered
by the MCP dispatcher (mcp.py: tools/list, tools/call, ping, openenv/session/*, ...) in
the socket's session, or statelessly before a reset, as `{"type": "mcp", "data":
<response>}`. Errors are `{"type": "error", "data": {"message", "code", ...}}`:
INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR (a malformed message, an action that breaks
/schema's action schema ("errors" lists pydantic's errors), an unknown task),
SESSION_ERROR (no reset yet, the session expired), CAPACITY_REACHED (the session limit),
EXECUTION_ERROR (the episode is over, or the step failed); the connection stays open.

HTTP errors. An action that breaks the action schema is a 422 `{"detail": [pydantic
errors]}` (loc starts with "body", "action"), as OpenEnv answers; the hub's errors
(HubError: unknown env, task or session 404, a finished episode 409, the session limit
429) propagate to the app's handler, which answers their status with `{"detail": ...}`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Query, WebSocket, WebSocketDisconnect
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketState

from simworld.server.deps import HubDep, OwnerDep
from simworld.server.hub import BadRequest, Hub, HubError, LimitReached, Live, NotFound
from simworld.server.mcp import Channel, McpDispatcher
from simworld.server.openenv_wire import (
    Health,
    Kind,
    ListToolsAction,
    Metadata,
    ResetRequest,
    Schemas,
    State,
    StepRequest,
    StepResponse,
    WireAction,
    WsBare,
    WsMcp,
    WsReset,
    WsStep,
    env_tools,
    list_tools_response,
    metadata_of,
    parse_action,
    reset_response,
    schemas,
    step_response,
    to_sim_action,
    wire_kind,
    wire_tools,
)

log = logging.getLogger(__name__)
EpisodeQuery = Annotated[
    str | None, Query(min_length=1, max_length=255, description="The session (HTTP)")
]


def default_key(env: str) -> str:
    """The key of a caller's default HTTP session of `env` (requests without episode_id)."""
    return f"{env}-default"


def openenv_router(env: str) -> APIRouter:
    """The OpenEnv routes of `env` (see the module docstring); mount it under any prefix."""
    router = APIRouter(tags=[f"OpenEnv: {env}"])

    # Plain `def`s: FastAPI runs them in its thread pool, as the native REST routes.
    @router.post("/reset", response_model=StepResponse)
    def reset(
        hub: HubDep, owner: OwnerDep, body: Annotated[ResetRequest | None, Body()] = None
    ) -> StepResponse:
        """Start an episode in the session `episode_id` (or the default one)."""
        request = body or ResetRequest()
        kind = wire_kind(hub.env(env))
        key = request.episode_id or default_key(env)
        _, first = hub.open(env, owner, key=key, **_reset_args(request))
        return reset_response(kind, first)

    @router.post("/step", response_model=StepResponse)
    def step(
        body: StepRequest, hub: HubDep, owner: OwnerDep, episode_id: EpisodeQuery = None
    ) -> StepResponse:
        """Take one action (OpenEnv's form, or the bare action) in the session."""
        kind = wire_kind(hub.env(env))
        try:
            action = parse_action(kind, body.action_data())
        except ValidationError as exc:
            where = ("body", "action") if body.action is not None else ("body",)
            raise HTTPException(422, detail=pydantic_errors(exc, where)) from exc
        given = body.episode_id or episode_id  # the body's wins
        key = given or default_key(env)
        _session(hub, owner, env, key, explicit=given is not None)
        return take_step(hub, owner, env, key, action)

    @router.get("/state", response_model=State)
    def state(hub: HubDep, owner: OwnerDep, episode_id: EpisodeQuery = None) -> State:
        """The session's state (an empty State before the default session's first reset)."""
        hub.env(env)
        key = episode_id or default_key(env)
        if episode_id is None and _find(hub, owner, key) is None:
            return State()
        _session(hub, owner, env, key, explicit=episode_id is not None)
        return State.model_validate(hub.state(key, owner))

    @router.get("/schema", response_model=Schemas)
    def schema(hub: HubDep) -> Schemas:
        """The JSON Schemas of this env's actions, observations and state."""
        return schemas(wire_kind(hub.env(env)))

    @router.get("/metadata", response_model=Metadata)
    def metadata(hub: HubDep) -> Metadata:
        return metadata_of(hub.env(env))

    @router.get("/health", response_model=Health)
    def health() -> Health:
        return Health()

    @router.websocket("/ws")
    async def websocket(socket: WebSocket, hub: HubDep, owner: OwnerDep) -> None:
        """One connection, one session (see the module docstring)."""
        await socket.accept()
        session = WsSession(hub, owner, env)
        try:
            while (text := await _receive(socket)) is not None:
                reply = await session.handle(text)
                if reply is None:
                    break
                await socket.send_text(json.dumps(reply))
        except WebSocketDisconnect:
            pass
        finally:
            await run_in_threadpool(session.close)
        await _close(socket)

    return router


# ---------------------------------------------------------------------- shared by both


def take_step(hub: Hub, owner: str, env: str, key: str, action: WireAction) -> StepResponse:
    """Answer `action` in the live session `key` (a list_tools takes no step)."""
    sim = hub.env(env)
    now = hub.state(key, owner)
    task = sim.tasks[str(now["task_id"])]
    if isinstance(action, ListToolsAction):
        return list_tools_response(wire_tools(task.tools), bool(now["done"]))
    step_count = now["step_count"]
    assert isinstance(step_count, int)
    result = hub.step(key, owner, to_sim_action(action, step_count))
    return step_response(wire_kind(sim), action, result, {t.name for t in task.tools})


def pydantic_errors(exc: ValidationError, where: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """pydantic's errors as JSON (no doc URLs), each `loc` prefixed with `where`."""
    errors: list[dict[str, Any]] = json.loads(exc.json(include_url=False))
    return [{**error, "loc": [*where, *error["loc"]]} for error in errors]


def _reset_args(request: ResetRequest) -> dict[str, Any]:
    return {
        "task_id": request.task_id,
        "seed": request.seed,
        "initial_state": request.initial_state,
    }


def _find(hub: Hub, owner: str, key: str) -> Live | None:
    try:
        return hub.get(key, owner)
    except NotFound:
        return None


def _session(hub: Hub, owner: str, env: str, key: str, *, explicit: bool) -> Live:
    """The caller's live session `key` of `env` (404 naming what to do when there is none)."""
    live = _find(hub, owner, key)
    if live is None and explicit:
        raise NotFound(f"no live episode {key!r} (unknown, closed or expired): reset it first")
    if live is None:
        raise NotFound(
            f"no live {env!r} episode for this caller: POST /reset first "
            "(or pass the episode_id a reset used)"
        )
    if live.env != env:
        raise NotFound(f"episode {key!r} is an episode of env {live.env!r}, not {env!r}")
    return live


# ---------------------------------------------------------------------- WebSocket


class WsSession:
    """One /ws connection's session: each text frame in, one reply out (None: close)."""

    def __init__(self, hub: Hub, owner: str, env: str) -> None:
        self.hub, self.owner, self.env = hub, owner, env
        self.id: str | None = None

    async def handle(self, text: str) -> dict[str, Any] | None:
        size, limit = len(text.encode()), self.hub.limits.max_request_bytes
        if size > limit:
            return _error(f"the message has {size} bytes, past the {limit}", "VALIDATION_ERROR")
        try:
            message = json.loads(text)
        except ValueError as exc:
            return _error(f"Invalid JSON: {exc}", "INVALID_JSON")
        kind = message.get("type") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(kind, str):
            return _error('a message is a JSON object with a string "type"', "VALIDATION_ERROR")
        if kind not in ("reset", "step", "state", "close", "mcp"):
            return _error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")
        try:
            return await self._dispatch(kind, message)
        except ValidationError as exc:
            self.hub.metrics.error("validation")
            errors = pydantic_errors(exc)
            return _error("Invalid message", "VALIDATION_ERROR", errors=errors)
        except HubError as exc:
            self.hub.metrics.error(exc.kind)
            return _error(exc.message, _code(exc, kind), status=exc.status)
        except Exception as exc:  # a bug or a model failure: reported, the socket stays
            log.exception("OpenEnv /ws %s failed", kind)
            return _error(f"{type(exc).__name__}: {exc}", "EXECUTION_ERROR")

    async def _dispatch(self, kind: str, message: dict[str, Any]) -> dict[str, Any] | None:
        if kind == "reset":
            request = ResetRequest.model_validate(WsReset.model_validate(message).data)
            result = await run_in_threadpool(self._reset, request)
            return {"type": "observation", "data": _dump(result)}
        if kind == "step":
            action = parse_action(self._kind(), WsStep.model_validate(message).data)
            result = await run_in_threadpool(self._step, action)
            return {"type": "observation", "data": _dump(result)}
        if kind == "mcp":
            rpc = WsMcp.model_validate(message).data
            return {"type": "mcp", "data": await run_in_threadpool(self._mcp, rpc)}
        bare = WsBare.model_validate(message)
        if bare.type == "close":
            return None
        return {"type": "state", "data": _dump(await run_in_threadpool(self._state))}

    def _kind(self) -> Kind:
        return wire_kind(self.hub.env(self.env))

    def _reset(self, request: ResetRequest) -> StepResponse:
        args = _reset_args(request)
        if self.id is not None:
            try:
                return reset_response(self._kind(), self.hub.reset(self.id, self.owner, **args))
            except NotFound:
                self.id = None  # expired: open a new session below
        live, first = self.hub.open(self.env, self.owner, **args)
        self.id = live.id
        return reset_response(self._kind(), first)

    def _step(self, action: WireAction) -> StepResponse:
        if self.id is None and isinstance(action, ListToolsAction):
            return list_tools_response(env_tools(self.hub.env(self.env)), False)
        if self.id is None:
            raise _NoReset('no episode yet: send {"type": "reset"} first')
        return take_step(self.hub, self.owner, self.env, self.id, action)

    def _state(self) -> State:
        if self.id is None:
            return State()
        return State.model_validate(self.hub.state(self.id, self.owner))

    def _mcp(self, request: dict[str, Any]) -> dict[str, Any]:
        """JSON-RPC over the socket, answered by the MCP dispatcher (mcp.py) in this
        socket's session (stateless before a reset); a session an `initialize` or
        `openenv/session/create` opens becomes the socket's. Every message gets a frame: a
        notification's is an empty result."""
        channel = Channel(self.owner, self.id, socket=True)
        reply = McpDispatcher(self.hub, self.env).handle_safely(request, channel)
        if channel.session != self.id:
            self.close()  # the session an initialize replaced
            self.id = channel.session
        return reply if reply is not None else {"jsonrpc": "2.0", "id": None, "result": {}}

    def close(self) -> None:
        """Close the session, if there is one (an expired one is already gone)."""
        if self.id is not None:
            with contextlib.suppress(NotFound):  # expired: already gone
                self.hub.close(self.id, self.owner)
            self.id = None


class _NoReset(HubError):
    status, kind = 409, "conflict"


def _code(exc: HubError, kind: str) -> str:
    """The OpenEnv error code of a hub error raised while handling a `kind` message."""
    if isinstance(exc, LimitReached):
        return "CAPACITY_REACHED"
    if isinstance(exc, BadRequest) or (isinstance(exc, NotFound) and kind == "reset"):
        return "VALIDATION_ERROR"
    if isinstance(exc, NotFound | _NoReset):
        return "SESSION_ERROR"
    return "EXECUTION_ERROR"


def _error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


async def _receive(socket: WebSocket) -> str | None:
    """The next text frame (a binary frame is read as UTF-8); None when the client left."""
    message = await socket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    if message.get("text") is not None:
        return str(message["text"])
    return bytes(message.get("bytes") or b"").decode("utf-8", errors="replace")


async def _close(socket: WebSocket) -> None:
    """Close our side, unless the client already left (closing then would raise)."""
    if WebSocketState.DISCONNECTED in (socket.client_state, socket.application_state):
        return
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # it left meanwhile
        await socket.close()


__all__ = ["WsSession", "default_key", "openenv_router", "pydantic_errors", "take_step"]
