"""The server layer's `simworld` subcommand: `simworld serve ...`.

    simworld serve                                         # bfcl on the default model, :8000
    simworld serve --model out/tiny --env frozenlake --env mock --port 8001
    simworld serve --model none --env mock --real-tool add # no world model: rules and real
    SIMWORLD_API_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(32))') \\
        simworld serve --host 0.0.0.0                     # a token on every request

A thin parser over `Settings` (settings.py) and `create_app` (app.py), run by uvicorn.
Prints one line on stdout when the server answers, with its URL (and, when API keys are
set, that a token is required, never the token). Exit 0 after Ctrl-C; 2 for a usage
mistake (an unknown env, a missing checkpoint, a bad limit), one line on stderr; 1 when
the server could not start (the log above says why). SIGTERM stops it gracefully and then
ends the process by that signal, as uvicorn does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from simworld.server.hub import Limits
from simworld.server.settings import API_KEY_VARIABLE, BATCHING_MODES, WORKER_THREADS, Settings
from simworld.simulators.envs import SIM_ENVS
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.engines.base import DTYPE_CHOICES

Handler = Callable[[argparse.Namespace], int]
LIMITS = Limits()


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "serve":
        raise ValueError(f"unknown server command {command!r}")
    parser.description = "Serve simulated environments over HTTP (native REST and OpenEnv)."
    add = parser.add_argument
    add("--model", default="default", help='"default", a checkpoint directory, or "none"')
    add("--env", dest="envs", action="append", metavar="NAME",
        help=f"an env to serve, repeatable (from {', '.join(SIM_ENVS)}, or a captured env's "
        "directory; default bfcl); the first is also served at the root for OpenEnv "
        "clients")  # fmt: skip
    add("--host", default="127.0.0.1", help="the address to listen on")
    add("--port", type=int, default=8000, help="the port (0: any free port)")
    add("--record", type=Path, metavar="FILE", help="append every served step to this dump")
    add("--max-batch", type=int, default=32, help="contexts per model call (1: no batching)")
    add("--max-wait-ms", type=float, default=5.0, help="batching wait (0: no batching)")
    add("--batching", dest="batching_mode", choices=BATCHING_MODES, default="continuous",
        help="continuous: rows join and leave the running batch step by step (the own "
        "decode path); gather: whole calls are gathered")  # fmt: skip
    add("--prefix-cache", type=int, default=64,
        help="prompts whose keys and values the own decode path keeps (0: none)")  # fmt: skip
    add("--max-sessions", type=int, default=LIMITS.max_sessions, help="live sessions at most")
    add("--idle-seconds", type=float, default=LIMITS.idle_seconds,
        help="a session idle this long ends")  # fmt: skip
    add("--max-steps", type=int, help="cap every env's step limit (default: the env's own)")
    add("--max-request-bytes", type=int, default=LIMITS.max_request_bytes,
        help="the largest request body or WebSocket message")  # fmt: skip
    add("--shadow", action="store_true",
        help="run the real backend beside every answer and export the divergence")  # fmt: skip
    add("--real-tool", dest="real_tools", action="append", default=[], metavar="TOOL",
        help="let the real backend answer this tool (envs that have one)")  # fmt: skip
    add("--max-real-cost", type=float, default=0.0,
        help="let the real backend answer steps that cost at most this (0: off)")  # fmt: skip
    add("--no-cache", action="store_true", help="do not cache model answers")
    add(
        "--no-ground",
        action="store_true",
        help="serve model answers as written, not grounded in the env's data (search: corpus)",
    )
    add("--device", help="the model's torch device (default: the engine's choice)")
    add("--dtype", choices=DTYPE_CHOICES, default="float32",
        help="the model's weights: float32, bfloat16 (where the hardware runs it natively: "
        "faster batched, slower at batch 1) or auto (bfloat16 where native)")  # fmt: skip
    add("--worker-threads", type=int, default=WORKER_THREADS, help="requests served at once")
    add("--torch-threads", type=int,
        help="torch intra-op threads (default: one less than the cores, at least 1)")  # fmt: skip
    add("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    return _serve


def settings_from(args: argparse.Namespace) -> Settings:
    """The Settings the flags describe (ValueError naming the flag's field when wrong)."""
    limits = Limits(
        max_sessions=args.max_sessions,
        idle_seconds=args.idle_seconds,
        max_request_bytes=args.max_request_bytes,
        max_steps=args.max_steps,
    )
    router = RouterConfig(
        use_cache=not args.no_cache,
        ground=not args.no_ground,
        real_tools=frozenset(args.real_tools),
        max_real_cost=args.max_real_cost,
        shadow=args.shadow,
    )
    return Settings(
        model=None if args.model == "none" else args.model,
        envs=tuple(args.envs or ("bfcl",)),
        host=args.host,
        port=args.port,
        limits=limits,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        batching_mode=args.batching_mode,
        prefix_cache=args.prefix_cache,
        record=args.record,
        router=router,
        device=args.device,
        dtype=args.dtype,
        worker_threads=args.worker_threads,
        torch_threads=args.torch_threads,
    )


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = settings_from(args)
    except (ValueError, TypeError) as exc:
        print(f"simworld serve: {exc}", file=sys.stderr)
        return 2
    print(
        f"simworld serve: loading model {settings.model or 'none'} and envs "
        f"{', '.join(settings.envs)}",
        flush=True,
    )
    return serve(settings, log_level=args.log_level)


def serve(settings: Settings, *, log_level: str = "info") -> int:
    """Run the server until it is stopped; the exit code (see the module docstring)."""
    from simworld.server.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        lifespan="on",
        ws_max_size=settings.limits.max_request_bytes,
    )
    server = uvicorn.Server(config)
    try:
        return asyncio.run(_run(server, settings))
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on
        return 0


async def _run(server: uvicorn.Server, settings: Settings) -> int:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            return 1  # the lifespan failed (the log says why)
        await asyncio.sleep(0.05)
    print(ready_line(settings, server), flush=True)
    await task
    return 0


def ready_line(settings: Settings, server: uvicorn.Server) -> str:
    """The one line printed once the server answers (the bound port when --port 0)."""
    port = settings.port
    sockets = [s for srv in server.servers for s in srv.sockets]
    if sockets:
        port = sockets[0].getsockname()[1]
    url = f"http://{settings.host}:{port}"
    line = f"simworld serve: ready at {url} (envs: {', '.join(settings.envs)}; "
    line += f"OpenEnv base_url {url}/envs/{settings.envs[0]})"
    if settings.api_keys:
        line += (
            f"; an API token ({API_KEY_VARIABLE}) is required: send `Authorization: Bearer "
            f"<token>` or use base_url {url}/k/<token>"
        )
    return line


__all__ = ["configure", "ready_line", "serve", "settings_from"]
