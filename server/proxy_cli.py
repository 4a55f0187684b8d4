"""The `simworld proxy` command: a thin parser over proxy.py's Proxy, served by uvicorn.

    simworld proxy --upstream-stdio "python notes_server.py" --env envs/notes --port 8900
    simworld proxy --upstream-url https://tools.example/mcp --header "Authorization=Bearer $T" \\
        --env envs/remote --record dumps/remote.jsonl --redact 'session[_-]?code'
    simworld proxy --openapi api.yaml --upstream-url http://127.0.0.1:9000 --env envs/api

Prints one line when it answers (its /mcp URL, the upstream, the env, the dump) and, when it
stops (Ctrl-C, SIGTERM), how many tool calls it recorded. Exit codes: 0 after a stop; 2 a
usage mistake (flags that do not go together, a bad redact pattern or header, a record
folder that does not exist); 1 the upstream could not be captured or its OpenAPI document
read (the line on stderr says why).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from simworld.server.capture import parse_headers
from simworld.server.mcp_client import TIMEOUT, McpError, TransportError
from simworld.server.openapi_tools import SpecError, load_spec
from simworld.server.proxy import (
    McpUpstream,
    OpenApiUpstream,
    Proxy,
    Upstream,
    default_record_path,
    ensure_env,
    proxy_app,
)
from simworld.server.recording import Recorder
from simworld.server.redaction import DEFAULT_PATTERNS, Redactor, header_secrets

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "proxy":
        raise ValueError(f"unknown proxy command {command!r}")
    parser.description = "Proxy a real MCP server or HTTP tool API, recording every tool call."
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--upstream-stdio", metavar="CMD", help="the MCP server's command line")
    where.add_argument("--upstream-url", metavar="URL",
                       help="the MCP server's URL (--openapi: the API's base URL)")  # fmt: skip
    add = parser.add_argument
    add("--openapi", metavar="SPEC", help="the API's OpenAPI 3 document (a file or a URL)")
    add("--env", required=True, type=Path, metavar="DIR",
        help="the captured env the calls belong to (captured first when DIR has none)")  # fmt: skip
    add("--record", type=Path, metavar="FILE",
        help="the dump to append to (default: a new file in DIR/recordings/)")  # fmt: skip
    add("--redact", nargs="+", default=[], metavar="PATTERN",
        help="more field-name patterns to redact (regular expressions; always: "
        + "|".join(DEFAULT_PATTERNS) + ")")  # fmt: skip
    add("--header", action="append", default=[], metavar="K=V",
        help="a header for every upstream request (auth), repeatable; never recorded")  # fmt: skip
    add("--host", default="127.0.0.1", help="the address to listen on")
    add("--port", type=int, default=8900, help="the port (0: any free port)")
    add("--timeout", type=float, default=TIMEOUT, help="seconds to wait for the upstream")
    add("--max-sessions", type=int, default=64, help="client sessions open at once, at most")
    add("--idle-seconds", type=float, default=600.0, help="a session idle this long ends")
    add("--log-level", default="warning", choices=("critical", "error", "warning", "info", "debug"))
    return _run


def _upstream(args: argparse.Namespace, headers: dict[str, str]) -> Upstream:
    if args.openapi:
        if not args.upstream_url:
            raise ValueError("--openapi needs --upstream-url, the API's base URL")
        spec = load_spec(args.openapi, headers)
        return OpenApiUpstream(spec, args.upstream_url, headers, args.timeout)
    if args.upstream_stdio:
        if headers:
            raise ValueError("--header goes with --upstream-url (a stdio server takes none)")
        return McpUpstream(command=tuple(shlex.split(args.upstream_stdio)), timeout=args.timeout)
    return McpUpstream(url=args.upstream_url, headers=headers, timeout=args.timeout)


def _run(args: argparse.Namespace) -> int:
    try:
        headers = parse_headers(args.header)
        redactor = Redactor(args.redact, header_secrets(headers))
        upstream = _upstream(args, headers)
        env = ensure_env(args.env, upstream, redactor)
        record = args.record or default_record_path(args.env)
        if not record.parent.is_dir():
            raise ValueError(f"--record: the folder {record.parent} does not exist")
    except (ValueError, TransportError, McpError) as exc:
        print(f"simworld proxy: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ValueError) and not isinstance(exc, SpecError) else 1
    with Recorder(record) as recorder:
        proxy = Proxy(
            upstream,
            env,
            recorder,
            redactor,
            max_sessions=args.max_sessions,
            idle_seconds=args.idle_seconds,
        )
        config = uvicorn.Config(
            proxy_app(proxy), host=args.host, port=args.port, log_level=args.log_level
        )
        server = uvicorn.Server(config)
        where = f"upstream {upstream.describe(redactor)}, env {env.name!r}, recording to {record}"
        try:
            code = asyncio.run(_serve(server, args.host, where))
        except KeyboardInterrupt:
            code = 0
        finally:
            proxy.close()
    print(f"simworld proxy: recorded {proxy.recorded_steps} tool calls to {record}", flush=True)
    return code


async def _serve(server: uvicorn.Server, host: str, where: str) -> int:
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task
            return 1
        await asyncio.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"simworld proxy: ready at http://{host}:{port}/mcp ({where})", flush=True)
    await task
    return 0


__all__ = ["configure"]
