"""The training layer's `simworld` subcommand: `simworld train sft ...`.

    simworld train sft --preset tiny --env frozenlake --out out/tiny --minutes 1
    simworld train sft --preset default --out out/default              # the shipped default
    simworld train sft --preset default --exclude-api TravelAPI --out out/no-travel
    simworld train grpo --init default --out out/grpo --minutes 30    # RL on sim-to-real rewards
    simworld train mdlm --preset default --out out/mdlm --tokens 1000000  # masked diffusion

Thin parsers over `simworld.training.sft_run.run_sft`, `.grpo_run.run_grpo` and
`.mdlm_run.run_mdlm`. Errors are
one line on stderr: exit 2 for a usage problem, 1 for bad data.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from simworld.training.grpo import GRPO_PRESETS
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
    _add_data_arguments(sft)
    sft.add_argument("--minutes", type=float, help="stop (and save) after this many minutes")
    sft.add_argument("--tokens", type=int, help="end the schedule after N real training tokens")
    sft.add_argument(
        "--epochs", type=int, help="passes over the training pairs (default: the preset's)"
    )
    sft.add_argument("--threads", type=int, help="torch CPU threads (default: the preset's)")
    sft.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    sft.add_argument("--seed", type=int, default=0)
    sft.add_argument("--limit", type=int, help="train on the first N examples only")
    sft.add_argument("--base", help="a pretrained base: a local HF directory or smollm2-gguf")
    sft.add_argument("--lora-r", type=int, default=0, help="LoRA rank on a pretrained base")
    sft.add_argument(
        "--init",
        help='continue this checkpoint ("default": the shipped one) with its own recipe, at '
        "a constant learning rate",
    )
    sft.add_argument("--lr", type=float, help="with --init: the constant rate (default: its last)")
    sft.add_argument(
        "--example-tokens",
        type=int,
        help="budget of the similar-recorded-step block (default: the preset's; 0: none)",
    )
    sft.add_argument(
        "--copy-augment",
        type=int,
        metavar="N",
        help="N renamed variants of each tool-call pair, names an observation copies from "
        "its context made fresh (default: the preset's; 0: none)",
    )
    sft.add_argument(
        "--split-digits",
        nargs="?",
        const="all",
        default=None,
        choices=["all", "decimals", "none"],
        help="the trained tokenizer makes every digit its own token (all, the default when "
        "the flag is given: for numeric targets, e.g. the datascience metrics), only the "
        "digits of decimal literals (decimals: ids and counts stay merged; the default "
        "preset's), or none; from scratch only",
    )
    sft.add_argument(
        "--max-target-tokens",
        type=int,
        metavar="N",
        help="the longest target learned, in tokens; longer ones are counted and left out "
        "(default: the preset's, 192 for default)",
    )
    sft.add_argument(
        "--state-focus",
        action="store_true",
        help="render states with the action-focused view: what the action's arguments name "
        "is kept first and shown in more detail, numbers and flags before other entries "
        "(the tiny preset's; the default preset keeps the plain view)",
    )
    _add_example_arguments(sft)
    sft.add_argument(
        "--copy-next",
        action="store_true",
        help="the copy head points at the token after the attended position (match the "
        "token just written, take what followed it); from scratch only, off in both presets",
    )
    sft.add_argument(
        "--bf16",
        action="store_true",
        help="bf16 autocast of the forward pass (weights, optimizer, loss stay fp32); only on "
        "CPUs with bf16 instructions (AVX512-BF16, AMX), elsewhere it stays off and says so",
    )
    _configure_grpo(recipes)
    _configure_mdlm(recipes)
    return _recipe


def _add_example_arguments(sft: argparse.ArgumentParser) -> None:
    """How many recorded steps the example block shows, and what the model leaves out."""
    sft.add_argument(
        "--examples",
        type=int,
        metavar="K",
        help="with --example-tokens: show the K nearest recorded steps, nearest first, as "
        "fit the block (default 1)",
    )
    sft.add_argument(
        "--drop-result-field",
        action="append",
        default=[],
        metavar="KEY",
        help="leave this key out of the JSON tool results the model learns to write (targets "
        "and example blocks; repeatable). For search: --drop-result-field text, and grounding "
        "serves each passage the model names from the corpus",
    )
    sft.add_argument(
        "--distinct-examples",
        action="store_true",
        help="with --example-tokens: a training step's example is never a recording of its "
        "own call (same tool and arguments) from another scenario, as a held-out call that "
        "no recording repeats sees none",
    )


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    """What both recipes train and validate on: dumps (default: the bundled splits), env
    and API filters."""
    parser.add_argument(
        "--data",
        nargs="+",
        default=[],
        metavar="FILE",
        help="training dumps in any supported format (default: bundled train)",
    )
    parser.add_argument(
        "--val-data",
        nargs="+",
        default=[],
        metavar="FILE",
        help="validation dumps (default: the bundled val split)",
    )
    parser.add_argument("--env", action="append", default=[], help="keep only this env")
    parser.add_argument(
        "--exclude-api",
        action="append",
        default=[],
        metavar="NAME",
        help="drop every training scenario that involves this API (e.g. TravelAPI)",
    )


def _data_fields(args: argparse.Namespace) -> dict[str, tuple[str, ...]]:
    """The run fields `_add_data_arguments` filled, as every recipe's run takes them."""
    return {
        "data": tuple(args.data),
        "val_data": tuple(args.val_data),
        "envs": tuple(args.env),
        "exclude_apis": tuple(args.exclude_api),
    }


def _recipe(args: argparse.Namespace) -> int:
    handlers = {"grpo": _grpo, "mdlm": _mdlm, "sft": _sft}
    return handlers[args.recipe](args)


def _configure_mdlm(recipes: Any) -> None:
    mdlm = recipes.add_parser("mdlm", help="masked-diffusion (MDLM) world model")
    mdlm.add_argument("--preset", choices=sorted(RECIPES), default="default")
    mdlm.add_argument("--out", required=True, help="the checkpoint directory to write")
    _add_data_arguments(mdlm)
    mdlm.add_argument("--minutes", type=float, help="stop (and save) after this many minutes")
    mdlm.add_argument("--tokens", type=int, help="end the schedule after N real training tokens")
    mdlm.add_argument("--threads", type=int, help="torch CPU threads (default: the preset's)")
    mdlm.add_argument("--seed", type=int, default=0)
    mdlm.add_argument("--limit", type=int, help="train on the first N examples only")
    mdlm.add_argument("--steps", type=int, help="K: denoising steps for val exact match")
    mdlm.add_argument(
        "--loss",
        choices=("elbo", "masked-mean"),
        default="elbo",
        help="elbo: 1/t-weighted (default); masked-mean: mean CE over masked positions",
    )
    mdlm.add_argument(
        "--tokenizer", help='reuse the tokenizer of this checkpoint ("default": the shipped one)'
    )
    mdlm.add_argument(
        "--copies", type=int, help="noised target copies per encoded prefix (default: preset's)"
    )
    mdlm.add_argument(
        "--init",
        help='adapt this AR checkpoint ("default": the shipped one): its weights and tokenizer',
    )
    mdlm.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")


def _mdlm(args: argparse.Namespace) -> int:
    from simworld.training.mdlm_run import MDLMRun, run_mdlm

    try:
        run = MDLMRun(
            out=args.out,
            preset=args.preset,
            **_data_fields(args),
            minutes=args.minutes,
            tokens=args.tokens,
            threads=args.threads,
            seed=args.seed,
            limit=args.limit,
            steps=args.steps,
            elbo=args.loss == "elbo",
            tokenizer=args.tokenizer,
            copies=args.copies,
            init=args.init,
            lr=args.lr,
        )
        metrics = run_mdlm(run)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simworld train mdlm: {exc}", file=sys.stderr)
        return 1
    final = {k: v for k, v in metrics.items() if k not in ("curve", "train_losses")}
    print(json.dumps(final, indent=2, sort_keys=True, default=str))
    return 0


def _configure_grpo(recipes: Any) -> None:
    grpo = recipes.add_parser("grpo", help="RL of a world model on sim-to-real rewards (GRPO)")
    grpo.add_argument("--init", default="default", help='the checkpoint to start from ("default")')
    grpo.add_argument("--out", required=True, help="the checkpoint directory to write")
    grpo.add_argument("--preset", choices=sorted(GRPO_PRESETS), default="default")
    _add_data_arguments(grpo)
    grpo.add_argument("--minutes", type=float, help="time budget (default preset: 30)")
    grpo.add_argument("--max-steps", type=int, help="stop after this many updates")
    grpo.add_argument("--threads", type=int, help="torch CPU threads (default: the preset's)")
    grpo.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    grpo.add_argument("--seed", type=int, default=0)
    grpo.add_argument(
        "--pool",
        type=int,
        default=4000,
        help="draw contexts from a seeded sample of N train steps (0: all; default 4000)",
    )
    grpo.add_argument("--limit", type=int, help="train on the first N transitions only")
    grpo.add_argument("--group-size", type=int, help="G: predictions sampled per context")
    grpo.add_argument("--contexts-per-step", type=int, help="B: contexts per update")
    grpo.add_argument("--lr", type=float)
    grpo.add_argument("--kl", type=float, help="weight of the KL penalty to the start")
    grpo.add_argument(
        "--reward",
        action="append",
        default=[],
        metavar="NAME=W",
        help="a weighted reward term (repeat; replaces the defaults): cosine_tau, "
        "cosine, json_canonical, field_f1, state_match, schema_valid",
    )
    grpo.add_argument("--tau", type=float, help="cosine threshold (default: chosen on val)")
    grpo.add_argument(
        "--no-embeddings", action="store_true", help="no sentence encoder: no cosine terms, no τ"
    )


def _grpo(args: argparse.Namespace) -> int:
    from simworld.training.grpo_run import GRPORun, run_grpo

    try:
        run = GRPORun(
            out=args.out,
            init=args.init,
            preset=args.preset,
            **_data_fields(args),
            minutes=args.minutes,
            max_steps=args.max_steps,
            threads=args.threads,
            resume=args.resume,
            seed=args.seed,
            pool=args.pool or None,
            limit=args.limit,
            group_size=args.group_size,
            contexts_per_step=args.contexts_per_step,
            lr=args.lr,
            kl_beta=args.kl,
            rewards=tuple(args.reward),
            tau=args.tau,
            embeddings=not args.no_embeddings,
        )
        metrics = run_grpo(run)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simworld train grpo: {exc}", file=sys.stderr)
        return 1
    final = {k: v for k, v in metrics.items() if k not in ("curve", "log")}
    print(json.dumps(final, indent=2, sort_keys=True, default=str))
    return 0


def _sft(args: argparse.Namespace) -> int:
    try:
        run = SFTRun(
            out=args.out,
            preset=args.preset,
            **_data_fields(args),
            minutes=args.minutes,
            tokens=args.tokens,
            epochs=args.epochs,
            threads=args.threads,
            resume=args.resume,
            seed=args.seed,
            limit=args.limit,
            base=args.base,
            lora_r=args.lora_r,
            example_tokens=args.example_tokens,
            example_count=args.examples,
            copy_augment=args.copy_augment,
            split_digits="" if args.split_digits == "none" else args.split_digits,
            max_target_tokens=args.max_target_tokens,
            state_focus=True if args.state_focus else None,
            copy_next=args.copy_next,
            drop_result_fields=tuple(args.drop_result_field),
            distinct_examples=args.distinct_examples,
            bf16=args.bf16,
            init=args.init,
            lr=args.lr,
        )
        metrics = run_sft(run)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simworld train sft: {exc}", file=sys.stderr)
        return 1
    final = {k: v for k, v in metrics.items() if k not in ("curve", "train_losses")}
    print(json.dumps(final, indent=2, sort_keys=True, default=str))
    return 0


__all__ = ["configure"]
