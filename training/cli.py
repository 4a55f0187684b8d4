"""The training layer's `simworld` subcommand: `simworld train sft ...`.

    simworld train sft --preset tiny --env frozenlake --out out/tiny --minutes 1
    simworld train sft --preset default --out out/default              # the shipped default
    simworld train sft --preset default --exclude-api TravelAPI --out out/no-travel

A thin parser over `simworld.training.sft_run.run_sft`. Errors are one line on stderr:
exit 2 for a usage problem, 1 for bad data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from simworld.training.sft_run import RECIPES, SFTRun, run_sft

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "train":
        raise ValueError(f"unknown training command {command!r}")
    parser.description = "Train a world model."
    recipes = parser.add_subparsers(dest="recipe", required=True, metavar="RECIPE")
    sft = recipes.add_parser("sft", help="supervised fine-tuning of the AR world model")
    sft.add_argument("--preset", choices=sorted(RECIPES), default="default")
    sft.add_argument("--out", required=True, help="the checkpoint directory to write")
    sft.add_argument(
        "--data",
        nargs="+",
        default=[],
        metavar="FILE",
        help="training dumps in any supported format (default: bundled train)",
    )
    sft.add_argument(
        "--val-data",
        nargs="+",
        default=[],
        metavar="FILE",
        help="validation dumps (default: the bundled val split)",
    )
    sft.add_argument("--env", action="append", default=[], help="keep only this env")
    sft.add_argument(
        "--exclude-api",
        action="append",
        default=[],
        metavar="NAME",
        help="drop every training scenario that involves this API (e.g. TravelAPI)",
    )
    sft.add_argument("--minutes", type=float, help="stop (and save) after this many minutes")
    sft.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    sft.add_argument("--seed", type=int, default=0)
    sft.add_argument("--limit", type=int, help="train on the first N examples only")
    sft.add_argument("--base", help="a pretrained base: a local HF directory or smollm2-gguf")
    sft.add_argument("--lora-r", type=int, default=0, help="LoRA rank on a pretrained base")
    return _sft


def _sft(args: argparse.Namespace) -> int:
    try:
        run = SFTRun(
            out=args.out,
            preset=args.preset,
            data=tuple(args.data),
            val_data=tuple(args.val_data),
            envs=tuple(args.env),
            exclude_apis=tuple(args.exclude_api),
            minutes=args.minutes,
            resume=args.resume,
            seed=args.seed,
            limit=args.limit,
            base=args.base,
            lora_r=args.lora_r,
        )
        metrics = run_sft(run)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simworld train sft: {exc}", file=sys.stderr)
        return 1
    final = {k: v for k, v in metrics.items() if k not in ("curve", "train_losses")}
    print(json.dumps(final, indent=2, sort_keys=True, default=str))
    return 0


__all__ = ["configure"]
