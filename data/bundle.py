"""The bundled dataset: real BFCL and FrozenLake episodes shipped inside the package.

Load it:

    from simworld.data.bundle import load_bundled, exclude_apis
    train = load_bundled("train")                      # every env
    test = load_bundled("test", env="bfcl")
    no_travel = exclude_apis(train, ["TravelAPI"])     # the held-out-API experiment

Rebuild it (maintainers; the manifest records this command and the counts):

    simworld bundle --out data/bundled

Splits are by scenario (`Task.id`), never by episode: BFCL's categories replay the same
scenarios (base_12, long_context_12 and the off-policy variants of both are one scenario),
so an episode split would leak. Splits are stratified by env and API group (see
`assign_splits`), so every API appears in every split.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from simworld.data.envs import load_env
from simworld.data.formats import read_episodes, write_episodes
from simworld.data.records import SCHEMA_VERSION, Episode, ToolResultsObservation

SPLITS = ("train", "val", "test")
BUILD_COMMAND = "simworld bundle --out data/bundled"


@dataclass(frozen=True)
class BundleConfig:
    """What goes into the bundle. The defaults are the shipped dataset."""

    seed: int = 0
    bfcl_categories: tuple[str, ...] = ("base", "long_context")
    bfcl_off_policy: int = 1  # off-policy variant episodes per ground-truth episode
    frozenlake_episodes: int = 400
    split_percent: tuple[int, int, int] = (80, 10, 10)  # train / val / test, by scenario
    envs: tuple[str, ...] = field(default=("bfcl", "frozenlake"))

    def __post_init__(self) -> None:
        if sum(self.split_percent) != 100 or min(self.split_percent) < 0:
            raise ValueError(
                f"split_percent must be 3 non-negative ints summing to 100, "
                f"got {self.split_percent}"
            )


def assign_splits(
    episodes: Iterable[Episode], percent: tuple[int, int, int] = (80, 10, 10), seed: int = 0
) -> dict[str, str]:
    """Map every scenario id (`Task.id`) to "train", "val" or "test".

    Stratified systematic sampling: scenarios are ordered by (env, the APIs they involve, a
    seeded hash of the id) and dealt out in a repeating pattern (8 train, 1 val, 1 test for
    80/10/10), so each env and each API group lands in every split in proportion; a pure
    hash split of BFCL's 200 scenarios left the test split without a single file-system
    scenario. Every episode of a scenario follows its scenario.
    """
    strata: dict[str, tuple[str, tuple[str, ...]]] = {}
    for ep in episodes:
        strata.setdefault(ep.task.id, (ep.env, tuple(sorted(ep.task.apis))))

    def order(scenario: str) -> tuple[str, tuple[str, ...], str]:
        digest = hashlib.sha256(f"{seed}:{scenario}".encode()).hexdigest()
        return (*strata[scenario], digest)

    step = math.gcd(*percent)
    pattern = [name for name, p in zip(SPLITS, percent, strict=True) for _ in range(p // step)]
    ordered = sorted(strata, key=order)
    return {scenario: pattern[i % len(pattern)] for i, scenario in enumerate(ordered)}


def _record(cfg: BundleConfig) -> Iterator[Episode]:
    for name in cfg.envs:
        if name == "bfcl":
            env = load_env("bfcl", categories=cfg.bfcl_categories, off_policy=cfg.bfcl_off_policy)
            yield from env.record(None, cfg.seed)
        elif name == "frozenlake":
            yield from load_env("frozenlake").record(cfg.frozenlake_episodes, cfg.seed)
        else:
            raise ValueError(f"the bundle has no recipe for env {name!r}")


def _errors(episode: Episode) -> int:
    return sum(
        r.is_error
        for s in episode.steps
        if isinstance(s.observation, ToolResultsObservation)
        for r in s.observation.results
    )


def _counts(episodes: list[Episode]) -> dict[str, int]:
    return {
        "episodes": len(episodes),
        "scenarios": len({ep.task.id for ep in episodes}),
        "steps": sum(len(ep.steps) for ep in episodes),
        "error_observations": sum(_errors(ep) for ep in episodes),
    }


def build_bundle(out_dir: Path, cfg: BundleConfig | None = None) -> dict[str, Any]:
    """Record the bundle into `out_dir` (one xz-compressed transition JSONL per split plus
    manifest.json) and return the manifest."""
    cfg = cfg or BundleConfig()
    out_dir.mkdir(parents=True, exist_ok=True)
    recorded = list(_record(cfg))
    splits = assign_splits(recorded, cfg.split_percent, cfg.seed)
    by_split: dict[str, list[Episode]] = {s: [] for s in SPLITS}
    for episode in recorded:
        by_split[splits[episode.task.id]].append(episode)
    files: dict[str, str] = {}
    counts: dict[str, dict[str, dict[str, int]]] = {}
    apis: dict[str, dict[str, dict[str, int]]] = {}
    for split, episodes in by_split.items():
        path = out_dir / f"{split}.jsonl.xz"
        write_episodes(episodes, path, format="simworld")
        files[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
        for env in sorted({ep.env for ep in episodes}):
            mine = [ep for ep in episodes if ep.env == env]
            counts.setdefault(env, {})[split] = _counts(mine)
            used = Counter(api for ep in mine for api in ep.task.apis)
            if used:
                apis.setdefault(env, {})[split] = dict(sorted(used.items()))
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "command": BUILD_COMMAND,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(cfg).items()},
        "versions": {name: load_env(name).version for name in cfg.envs},
        "counts": counts,
        "episodes_per_api": apis,
        "files": files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (out_dir / "manifest.json").write_text(text)
    return manifest


def bundled_dir() -> Path:
    """Where the installed package keeps the bundle."""
    return Path(str(resources.files("simworld.data") / "bundled"))


def manifest() -> dict[str, Any]:
    """The bundle's manifest: counts per env and split, the command that made it."""
    loaded: dict[str, Any] = json.loads((bundled_dir() / "manifest.json").read_text())
    return loaded


def load_bundled(split: str, env: str | None = None) -> list[Episode]:
    """The bundled episodes of one split (optionally one env). Raises on a bad record: the
    bundle is ours and must be clean."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    result = read_episodes(bundled_dir() / f"{split}.jsonl.xz", format="simworld", strict=True)
    return [ep for ep in result.episodes if env is None or ep.env == env]


def exclude_apis(episodes: Iterable[Episode], apis: Iterable[str]) -> list[Episode]:
    """Drop every episode whose task involves any of `apis` (e.g. "TravelAPI")."""
    banned = set(apis)
    return [ep for ep in episodes if not banned.intersection(ep.task.apis)]


__all__ = [
    "SPLITS",
    "BundleConfig",
    "assign_splits",
    "build_bundle",
    "bundled_dir",
    "exclude_apis",
    "load_bundled",
    "manifest",
]
