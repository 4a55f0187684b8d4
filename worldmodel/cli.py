"""The world-model layer's `simworld` subcommand: `simworld bench decode` (the front door's
`simworld.bench` dispatches `bench WHAT` to the layer that owns it).

    simworld bench decode                      # the shipped default on bundled test prompts
    simworld bench decode --model out/ckpt     # any AR checkpoint
    simworld bench decode --model random       # a random 5.3M Llama on synthetic prompts
    simworld bench decode --dtype bfloat16     # both paths with bfloat16 weights

Prints ms per observation, new tokens/s and the fraction of the machine's bound, for HF
`generate` and the own decode path at batch 1, 8 and 32 (see `simworld.worldmodel.bench`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from simworld.worldmodel.engines.base import DTYPE_CHOICES

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "bench decode":
        raise ValueError(f"unknown world-model command {command!r}")
    parser.add_argument("--model", default="default", help="a checkpoint, default, or random")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed calls per row; the fastest is reported"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="float32",
        help="the checkpoint's weights on both paths (not for --model random)",
    )
    return _decode


def _decode(args: argparse.Namespace) -> int:
    import torch

    from simworld.worldmodel import bench

    torch.set_num_threads(args.threads)
    if args.repeats < 1:
        print(f"simworld bench decode: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    if args.model == "random":
        if args.dtype != "float32":
            print("simworld bench decode: --dtype applies to checkpoints only", file=sys.stderr)
            return 2
        bench.main()
        return 0
    from simworld.data.bundle import load_bundled
    from simworld.worldmodel.render import render_prompt
    from simworld.worldmodel.world_model import load_world_model

    try:
        wm = load_world_model(args.model, dtype=args.dtype)
    except (FileNotFoundError, ValueError) as exc:
        print(f"simworld bench decode: {exc}", file=sys.stderr)
        return 1
    need = max(args.batch_sizes) * 2 + 8
    prompts: list[str] = []
    for ep in load_bundled("test", env="bfcl"):
        prompts += [render_prompt(wm.context(ep, i)) for i in range(len(ep.steps))]
        if len(prompts) >= need:
            break
    engine = wm.engine
    bench.decode_benchmark(
        engine.model,  # type: ignore[union-attr]
        engine.tokenizer,  # type: ignore[union-attr]
        prompts[:need],
        batch_sizes=args.batch_sizes,
        new_tokens=args.new_tokens,
        repeats=args.repeats,
        label="" if args.dtype == "float32" else f"-{args.dtype}",
    )
    return 0


__all__ = ["configure"]
