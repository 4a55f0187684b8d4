"""The FastAPI app: native REST, OpenEnv per env, `/metrics`, and the error contract.

    app = create_app(Settings(model="default", envs=("bfcl",)))   # loads in its lifespan
    app = create_app(hub=hub)                                        # tests: a ready hub
    uvicorn.run(app, host="127.0.0.1", port=8000)                    # or `simworld serve`

Routes: `/v1/...` (rest.py; `/v1/chat/completions`, the world model itself, chat.py);
OpenEnv's `/reset /step /state /schema /metadata /health /ws` under `/envs/<env>/` for every
env and at the root for the first (openenv.py); MCP's streamable HTTP `/mcp` beside them,
per env and at the root (mcp.py); `GET /metrics` (Prometheus text, metrics.py); `GET
/health` (OpenEnv's, `{"status": "healthy"}`; open
without a token); StableToolBench's `POST /virtual` (virtual.py); Search-R1's `POST /retrieve`
for a served search env (retrieve.py).

The lifespan raises anyio's worker-thread limit to `settings.worker_threads` (settings.py
says why) and, without a ready hub, sets torch's intra-op threads (`settings.torch_threads`,
or `serving_threads()`; restored on shutdown), loads the world model (`settings.model`;
None: no model), wraps it in a BatchingModel, loads the envs, opens the recorder when
`settings.record` is set, builds the Hub with its Metrics, and on shutdown closes the
sessions, the batching worker and the recorder, in that order, and restores torch's threads.
A hub passed in is the caller's to close.

Errors are JSON `{"detail": ..., "error": {"kind", "message"}}` (`detail` as FastAPI
clients expect it), each counted in `metrics.error(kind)`:
- a HubError: its own status and kind (404 not_found, 409 conflict, 422 validation, 429
  limit, 503 unavailable);
- a request that fails validation: 422, kind "validation", the message naming each field
  path (`body.tool_calls[0].function.arguments: Input should be a valid string`), and
  `detail` the list of {"loc", "msg", "type"};
- a body past `Limits.max_request_bytes`: 413, kind "too_large", refused from its
  Content-Length before it is read, or while it streams in, never buffered past the limit;
- an unknown route 404 (not_found), a wrong method 405 (method_not_allowed), a missing or
  wrong token 401 (unauthorized, auth.py);
- anything else is a bug: 500, kind "internal", with an id that the server log repeats
  beside the traceback. No client mistake reaches it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from simworld.server.auth import ApiKeyAuth
from simworld.server.chat import router as chat_router
from simworld.server.deps import HubDep
from simworld.server.hub import Hub, HubError
from simworld.server.mcp import mcp_router
from simworld.server.metrics import CONTENT_TYPE, Metrics
from simworld.server.openenv import openenv_router
from simworld.server.rest import router as rest_router
from simworld.server.retrieve import router as retrieve_router
from simworld.server.settings import (
    WORKER_THREADS,
    Settings,
    keys_from_environment,
    serving_threads,
)
from simworld.server.virtual import router as virtual_router

log = logging.getLogger(__name__)

_KINDS = {
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    422: "validation",
}


def create_app(settings: Settings | None = None, *, hub: Hub | None = None) -> FastAPI:
    """The app for `settings` (default Settings()), or around a ready `hub` (then only the
    settings' API keys are used; the hub's envs and limits apply)."""
    if hub is None:
        settings = settings or Settings()
        keys, envs, limits = settings.api_keys, list(settings.envs), settings.limits
    else:
        keys = settings.api_keys if settings is not None else keys_from_environment()
        envs, limits = list(hub.envs), hub.limits
    app = FastAPI(
        title="simworld",
        summary="Learned world models served as drop-in environments",
        lifespan=_lifespan(settings, hub),
    )
    _add_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=limits.max_request_bytes, on_reject=_counter(app))
    app.add_middleware(ApiKeyAuth, keys=keys, on_reject=_counter(app))
    app.add_middleware(InternalErrors, on_error=_counter(app))  # outermost
    app.include_router(rest_router)
    app.include_router(virtual_router)  # StableToolBench's POST /virtual
    app.include_router(retrieve_router)  # Search-R1's POST /retrieve
    app.include_router(chat_router)  # the world model itself: POST /v1/chat/completions
    app.add_api_route("/metrics", _metrics, methods=["GET"], include_in_schema=False)
    for env in envs:
        app.include_router(openenv_router(env), prefix=f"/envs/{env}", tags=[f"OpenEnv {env}"])
        app.include_router(mcp_router(env), prefix=f"/envs/{env}", tags=[f"MCP {env}"])
    app.include_router(openenv_router(envs[0]), tags=["OpenEnv (first env)"])
    app.include_router(mcp_router(envs[0]), tags=["MCP (first env)"])
    if not any(getattr(route, "path", None) == "/health" for route in app.routes):
        app.add_api_route("/health", _health, methods=["GET"])
    return app


def _metrics(hub: HubDep) -> Response:
    return PlainTextResponse(hub.metrics.render(), media_type=CONTENT_TYPE)


def _health() -> dict[str, str]:
    return {"status": "healthy"}


# ---------------------------------------------------------------------------- lifespan


def _lifespan(
    settings: Settings | None, ready: Hub | None
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Sync routes run in anyio's worker threads (40 by default, per event loop): raise
        # the limit so that every concurrent session's step can reach the batching model.
        threads = settings.worker_threads if settings is not None else WORKER_THREADS
        to_thread.current_default_thread_limiter().total_tokens = threads
        if ready is not None:
            app.state.hub = ready
            yield
            return
        assert settings is not None
        with ExitStack() as stack:
            # Loading a model blocks for seconds: off the event loop.
            app.state.hub = await asyncio.to_thread(build_hub, settings, stack)
            yield

    return lifespan


def build_hub(settings: Settings, stack: ExitStack) -> Hub:
    """The hub `settings` describe; what needs closing is pushed on `stack` (closed in
    reverse: sessions first, then the batching worker, then the recorder)."""
    from simworld.server.batching import BatchingModel
    from simworld.server.recording import Recorder
    from simworld.simulators.envs import load_sim_env
    from simworld.worldmodel.engines.decode import PrefixCache
    from simworld.worldmodel.world_model import WorldModel, load_world_model

    metrics = Metrics()
    recorder = None
    if settings.record is not None:
        recorder = stack.enter_context(Recorder(settings.record))
    model: WorldModel | None = None
    if settings.model is not None:
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(settings.torch_threads or serving_threads())
        stack.callback(torch.set_num_threads, before)
        model = load_world_model(settings.model, device=settings.device, dtype=settings.dtype)
        prefixes = getattr(getattr(model, "engine", None), "prefix_cache", None)
        if isinstance(prefixes, PrefixCache) and settings.prefix_cache is not None:
            prefixes.size = settings.prefix_cache
        if settings.batching:
            batching = BatchingModel(
                model,
                max_batch=settings.max_batch,
                max_wait_ms=settings.max_wait_ms,
                on_batch=metrics.batch,
                continuous=settings.batching_mode == "continuous",
            )
            stack.callback(batching.close)
            model = batching
    envs = {name: load_sim_env(name) for name in settings.envs}
    hub = Hub(
        envs,
        model,
        router=settings.router,
        limits=settings.limits,
        recorder=recorder,
        metrics=metrics,
    )
    stack.callback(hub.close_all)
    return hub


# ---------------------------------------------------------------------------- errors


def _counter(app: FastAPI) -> Callable[[str], None]:
    """metrics.error of the app's hub, once the lifespan has built it."""

    def count(kind: str) -> None:
        hub: Hub | None = getattr(app.state, "hub", None)
        if hub is not None:
            hub.metrics.error(kind)

    return count


def _add_error_handlers(app: FastAPI) -> None:
    # Starlette hands these handlers a WebSocket, not a Request, when the error comes from
    # a WebSocket route (and ignores what they return): `_refuse` closes the socket then.
    count = _counter(app)

    async def on_hub_error(conn: Request, exc: Exception) -> Response:
        assert isinstance(exc, HubError)
        return await _refuse(conn, count, exc.status, exc.kind, exc.message)

    async def on_invalid(conn: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        message, detail = _validation(exc.errors())
        return await _refuse(conn, count, 422, "validation", message, detail)

    async def on_http(conn: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = _KINDS.get(exc.status_code, "http")
        if isinstance(exc.detail, list):  # pydantic errors an adapter raised itself
            message, detail = _validation(exc.detail)
            return await _refuse(conn, count, exc.status_code, kind, message, detail)
        message = _http_message(conn, exc)
        return await _refuse(conn, count, exc.status_code, kind, message, headers=exc.headers)

    app.add_exception_handler(HubError, on_hub_error)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(HTTPException, on_http)


async def _refuse(
    conn: HTTPConnection,
    count: Callable[[str], None],
    status: int,
    kind: str,
    message: str,
    detail: object = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The error response; on a WebSocket, the socket is closed with the reason instead
    (1008 for a client mistake, 1011 for a server-side failure)."""
    count(kind)
    error = {"kind": kind, "message": message}
    body = {"detail": message if detail is None else detail, "error": error}
    if isinstance(conn, WebSocket):
        await conn.close(code=1008 if status < 500 else 1011, reason=message[:120])
    return JSONResponse(body, status_code=status, headers=headers)


def _validation(errors: Sequence[Any]) -> tuple[str, list[dict[str, Any]]]:
    """pydantic's errors as one message naming each field path, and as a JSON `detail`."""
    entries = [_error_entry(e) for e in errors if isinstance(e, Mapping)]
    message = "; ".join(f"{where}: {msg}" for where, msg in entries[:5])
    detail = [
        {"loc": _loc(e), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in errors
        if isinstance(e, Mapping)
    ]
    return message or "the request is not valid", detail


def _loc(error: Mapping[str, Any]) -> list[str | int]:
    return [part for part in error.get("loc", ()) if isinstance(part, str | int)]


def _error_entry(error: Mapping[str, Any]) -> tuple[str, str]:
    """(the field path, "body.tool_calls[0].id", and what is wrong with it)."""
    loc = _loc(error)
    msg = str(error.get("msg", "")).removeprefix("Value error, ")
    if error.get("type") == "json_invalid":  # loc is ("body", <character offset>)
        reason = (error.get("ctx") or {}).get("error", "")
        return "body", f"not valid JSON at character {loc[-1]}: {reason}".rstrip(": ")
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return where or "body", msg


def _http_message(conn: HTTPConnection, exc: HTTPException) -> str:
    path = conn.url.path
    if exc.status_code == 404 and exc.detail == "Not Found":
        return f"no route {path!r}: see /docs for the routes this server has"
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "?")
        return f"{path!r} does not take {conn.scope.get('method', '')}; allowed: {allowed}"
    return str(exc.detail)


# ---------------------------------------------------------------------------- middleware


class InternalErrors:
    """The last resort: an exception no handler took becomes a 500 with an incident id,
    logged with its traceback under that id. Unlike an app-level `Exception` handler
    (Starlette re-raises after answering, and uvicorn then drops the connection), the
    exception stops here, so the client's keep-alive connection survives. A response
    already under way cannot be replaced: that exception goes on to the server."""

    def __init__(self, app: ASGIApp, on_error: Callable[[str], None]) -> None:
        self.app = app
        self.on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as exc:
            if started:
                raise
            incident = secrets.token_hex(6)
            where = f"{scope.get('method', '')} {scope.get('path', '')}"
            log.error("internal error %s on %s", incident, where, exc_info=exc)
            self.on_error("internal")
            message = f"internal error {incident}: the server log has the details under this id"
            body = {"detail": message, "error": {"kind": "internal", "message": message}}
            await JSONResponse({**body, "id": incident}, status_code=500)(scope, receive, send)


class BodyTooLarge(HTTPException):
    """Raised from `receive` when a streamed body passes the limit; FastAPI re-raises an
    HTTPException met while reading a body, so the app's handler answers it."""

    def __init__(self, limit: int) -> None:
        message = f"the request body is larger than this server's limit of {limit} bytes"
        super().__init__(413, message)


class BodyLimit:
    """Refuses HTTP bodies past `max_bytes` with 413: at once when Content-Length says so
    (the body is never read), else as soon as the bytes streamed in pass it."""

    def __init__(self, app: ASGIApp, max_bytes: int, on_reject: Callable[[str], None]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge:
            # Read outside FastAPI's body parsing (a raw route): answer here if still possible.
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.on_reject("too_large")
        exc = BodyTooLarge(self.max_bytes)
        body = {"detail": exc.detail, "error": {"kind": "too_large", "message": exc.detail}}
        await JSONResponse(body, status_code=413)(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


__all__ = ["BodyLimit", "BodyTooLarge", "InternalErrors", "build_hub", "create_app"]
