"""Fixtures for the server tests: a real uvicorn server on 127.0.0.1 (a free port, in a
thread) over any ASGI app, hubs over small real envs, and the tiny world model.

    def test_x(serve, make_hub):
        base = serve(create_app(hub=make_hub(("mock",))))     # stopped after the test
        httpx.get(f"{base}/health")

    @pytest.fixture(scope="module")
    def base(running_server):                                   # any scope
        with running_server(create_app(hub=...)) as url:
            yield url

Every server started here records the status of each HTTP response; when it stops, a 5xx
fails the test (with the requests that got one), unless it was started with
`allow_5xx=True`. 503 is exempt: it is the documented answer of a server without a world
model to a step only a model could answer (hub.Unavailable), not a failure. So no server
test can hide an internal error behind a 4xx assertion.
uvicorn runs with `log_config=None`, so its loggers (uvicorn.access, uvicorn.error)
propagate to pytest's `caplog`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from simworld.server.hub import Hub, Limits
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.world_model import WorldModel

START_TIMEOUT = 60.0


class StatusLog:
    """ASGI middleware that notes (method, path, status) of every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.responses: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def noted(message: Message) -> None:
            if message["type"] == "http.response.start":
                # The path is read now: the auth middleware has stripped any /k/<token>.
                self.responses.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.app(scope, receive, noted)


@contextmanager
def running(app: ASGIApp, *, allow_5xx: bool = False, **options: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on 127.0.0.1 (any free port) in a thread; yields the base
    URL ("http://127.0.0.1:PORT"). `options` go to uvicorn.Config (log_level, ws_max_size,
    access_log, ...)."""
    log = StatusLog(app)
    settings: dict[str, Any] = {"log_level": "warning", "log_config": None, "lifespan": "on"}
    config = uvicorn.Config(log, host="127.0.0.1", port=0, **{**settings, **options})
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the test server did not start (its lifespan failed; see the log)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the test server did not start within {START_TIMEOUT} s")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    failed = [r for r in log.responses if r[2] >= 500 and r[2] != 503]
    if failed and not allow_5xx:
        raise AssertionError(f"the server answered {len(failed)} request(s) with 5xx: {failed}")


@pytest.fixture(scope="session")
def running_server() -> Callable[..., AbstractContextManager[str]]:
    """`running` itself, for fixtures of any scope (see the module docstring)."""
    return running


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """Start a server over an app for this test: `base = serve(app, **options)`."""
    with ExitStack() as stack:

        def start(app: ASGIApp, **options: Any) -> str:
            return stack.enter_context(running(app, **options))

        yield start


@pytest.fixture(scope="session")
def tiny_model(tiny_checkpoint: Path) -> WorldModel:
    """The tiny FrozenLake world model (tests/conftest.py), loaded once."""
    from simworld.worldmodel.world_model import load_world_model

    return load_world_model(tiny_checkpoint)


@pytest.fixture
def make_hub() -> Callable[..., Hub]:
    """A hub over the named envs: `make_hub(("mock", "frozenlake"), model=None,
    limits=Limits(...), router=RouterConfig(...), clock=...)`. By default the mock env's
    `add` is answered by its exact real backend, so mock steps need no model."""

    def build(
        envs: Sequence[str] = ("mock",),
        model: WorldModel | None = None,
        *,
        limits: Limits | None = None,
        router: RouterConfig | None = None,
        **options: Any,
    ) -> Hub:
        if router is None and "mock" in envs:
            router = RouterConfig(real_tools=frozenset({"add"}))
        sims = {name: load_sim_env(name) for name in envs}
        return Hub(sims, model, limits=limits, router=router, **options)

    return build
