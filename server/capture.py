"""`simworld capture`: connect to a real MCP server once and save it as a captured env (its
initialize result, its tool list byte for byte, a default task), ready to proxy and serve.

    simworld capture --stdio "python notes_server.py" --out envs/notes
    simworld capture --url http://127.0.0.1:9000/mcp --header "Authorization=Bearer $TOKEN" \\
        --out envs/notes --name notes
    simworld serve --env envs/notes ...                  # once a model is trained on it

The client (mcp_client.py) sends initialize, notifications/initialized and tools/list,
page after page; the env directory is written by simworld.simulators.envs.captured (its
docstring shows the files). Nothing secret is written: headers are noted by name only, the
URL loses its userinfo and secret query parameters, a command line its secret flags'
values (redaction.py).

Exit codes: 0 captured (one line on stdout says what); 1 the server could not be reached or
answered badly (the line on stderr says how, with a stdio server's stderr); 2 a usage
mistake (a malformed --header, an existing env without --force).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simworld.data.records import JSON
from simworld.server.mcp_client import (
    TIMEOUT,
    McpClient,
    McpError,
    Transport,
    TransportError,
    connect_http,
    connect_stdio,
)
from simworld.server.redaction import Redactor
from simworld.simulators.envs.captured import (
    CapturedEnvError,
    is_captured_env,
    valid_name,
    write_captured_env,
)

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Captured:
    """What a capture saved: the env's directory and name, the server, the tool count."""

    directory: Path
    name: str
    server: str
    protocol_version: str
    tools: int


def capture(
    transport: Transport,
    out: str | Path,
    *,
    source: Mapping[str, JSON],
    name: str | None = None,
    overwrite: bool = False,
) -> Captured:
    """Capture the MCP server behind `transport` into the env directory `out` (named
    `name`, by default the directory's own name). The transport is closed afterwards."""
    directory = Path(out)
    with McpClient(transport) as client:
        if is_captured_env(directory) and not overwrite:
            raise CapturedEnvError(f"{directory}: a captured env is already here; pass overwrite")
        init = client.initialize()
        tools = client.list_tools()
    assert isinstance(init.value, dict)
    result = init.value["result"]
    assert isinstance(result, dict)
    env_name = name or directory.resolve().name
    write_captured_env(
        directory,
        name=env_name,
        initialize=result,
        tools=[tool.raw for tool in tools],
        source=source,
        overwrite=overwrite,
    )
    info = result.get("serverInfo")
    server = "an unnamed server"
    if isinstance(info, dict):
        server = f"{info.get('name', '?')} {info.get('version', '')}".strip()
    return Captured(directory, env_name, server, str(result.get("protocolVersion")), len(tools))


def stdio_source(command: Sequence[str], redactor: Redactor) -> dict[str, JSON]:
    """How a stdio server was reached, as a captured env notes it (no secrets)."""
    return {"transport": "stdio", "command": list(redactor.argv(command))}


def http_source(url: str, headers: Mapping[str, str], redactor: Redactor) -> dict[str, JSON]:
    """How an HTTP server was reached, as a captured env notes it (header names only)."""
    return {"transport": "streamable-http", "url": redactor.url(url), "headers": sorted(headers)}


def parse_headers(pairs: Sequence[str]) -> dict[str, str]:
    """`K=V` pairs as a header dict; ValueError naming a pair without `=` or a name."""
    headers: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name.strip():
            raise ValueError(
                f"--header {pair!r}: expected NAME=VALUE, e.g. 'Authorization=Bearer x'"
            )
        headers[name.strip()] = value
    return headers


# ---------------------------------------------------------------------------- the command


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "capture":
        raise ValueError(f"unknown capture command {command!r}")
    parser.description = "Capture a real MCP server (initialize result and tools) as an env."
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--stdio", metavar="CMD", help='the server\'s command line, e.g. "python s.py"'
    )
    where.add_argument("--url", help="the server's streamable HTTP endpoint (…/mcp)")
    add = parser.add_argument
    add("--out", required=True, type=Path, metavar="DIR", help="the env directory to write")
    add("--name", help="the env's name (default: the directory's name)")
    add("--header", action="append", default=[], metavar="K=V",
        help="an HTTP header for every request (auth), repeatable; never saved")  # fmt: skip
    add("--timeout", type=float, default=TIMEOUT, help="seconds to wait for each reply")
    add("--force", action="store_true", help="replace an env already captured in --out")
    return _run


def _run(args: argparse.Namespace) -> int:
    redactor = Redactor()
    try:
        headers = parse_headers(args.header)
        if headers and args.stdio:
            raise ValueError("--header goes with --url (a stdio server takes no headers)")
        if args.name is not None:
            valid_name(args.name)
        if is_captured_env(args.out) and not args.force:
            raise ValueError(
                f"{args.out}: a captured env is already here; pass --force to replace it"
            )
        if args.stdio:
            argv = shlex.split(args.stdio)
            source = stdio_source(argv, redactor)
            transport: Transport = connect_stdio(argv, timeout=args.timeout)
        else:
            source = http_source(args.url, headers, redactor.with_secrets(headers.values()))
            transport = connect_http(args.url, headers, timeout=args.timeout)
    except ValueError as exc:
        print(f"simworld capture: {exc}", file=sys.stderr)
        return 2
    except TransportError as exc:
        print(f"simworld capture: {exc}", file=sys.stderr)
        return 1
    try:
        done = capture(transport, args.out, source=source, name=args.name, overwrite=args.force)
    except (TransportError, McpError, CapturedEnvError) as exc:
        print(f"simworld capture: {exc}", file=sys.stderr)
        return 1
    print(
        f"simworld capture: {done.tools} tools of {done.server} (protocol "
        f"{done.protocol_version}) saved to {done.directory} as env {done.name!r}"
    )
    return 0


__all__ = ["Captured", "capture", "configure", "http_source", "parse_headers", "stdio_source"]
