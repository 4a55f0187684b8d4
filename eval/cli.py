"""The eval layer's `simworld` subcommand: `simworld eval ...`.

    simworld eval --model default --split test --out out/eval          # the README's report
    simworld eval --model out/tiny --env frozenlake --limit 5 --baselines copy-last --out out/e
    simworld eval --model default --data dump.jsonl --out out/eval     # any supported format

A thin parser over `simworld.eval.run.evaluate`. Errors are one line on stderr: exit 2 for
a usage problem, 1 for bad data or a missing model.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from simworld.data.formats import DumpError
from simworld.data.records import RecordError
from simworld.eval.run import BASELINES, EvalConfig, evaluate
from simworld.worldmodel.engines.base import DTYPE_CHOICES

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "eval":
        raise ValueError(f"unknown eval command {command!r}")
    parser.description = "Measure how faithfully a world model predicts real transitions."
    parser.add_argument(
        "--model",
        default="default",
        help='a checkpoint directory, "default", "smollm2", or an endpoint as URL#MODEL',
    )
    parser.add_argument("--out", required=True, help="the report directory to write")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", nargs="+", default=[], metavar="FILE", help="dumps to evaluate")
    source.add_argument("--split", default="test", choices=("train", "val", "test"))
    parser.add_argument(
        "--train",
        nargs="+",
        default=[],
        metavar="FILE",
        help="what nearest-neighbour retrieves from (default: bundled train)",
    )
    parser.add_argument("--env", action="append", default=[], help="keep only this env")
    parser.add_argument(
        "--api",
        action="append",
        default=[],
        help="keep only scenarios involving this API (e.g. TravelAPI)",
    )
    parser.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help=f"comma-separated, from {', '.join(BASELINES)}; '' for none",
    )
    parser.add_argument(
        "--llm", default="smollm2", help='the prompted-LLM baseline: "smollm2" or URL#MODEL'
    )
    parser.add_argument(
        "--llm-sample",
        type=int,
        default=40,
        help="steps the prompted LLM is run on (a fixed seeded sample)",
    )
    parser.add_argument("--no-closed-loop", action="store_true")
    parser.add_argument(
        "--no-embeddings",
        action="store_true",
        help="skip the embedding metrics (no sentence-transformers needed)",
    )
    parser.add_argument("--tau", type=float, default=0.9, help="threshold of cosine≥τ")
    parser.add_argument("--limit", type=int, help="the first N episodes only")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        help="cast the checkpoint's weights: bfloat16, float32 or auto (bfloat16 where the "
        "hardware runs it natively); default: as trained, float32",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    return _eval


def _eval(args: argparse.Namespace) -> int:
    try:
        cfg = EvalConfig(
            out=args.out,
            model=args.model,
            data=tuple(args.data),
            split=args.split,
            train=tuple(args.train),
            envs=tuple(args.env),
            apis=tuple(args.api),
            baselines=tuple(b for b in args.baselines.split(",") if b),
            llm=args.llm,
            llm_sample=args.llm_sample,
            closed_loop=not args.no_closed_loop,
            embeddings=not args.no_embeddings,
            tau=args.tau,
            limit=args.limit,
            batch_size=args.batch_size,
            dtype=args.dtype,
            seed=args.seed,
            progress=not args.no_progress,
        )
        report = evaluate(cfg)
    except (ValueError, FileNotFoundError, RecordError, DumpError) as exc:
        print(f"simworld eval: {exc}", file=sys.stderr)
        return 1
    results = report["results"]
    for name, metrics in results.items():
        cells = ", ".join(f"{m} {v['mean']:.3f}" for m, v in metrics.items())
        print(f"{name}: {cells}")
    print(f"report: {args.out}/report.md")
    return 0


__all__ = ["configure"]
