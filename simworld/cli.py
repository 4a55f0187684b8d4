"""The `simworld` command: a thin dispatcher to the subcommands each layer owns.

    simworld record --env bfcl --episodes 20 --seed 1 --out x.jsonl
    simworld inspect x.jsonl
    simworld convert x.jsonl y.jsonl --to openai
    simworld serve --model default --env bfcl
    simworld mcp --env bfcl          # MCP over stdio, for `mcpServers` configs

Each layer's `cli` module exposes `configure(command, parser) -> handler`; only the module
of the command being run is imported, so `simworld --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# command -> (owning module, one-line help). Commands of layers not built yet are absent.
COMMANDS: dict[str, tuple[str, str]] = {
    "record": ("simworld.data.cli", "run a real environment and dump ground-truth episodes"),
    "convert": ("simworld.data.cli", "convert a dump between formats"),
    "inspect": ("simworld.data.cli", "summarize a dump: episodes, steps, tools, errors"),
    "bundle": ("simworld.data.cli", "rebuild the bundled dataset (maintainers)"),
    "train": ("simworld.training.cli", "train a world model (sft)"),
    "bench": ("simworld.bench", "measure speed: bench decode (model), bench serve (server)"),
    "eval": ("simworld.eval.cli", "measure a world model's fidelity against baselines"),
    "serve": ("simworld.server.cli", "serve simulated environments (native REST, OpenEnv)"),
    "capture": ("simworld.server.capture", "save a real MCP server's tools as an env"),
    "proxy": ("simworld.server.proxy_cli", "proxy a real MCP server or tool API, recording calls"),
    "mcp": ("simworld.server.mcp_stdio", "serve one simulated env as an MCP server on stdio"),
}


def _overview() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "commands:\n" + "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `simworld COMMAND ...`; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    top = argparse.ArgumentParser(
        prog="simworld",
        description="Learned world models as drop-in environments for agent RL.",
        epilog=_overview(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("command", nargs="?", help="one of: " + ", ".join(COMMANDS))
    if not args or args[0] in ("-h", "--help"):
        top.print_help()
        return 0
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        top.print_usage(sys.stderr)
        print(
            f"simworld: unknown command {command!r}; choose from {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    module_name, help_ = COMMANDS[command]
    parser = argparse.ArgumentParser(prog=f"simworld {command}", description=help_)
    handler = importlib.import_module(module_name).configure(command, parser)
    code: int = handler(parser.parse_args(rest))
    return code


if __name__ == "__main__":
    sys.exit(main())
