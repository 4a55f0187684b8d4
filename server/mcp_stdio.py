"""`simworld mcp`: one simulated env as an MCP server over stdio, for clients that only
launch servers as commands (verifiers 0.1's MCPEnv, `mcpServers` configs).

    simworld mcp --env bfcl                          # the default model
    simworld mcp --env mock --model none --real-tool add
    simworld mcp --env bfcl --model out/ckpt --task bfcl-4 --seed 3 --record run.jsonl

A client's config swaps a real server for the simulated one by changing `command`:

    {"mcpServers": {"files": {"command": "simworld",
                              "args": ["mcp", "--env", "bfcl", "--model", "default"]}}}

The wire is MCP's stdio transport: one JSON-RPC message (or batch) per line on stdin, one
response per line on stdout, in order; notifications get none. Everything else the
process says (logs, model loading, warnings) goes to stderr: the real stdout is kept for
the protocol and file descriptor 1 is pointed at stderr before anything loads, so not even
a C library's print can corrupt the stream. The methods, tool rendering and error codes
are the HTTP endpoint's (mcp.py, mcp_wire.py), over an in-process hub.

Sessions. The process is the connection: `initialize` starts an episode (the env's
default task, or `--task` / `--seed`), a second `initialize` ends it and starts another,
and end of input ends it and the process (exit 0). Sessions do not expire while the
process runs. There is no REST API here to read rewards or reset: use `simworld serve`
and its `/mcp` for that, or `--record` to keep every step (with its reward) in a dump.
Exit 2, with one line on stderr, for a usage mistake (an unknown env, a missing
checkpoint).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any, BinaryIO

from simworld.server.hub import Limits, NotFound
from simworld.server.mcp import Channel, McpDispatcher
from simworld.server.mcp_wire import INVALID_REQUEST, PARSE_ERROR, dumps, failure
from simworld.server.settings import Settings
from simworld.simulators.envs import SIM_ENVS
from simworld.simulators.router import RouterConfig

Handler = Callable[[argparse.Namespace], int]
log = logging.getLogger(__name__)


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `simworld mcp`'s arguments to `parser` and return its handler."""
    if command != "mcp":
        raise ValueError(f"unknown command {command!r} for the MCP stdio server")
    parser.description = "Serve one simulated env as an MCP server over stdio."
    add = parser.add_argument
    add("--env", default="bfcl",
        help=f"the env to serve (from {', '.join(SIM_ENVS)}, or a captured env's "
        "directory)")  # fmt: skip
    add("--model", default="default", help='"default", a checkpoint directory, or "none"')
    add("--task", help="the task each session plays (default: the env's first)")
    add("--seed", type=int, help="the seed of each session (chooses the task without --task)")
    add("--page-size", type=int, help="tools per tools/list page (default: all in one)")
    add("--real-tool", dest="real_tools", action="append", default=[], metavar="TOOL",
        help="let the real backend answer this tool (envs that have one)")  # fmt: skip
    add("--max-real-cost", type=float, default=0.0,
        help="let the real backend answer steps that cost at most this (0: off)")  # fmt: skip
    add("--no-cache", action="store_true", help="do not cache model answers")
    add("--max-steps", type=int, help="cap the env's step limit")
    add("--record", type=Path, metavar="FILE", help="append every step to this dump")
    add("--device", help="the model's torch device (default: the engine's choice)")
    add("--log-level", default="warning", choices=("error", "warning", "info", "debug"))
    return _main


def _main(args: argparse.Namespace) -> int:
    protocol = _take_stdout()
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper())
    try:
        settings = Settings(
            model=None if args.model == "none" else args.model,
            envs=(args.env,),
            api_keys=(),
            limits=Limits(idle_seconds=float("inf"), max_steps=args.max_steps),
            max_batch=1,  # one request at a time: nothing to batch
            record=args.record,
            router=RouterConfig(
                use_cache=not args.no_cache,
                real_tools=frozenset(args.real_tools),
                max_real_cost=args.max_real_cost,
            ),
            device=args.device,
        )
    except (ValueError, TypeError) as exc:
        print(f"simworld mcp: {exc}", file=sys.stderr)
        return 2
    from simworld.server.app import build_hub

    with ExitStack() as stack:
        try:
            hub = build_hub(settings, stack)
            dispatcher = McpDispatcher(
                hub, settings.envs[0], page_size=args.page_size, task_id=args.task, seed=args.seed
            )
            dispatcher.sim.task_for(args.task, args.seed)  # an unknown --task fails here
        except (ValueError, KeyError) as exc:
            print(f"simworld mcp: {exc}", file=sys.stderr)
            return 2
        log.info("simworld mcp: serving %s on stdio", settings.envs[0])
        with suppress(KeyboardInterrupt):
            serve_stdio(dispatcher, sys.stdin.buffer, protocol)
    return 0


def _take_stdout() -> BinaryIO:
    """The real stdout, for the protocol alone; fd 1 and sys.stdout then go to stderr."""
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


def serve_stdio(
    dispatcher: McpDispatcher, lines: Iterable[bytes], out: BinaryIO, owner: str = ""
) -> None:
    """Answer each JSON-RPC line of `lines` on `out` until the input ends; the session an
    `initialize` started ends with it (or with the next `initialize`)."""
    channel = Channel(owner)
    try:
        for line in lines:
            if not line.strip():
                continue
            before = channel.session
            reply = answer_line(dispatcher, channel, line)
            if before is not None and channel.session != before:
                _end(dispatcher, before, owner)
            if reply is not None:
                out.write(dumps(reply) + b"\n")
                out.flush()
    finally:
        if channel.session is not None:
            _end(dispatcher, channel.session, owner)


def answer_line(dispatcher: McpDispatcher, channel: Channel, line: bytes) -> Any:
    """The reply to one line: a response, a list of them (a batch), or None."""
    try:
        payload = json.loads(line)
    except (ValueError, RecursionError) as exc:
        return failure(None, PARSE_ERROR, f"Parse error: the line is not JSON ({exc})")
    if not isinstance(payload, list):
        return dispatcher.handle_safely(payload, channel)
    if not payload:
        return failure(None, INVALID_REQUEST, "Invalid Request: an empty batch")
    replies = [dispatcher.handle_safely(message, channel) for message in payload]
    answered = [reply for reply in replies if reply is not None]
    return answered or None


def _end(dispatcher: McpDispatcher, session: str, owner: str) -> None:
    with suppress(NotFound):  # already closed (openenv/session/close) or gone
        dispatcher.hub.close(session, owner)


__all__ = ["answer_line", "configure", "serve_stdio"]
