"""BfclEnv: the Berkeley Function Calling Leaderboard's multi-turn backends as a real env.

    from simworld.data.envs import load_env
    env = load_env("bfcl", categories=("base", "long_context"), off_policy=1)
    episodes = list(env.record(episodes=None, seed=0))   # every episode the options define
    some = list(env.record(episodes=50, seed=0))         # 50 of them, chosen by the seed

Options:
- `categories`: any of "base", "long_context", "miss_func", "miss_param" (a tuple, or one
  comma-separated string); each has 200 entries.
- `off_policy`: how many off-policy variants to record per ground-truth episode (see
  `offpolicy`); 0 records the ground truth alone.
- `off_policy_calls`: how many off-policy calls a variant inserts. With the default 3,
  base + long_context at off_policy=1 gives 800 episodes, 5,842 steps, 12.8 % of them
  error observations (one call per variant gave 5.9 %).

`record(None, seed)` yields, per category and entry in file order, the ground-truth episode
and then its variants; `record(n, seed)` shuffles that list with `random.Random(seed)` and
yields the first n. Both are deterministic: same options and seed, same records. The
layout of an episode is described in `recorder`.

bfcl-eval must be installed without its dependencies (they pull torch, faiss, tree_sitter
and pin numpy), plus mpmath for MathAPI:
`pip install --no-deps bfcl-eval==2026.3.23 mpmath==1.3.0`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import random
from collections.abc import Iterator, Sequence

from simworld.data.envs.base import EnvUnavailable
from simworld.data.records import Episode, VolatileField

BFCL_VERSION = "2026.3.23"
CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
_INSTALL = f"pip install --no-deps bfcl-eval=={BFCL_VERSION} mpmath==1.3.0"


class BfclEnv:
    """Records BFCL multi-turn episodes; see the module docstring."""

    def __init__(
        self,
        categories: Sequence[str] | str = ("base",),
        off_policy: int = 1,
        off_policy_calls: int = 3,
    ) -> None:
        names = tuple(categories.split(",")) if isinstance(categories, str) else tuple(categories)
        unknown = [name for name in names if name not in CATEGORIES]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(
                f"categories must be distinct names among {', '.join(CATEGORIES)}; got {names}"
            )
        if off_policy < 0:
            raise ValueError(f"off_policy must be >= 0, got {off_policy}")
        if off_policy_calls < 1:
            raise ValueError(f"off_policy_calls must be >= 1, got {off_policy_calls}")
        check_installed()
        from simworld.data.envs.bfcl.volatile import volatile_fields

        self.categories = names
        self.off_policy = off_policy
        self.off_policy_calls = off_policy_calls
        self.name = "bfcl"
        self.version = f"bfcl-eval=={BFCL_VERSION}"
        self.volatile: list[VolatileField] = volatile_fields()

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes chosen by `seed`, or all of them in order when None."""
        # Imported here, after the install check, so that a missing bfcl-eval is reported as
        # EnvUnavailable rather than as an ImportError from deep inside a backend module.
        from simworld.data.envs.bfcl.recorder import Recorder

        recorder = Recorder(self.categories, self.off_policy, self.off_policy_calls)
        keys = recorder.keys()
        if episodes is not None:
            if not 0 <= episodes <= len(keys):
                raise ValueError(
                    f"bfcl has {len(keys)} episodes for categories {self.categories} with "
                    f"off_policy={self.off_policy}; ask for 0..{len(keys)} or None for all"
                )
            random.Random(seed).shuffle(keys)
            keys = keys[:episodes]
        for key in keys:
            yield recorder.episode(key, seed)


def check_installed() -> None:
    """Raise EnvUnavailable, saying what to install, unless bfcl-eval (the pinned version)
    and mpmath are installed."""
    for module in ("bfcl_eval", "mpmath"):
        if importlib.util.find_spec(module) is None:
            raise EnvUnavailable(f"the bfcl env needs {module}: {_INSTALL}")
    installed = importlib.metadata.version("bfcl-eval")
    if installed != BFCL_VERSION:
        raise EnvUnavailable(
            f"the bfcl env is pinned to bfcl-eval {BFCL_VERSION} (its data changes between "
            f"releases), found {installed}: {_INSTALL}"
        )


__all__ = ["BFCL_VERSION", "CATEGORIES", "BfclEnv", "check_installed"]
