"""`simworld bench mdlm`: an AR and an MDLM checkpoint on the same held-out steps, in one
run: exact match, JSON-canonical match, embedding cosine, schema validity, and latency and
forward passes per observation, the MDLM at each K (denoising steps).

    simworld bench mdlm --ar out/mdlm/ar --mdlm out/mdlm/mdlm --limit 200 --ks 1 2 4 8 16

    from simworld.eval.mdlm_compare import CompareConfig, compare
    result = compare(CompareConfig(ar="out/ar", mdlm="out/mdlm", limit=20, embeddings=False))
    print(markdown_table(result))

Decisions:
- The steps: a seeded sample of `limit` steps of the bundled split (all when None), the
  same for every row; metrics are `eval.scoring.score`'s (`eval.metrics`' functions), each
  the mean over the steps it applies to.
- Latency: wall time of `predict` over the steps in batches of `batch_size` (1: one
  observation at a time, the serving case), divided by the steps; one warm-up call first.
- For the MDLM, the part of the latency spent encoding the prefix (`prefix_ms_per_obs`),
  which the AR model spends as its prefill: the two share that floor.
- Forward passes per observation: for the MDLM, what its engine counted (one prefix
  encoding plus one per denoising step run). For the AR model, 1 (prefill) + the tokens
  generated before <eos> (re-encoded from the output text: the own decode path runs one
  forward per generated token but the last), capped at its `max_new_tokens`.
- Parameters are counted once per tensor; training tokens are the checkpoints' recorded
  `tokens_seen` ("n/a" for a checkpoint trained before it was recorded).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from simworld.data.bundle import load_bundled
from simworld.eval.breakdown import summarize
from simworld.eval.embedding import load_encoder
from simworld.eval.predictors import ModelPredictor, StepRef
from simworld.eval.run import output_schemas
from simworld.eval.scoring import score
from simworld.worldmodel.checkpoint import read_meta
from simworld.worldmodel.engines.hf import TransformersEngine
from simworld.worldmodel.mdlm_sample import MDLMEngine
from simworld.worldmodel.tokenizer import encode
from simworld.worldmodel.world_model import TextWorldModel, default_checkpoint, load_world_model

COLUMNS = ("exact", "json_canonical", "cosine", "schema_valid", "readable")
Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class CompareConfig:
    """One `simworld bench mdlm` run."""

    ar: str  # an AR checkpoint directory, or "default"
    mdlm: str  # an MDLM checkpoint directory
    split: str = "test"
    limit: int | None = 200  # a seeded sample of this many steps (None: all)
    ks: tuple[int, ...] = (1, 2, 4, 8, 16)
    trim_ks: tuple[int, ...] = ()  # K values also run with the sampler's trimmed window
    batch_size: int = 1
    embeddings: bool = True
    seed: int = 0
    progress: bool = True
    threads: int = 1  # 2 threads on a shared 2-core machine spin against other processes

    def __post_init__(self) -> None:
        if not self.ks or min(self.ks) < 1:
            raise ValueError(f"ks must be denoising step counts >= 1, got {list(self.ks)}")
        if self.trim_ks and min(self.trim_ks) < 1:
            raise ValueError(f"trim ks must be step counts >= 1, got {list(self.trim_ks)}")
        if self.batch_size < 1 or (self.limit is not None and self.limit < 1):
            raise ValueError("batch_size and limit must be at least 1")


def _refs(cfg: CompareConfig) -> list[StepRef]:
    episodes = load_bundled(cfg.split)
    refs: list[StepRef] = [(ep, i) for ep in episodes for i in range(len(ep.steps))]
    if cfg.limit is None or cfg.limit >= len(refs):
        return refs
    keep = sorted(random.Random(cfg.seed).sample(range(len(refs)), cfg.limit))
    return [refs[i] for i in keep]


def _engines(ar: TextWorldModel, mdlm: TextWorldModel) -> tuple[TransformersEngine, MDLMEngine]:
    if not isinstance(ar.engine, TransformersEngine) or not isinstance(mdlm.engine, MDLMEngine):
        raise ValueError(
            f"--ar runs on {type(ar.engine).__name__} and --mdlm on "
            f"{type(mdlm.engine).__name__}: pass an AR and an MDLM checkpoint"
        )
    return ar.engine, mdlm.engine


def _size(engine: TransformersEngine | MDLMEngine, path: str) -> dict[str, Any]:
    params = {id(p): p.numel() for p in engine.model.parameters()}
    meta = read_meta(default_checkpoint() if path == "default" else Path(path))
    return {
        "kind": meta.kind,
        "parameters": sum(params.values()),
        "tokens_seen": meta.metrics.get("tokens_seen"),
        "train_minutes": meta.metrics.get("train_minutes"),
    }


@dataclass
class _Contender:
    name: str
    wm: TextWorldModel
    k: int | None  # the MDLM's denoising steps; None for the AR model
    trim: bool = False  # the MDLM sampler's trimmed window (`mdlm_sample`, step 5)
    seconds: float = 0.0
    prefix_seconds: float = 0.0  # the MDLM's prefix encoding, within `seconds`
    observations: int = 0
    passes: int = 0

    def passes_of(self, texts: Sequence[str]) -> int:
        """Forward passes of a predict call that produced `texts`: the MDLM engine counted
        its own; the AR model's are 1 + the generated tokens (see the module docstring)."""
        if isinstance(self.wm.engine, MDLMEngine):
            return sum(self.wm.engine.last_passes)
        assert isinstance(self.wm.engine, TransformersEngine)
        tok, cap = self.wm.engine.tokenizer, self.wm.generation.max_new_tokens - 1
        return sum(1 + min(cap, len(encode(tok, t))) for t in texts)


def _run_interleaved(
    contenders: list[_Contender], refs: Sequence[StepRef], batch: int, progress: bool
) -> dict[str, list[Any]]:
    """Predictions per contender; batch after batch, each contender in turn, so a load
    spike from other processes falls on all of them alike."""
    out: dict[str, list[Any]] = {c.name: [] for c in contenders}
    for c in contenders:  # warm-up: first-call costs are not latency
        _predict_timed(c, refs[:1], batch)
    for c in contenders:
        c.seconds = c.prefix_seconds = c.observations = c.passes = 0
    for lo in tqdm(range(0, len(refs), batch), desc="bench mdlm", disable=not progress):
        for c in contenders:
            out[c.name] += _predict_timed(c, refs[lo : lo + batch], batch)
    return out


def _predict_timed(c: _Contender, chunk: Sequence[StepRef], batch: int) -> list[Any]:
    engine = c.wm.engine
    if c.k is not None and isinstance(engine, MDLMEngine):
        engine.steps, engine.trim = c.k, c.trim
    prefix_before = engine.prefix_seconds if isinstance(engine, MDLMEngine) else 0.0
    started = time.perf_counter()
    predictions = ModelPredictor(c.wm, batch_size=batch, name=c.name).predict_steps(chunk)
    c.seconds += time.perf_counter() - started
    if isinstance(engine, MDLMEngine):
        c.prefix_seconds += engine.prefix_seconds - prefix_before
    made = [p for p in predictions if not any(q.startswith("over budget") for q in p.problems)]
    c.observations += len(made)
    if made:  # (a chunk all over budget never reached the engine)
        c.passes += c.passes_of([p.text for p in made])
    return predictions


def compare(cfg: CompareConfig) -> dict[str, Any]:
    """Score and time the AR model and the MDLM at each K on the same steps."""
    import torch

    torch.set_num_threads(cfg.threads)
    ar, mdlm = load_world_model(cfg.ar), load_world_model(cfg.mdlm)
    ar_engine, mdlm_engine = _engines(ar, mdlm)
    sizes = {"ar": _size(ar_engine, cfg.ar), "mdlm": _size(mdlm_engine, cfg.mdlm)}
    refs = _refs(cfg)
    episodes = list({id(ep): ep for ep, _ in refs}.values())
    schemas, _ = output_schemas(load_bundled("train"), episodes)
    encoder = load_encoder() if cfg.embeddings else None

    def scoring(subset: Sequence[StepRef], predictions: Sequence[Any]) -> dict[str, float]:
        rows = score(subset, predictions, schemas=schemas, encoder=encoder)
        return {
            c: round(summarize([r.metrics.get(c) for r in rows], samples=100).mean, 4)
            for c in COLUMNS
            if c != "cosine" or encoder is not None
        }

    contenders = [_Contender("AR", ar, None)]
    contenders += [_Contender(f"MDLM K={k}", mdlm, k) for k in cfg.ks]
    contenders += [_Contender(f"MDLM K={k} trim", mdlm, k, trim=True) for k in cfg.trim_ks]
    predictions = _run_interleaved(contenders, refs, cfg.batch_size, cfg.progress)
    rows = []
    for c in contenders:
        row: dict[str, Any] = {"name": c.name, **scoring(refs, predictions[c.name])}
        row["ms_per_obs"] = round(1000 * c.seconds / max(1, c.observations), 2)
        row["passes_per_obs"] = round(c.passes / max(1, c.observations), 2)
        if c.k is not None:
            row["prefix_ms_per_obs"] = round(1000 * c.prefix_seconds / max(1, c.observations), 2)
        print(f"  {json.dumps(row)}", file=sys.stderr)
        rows.append(row)
    envs = sorted({ep.env for ep, _ in refs})
    return {"config": asdict(cfg), "steps": len(refs), "envs": envs, "models": sizes, "rows": rows}


def markdown_table(result: dict[str, Any]) -> str:
    """The comparison as a Markdown table (one row per model and K), with the sizes."""
    timing = ("ms_per_obs", "prefix_ms_per_obs", "passes_per_obs")
    cols = [c for c in (*COLUMNS, *timing) if any(c in r for r in result["rows"])]
    lines = [
        "| model | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    lines += [
        f"| {r['name']} | " + " | ".join(str(r.get(c, "–")) for c in cols) + " |"
        for r in result["rows"]
    ]
    sizes = result["models"]
    lines.append("")
    lines += [
        f"{name}: {s['parameters']:,} parameters, {s['tokens_seen'] or 'n/a'} training tokens, "
        f"{s['train_minutes']} training minutes"
        for name, s in sizes.items()
    ]
    split, envs = result["config"]["split"], ", ".join(result["envs"])
    lines.append(f"{result['steps']} steps of the {split} split ({envs})")
    return "\n".join(lines)


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """Add `command`'s arguments to `parser` and return its handler."""
    if command != "bench mdlm":
        raise ValueError(f"unknown eval command {command!r}")
    parser.add_argument("--ar", required=True, help='an AR checkpoint directory, or "default"')
    parser.add_argument("--mdlm", required=True, help="an MDLM checkpoint directory")
    parser.add_argument("--split", default="test", help="the bundled split (default: test)")
    parser.add_argument(
        "--limit", type=int, default=200, help="a seeded sample of N steps (0: all)"
    )
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="MDLM K values")
    parser.add_argument(
        "--trim", type=int, nargs="*", default=[], help="K values also run with a trimmed window"
    )
    parser.add_argument("--batch-size", type=int, default=1, help="observations per predict call")
    parser.add_argument("--no-embeddings", action="store_true", help="no cosine column")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", help="also write the result as JSON to this file")
    return _run


def _run(args: argparse.Namespace) -> int:
    try:
        cfg = CompareConfig(
            ar=args.ar,
            mdlm=args.mdlm,
            split=args.split,
            limit=args.limit or None,
            ks=tuple(args.ks),
            trim_ks=tuple(args.trim),
            batch_size=args.batch_size,
            embeddings=not args.no_embeddings,
            threads=args.threads,
        )
        result = compare(cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"simworld bench mdlm: {exc}", file=sys.stderr)
        return 1
    print(markdown_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


__all__ = ["CompareConfig", "compare", "configure", "markdown_table"]
