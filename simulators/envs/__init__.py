"""The simulated envs by name: each is built from data (the bundled episodes, generated
games, or a few lines for `mock`) once per process.

    from simworld.simulators.envs import SIM_ENVS, load_sim_env
    env = load_sim_env("bfcl")          # SIM_ENVS == ("bfcl", "frozenlake", "mock", "textworld")
    task = env.task_for(seed=7)

`bfcl` (the BFCL multi-turn scenarios, with BFCL's own backends as the real one when
bfcl-eval is installed), `frozenlake` (the bundled maps, with an exact real backend),
`mock` (a counter for tests) and, when the optional `textworld` package is installed,
`textworld` (generated games played by the real game engine); each module's docstring
lists its decisions. Importing this package imports neither torch, gymnasium, bfcl-eval
nor textworld.
"""

from __future__ import annotations

from collections.abc import Callable

from simworld.simulators.env import SimEnv
from simworld.simulators.envs import textworld
from simworld.simulators.envs.bfcl import bfcl_env
from simworld.simulators.envs.bfcl_real import BfclReal
from simworld.simulators.envs.frozenlake import FrozenLakeReal, frozenlake_env
from simworld.simulators.envs.mock import MockReal, mock_env
from simworld.simulators.envs.textworld import TextWorldReal

_BUILDERS: dict[str, Callable[[], SimEnv]] = {
    "bfcl": bfcl_env,
    "frozenlake": frozenlake_env,
    "mock": mock_env,
}
if textworld.installed():
    _BUILDERS["textworld"] = textworld.textworld_env
SIM_ENVS = tuple(_BUILDERS)
_TEXTWORLD_MISSING = (
    "the textworld simulated env needs the optional textworld package: "
    "pip install 'simworld[textworld]'"
)


def load_sim_env(name: str) -> SimEnv:
    """The simulated env called `name` (one of SIM_ENVS), built once per process."""
    if name not in _BUILDERS:
        if name == "textworld":
            raise ValueError(_TEXTWORLD_MISSING)
        raise ValueError(f"unknown simulated env {name!r}; choose from {', '.join(SIM_ENVS)}")
    return _BUILDERS[name]()


__all__ = ["SIM_ENVS", "BfclReal", "FrozenLakeReal", "MockReal", "TextWorldReal", "load_sim_env"]
