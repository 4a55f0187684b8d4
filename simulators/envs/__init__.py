"""The simulated envs by name: each is built from data (the bundled episodes, or a few
lines for `mock`) once per process.

    from simworld.simulators.envs import SIM_ENVS, load_sim_env
    env = load_sim_env("bfcl")                  # SIM_ENVS == ("bfcl", "frozenlake", "mock")
    task = env.task_for(seed=7)

`bfcl` (the BFCL multi-turn scenarios), `frozenlake` (the bundled maps, with an exact real
backend) and `mock` (a counter for tests); each module's docstring lists its decisions.
`textworld` is not built yet. Importing this package imports neither torch, gymnasium nor
bfcl-eval.
"""

from __future__ import annotations

from collections.abc import Callable

from simworld.simulators.env import SimEnv
from simworld.simulators.envs.bfcl import bfcl_env
from simworld.simulators.envs.frozenlake import FrozenLakeReal, frozenlake_env
from simworld.simulators.envs.mock import MockReal, mock_env

_BUILDERS: dict[str, Callable[[], SimEnv]] = {
    "bfcl": bfcl_env,
    "frozenlake": frozenlake_env,
    "mock": mock_env,
}
SIM_ENVS = tuple(_BUILDERS)


def load_sim_env(name: str) -> SimEnv:
    """The simulated env called `name` (one of SIM_ENVS), built once per process."""
    if name not in _BUILDERS:
        known = ", ".join(SIM_ENVS)
        if name == "textworld":
            raise ValueError(f"the textworld simulated env is not built yet; choose from {known}")
        raise ValueError(f"unknown simulated env {name!r}; choose from {known}")
    return _BUILDERS[name]()


__all__ = ["SIM_ENVS", "FrozenLakeReal", "MockReal", "load_sim_env"]
