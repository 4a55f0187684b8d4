"""`simworld bench WHAT`: the benchmarks, each owned by the layer it measures.

    simworld bench decode [--model default|DIR|random]          # worldmodel: decode speed
    simworld bench serve [--model default] [--seconds S] [--sessions 1 8 32 64] [--json F]
    simworld bench mdlm --ar DIR --mdlm DIR [--limit N] [--ks 1 2 4 8 16] [--json F]
    simworld bench pipeline --model DIR [--table T] [--pipelines N] [--test FILE] [--json F]

The world-model layer cannot import the server, so neither owns `bench`: this front-door
module names the benchmarks and hands the rest of the command line to the owner's
`configure("bench WHAT", parser) -> handler`, importing only the module of the benchmark
being run.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], int]

# benchmark -> (owning module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "decode": ("simworld.worldmodel.cli", "decode speed of a world model (ms per observation)"),
    "serve": ("simworld.server.bench", "server steps/s and latency, batching on and off"),
    "search": ("simworld.eval.search", "simulated vs real search passages; router shares"),
    "mdlm": ("simworld.eval.mdlm_compare", "AR against MDLM: accuracy, latency, passes per K"),
    "pipeline": ("simworld.eval.pipeline_search", "pipeline search: all-real vs cost-routed"),
}


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `simworld bench`'s arguments to `parser` and return its handler."""
    if command != "bench":
        raise ValueError(f"unknown bench command {command!r}")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "benchmarks:\n" + "\n".join(
        f"  {name:<8}{help_}" for name, (_, help_) in BENCHMARKS.items()
    )
    parser.add_argument("what", choices=BENCHMARKS, metavar="WHAT", help=", ".join(BENCHMARKS))
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own arguments")
    return _run


def _run(args: argparse.Namespace) -> int:
    module_name, help_ = BENCHMARKS[args.what]
    parser = argparse.ArgumentParser(prog=f"simworld bench {args.what}", description=help_)
    handler = importlib.import_module(module_name).configure(f"bench {args.what}", parser)
    code: int = handler(parser.parse_args(args.rest))
    return code


__all__ = ["BENCHMARKS", "configure"]
