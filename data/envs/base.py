"""The recorder interface every real (ground-truth) environment implements.

A real env turns a seed into episodes deterministically: the same `(episodes, seed)` and
options give the same records, byte for byte once written (no wall-clock values).

    from simworld.data.envs import load_env
    env = load_env("frozenlake")
    for episode in env.record(episodes=3, seed=0): ...
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from simworld.data.records import Episode, VolatileField


class RealEnv(Protocol):
    """A real environment that records ground-truth episodes."""

    name: str
    version: str  # pins the backend, e.g. "bfcl-eval==2026.3.23"
    volatile: list[VolatileField]  # values from a random generator or a clock

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes, deterministically from `seed`. None asks for every
        episode the env's options define, where that set is finite (BFCL's scenarios)."""
        ...


class EnvUnavailable(RuntimeError):
    """The env's backend is not installed; the message says what to install."""
