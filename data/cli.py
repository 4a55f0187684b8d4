"""The data layer's `simworld` subcommands: record, convert, inspect (and bundle, for
maintainers). Thin parsers over the library; the front door (simworld/cli.py) asks
`configure` for each one.

    simworld record --env frozenlake --episodes 100 --seed 0 --out lake.jsonl.gz
    simworld convert lake.jsonl.gz lake.openai.jsonl --to openai
    simworld inspect lake.openai.jsonl [--json]

Exit codes: 0 done; 1 the data was wrong (a bad record under --strict, an episode a format
cannot carry, an unreadable file); 2 a usage problem (an unknown format, an unavailable env).
Errors are one line on stderr, "simworld <command>: <what went wrong>", without a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from simworld.data.formats import (
    FORMATS,
    WRITABLE,
    DumpError,
    detect_format,
    iter_episodes,
    read_episodes,
    write_episodes,
)
from simworld.data.jsonio import BadRecord
from simworld.data.records import JSON, Episode

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler (which returns the exit
    code). Commands: record, convert, inspect, bundle."""
    setups = {
        "record": _record_args,
        "convert": _convert_args,
        "inspect": _inspect_args,
        "bundle": _bundle_args,
    }
    if command not in setups:
        raise ValueError(f"unknown data command {command!r}; known: {', '.join(setups)}")
    return setups[command](parser)


def _fail(command: str, message: object, code: int = 1) -> int:
    print(f"simworld {command}: {message}", file=sys.stderr)
    return code


# ---------------------------------------------------------------------------- record


def _episode_count(text: str) -> int | None:
    if text == "all":
        return None
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a positive count or 'all', got {text!r}")
    return count


def _env_option(text: str) -> tuple[str, JSON]:
    """KEY=VALUE, the value read as JSON when it is JSON (2, true, [4, 8]), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value: JSON = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _record_args(parser: argparse.ArgumentParser) -> Handler:
    from simworld.data.envs import ENV_NAMES

    parser.description = "Run a real environment and dump ground-truth episodes."
    parser.add_argument("--env", required=True, choices=ENV_NAMES, help="the real env to run")
    parser.add_argument(
        "--episodes",
        required=True,
        type=_episode_count,
        metavar="N",
        help="how many episodes ('all': every episode the env defines, where finite)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed (default 0)")
    parser.add_argument(
        "--out", required=True, type=Path, help="the dump to write (.gz, .xz: compressed)"
    )
    parser.add_argument("--format", choices=WRITABLE, default="simworld", help="dump format")
    parser.add_argument(
        "--option",
        action="append",
        type=_env_option,
        default=[],
        metavar="KEY=VALUE",
        help="an env option, repeatable (bfcl: categories=base,long_context off_policy=2; "
        "frozenlake: sizes=[4] is_slippery=false; textworld: world_size=3; "
        "search: split=test top_k=1; datascience: tables=iris max_seconds=6)",
    )
    return _record


def _record(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from simworld.data.envs import EnvUnavailable, load_env

    written = 0

    def counted(episodes: Iterable[Episode]) -> Iterator[Episode]:
        nonlocal written
        for episode in episodes:
            yield episode
            written += 1

    try:
        try:
            env = load_env(args.env, **dict(args.option))
        except TypeError as exc:  # an option the env's constructor does not take
            return _fail("record", f"bad --option for the {args.env} env: {exc}", 2)
        episodes = tqdm(
            env.record(args.episodes, args.seed),
            total=args.episodes,
            desc=f"record {args.env}",
            unit="episode",
            file=sys.stderr,
        )
        write_episodes(counted(episodes), args.out, args.format)
    except EnvUnavailable as exc:
        return _fail("record", exc, 2)
    except ImportError as exc:  # an env module that is not there (yet)
        return _fail("record", f"the {args.env} env cannot be loaded: {exc}", 2)
    except (ValueError, OSError) as exc:
        kept = f"; {args.out} holds the {written} episodes before it" if written else ""
        return _fail("record", f"{exc}{kept}")
    print(f"wrote {written} {args.env} episodes to {args.out} ({args.format})")
    return 0


# ---------------------------------------------------------------------------- convert


def _convert_args(parser: argparse.ArgumentParser) -> Handler:
    parser.description = "Convert a dump from one format to another."
    parser.add_argument("input", type=Path, help="the dump to read (.gz and JSON arrays too)")
    parser.add_argument("output", type=Path, help="the dump to write (.gz, .xz: compressed)")
    parser.add_argument("--to", required=True, choices=WRITABLE, help="the output format")
    parser.add_argument("--format", choices=FORMATS, help="the input format (default: detect)")
    parser.add_argument("--strict", action="store_true", help="stop at the first bad record")
    return _convert


def _convert(args: argparse.Namespace) -> int:
    if args.input.resolve() == args.output.resolve():
        return _fail("convert", "the output would overwrite the input; write elsewhere", 2)
    bad: list[BadRecord] = []
    try:
        source = args.format or detect_format(args.input)  # before the output is touched
    except (DumpError, OSError) as exc:
        return _fail("convert", exc)

    def episodes() -> Iterator[Episode]:
        for item in iter_episodes(args.input, source, args.strict):
            if isinstance(item, BadRecord):
                bad.append(item)
            else:
                yield item

    try:
        written = write_episodes(episodes(), args.output, args.to)
    except (DumpError, ValueError, OSError) as exc:
        args.output.unlink(missing_ok=True)  # a half-written output is not left to be read
        return _fail("convert", exc)
    print(f"wrote {written} episodes to {args.output} ({source} -> {args.to})")
    if bad:
        print(f"skipped {len(bad)} bad records:", file=sys.stderr)
        for record in bad:
            print(f"  {record}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- inspect


def _inspect_args(parser: argparse.ArgumentParser) -> Handler:
    parser.description = "Summarize a dump: episodes, steps, tools, errors, bad records."
    parser.add_argument("file", type=Path, help="the dump to read")
    parser.add_argument("--format", choices=FORMATS, help="its format (default: detect)")
    parser.add_argument("--strict", action="store_true", help="fail at the first bad record")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return _inspect


def _inspect(args: argparse.Namespace) -> int:
    from simworld.data.inspect import render_summary, summarize

    try:
        summary = summarize(read_episodes(args.file, args.format, args.strict))
    except (DumpError, OSError) as exc:
        return _fail("inspect", exc)
    print(json.dumps(summary, indent=2) if args.json else render_summary(summary))
    return 0


# ---------------------------------------------------------------------------- bundle


def _bundle_args(parser: argparse.ArgumentParser) -> Handler:
    parser.description = "Rebuild the bundled dataset (maintainers): record it, split it."
    parser.add_argument("--out", required=True, type=Path, help="the directory to write")
    return _bundle


def _bundle(args: argparse.Namespace) -> int:
    from simworld.data.bundle import build_bundle
    from simworld.data.envs import EnvUnavailable

    try:
        built = build_bundle(args.out)
    except EnvUnavailable as exc:
        return _fail("bundle", exc, 2)
    except (ValueError, OSError) as exc:
        return _fail("bundle", exc)
    print(json.dumps(built["counts"], indent=2, sort_keys=True))
    return 0


__all__ = ["configure"]
