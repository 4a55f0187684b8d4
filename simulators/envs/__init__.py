"""The simulated envs by name: each is built from data (the bundled episodes, generated
games, or a few lines for `mock`) once per process.

    from simworld.simulators.envs import SIM_ENVS, load_sim_env
    env = load_sim_env("bfcl")          # SIM_ENVS: bfcl, datascience, frozenlake, mock, search
    task = env.task_for(seed=7)

`bfcl` (the BFCL multi-turn scenarios, with BFCL's own backends as the real one when
bfcl-eval is installed), `datascience` (tables from scikit-learn's datasets and generators,
operations as tools, pandas + scikit-learn as the cost-aware real backend), `frozenlake`
(the bundled maps, with an exact real backend),
`mock` (a counter for tests), `search` (a passage corpus behind `search(query, top_k)`,
with BM25 as the real backend; the pydoc demo corpus unless SIMWORLD_SEARCH_CORPUS names a
JSONL one) and, when the optional `textworld` package is installed,
`textworld` (generated games played by the real game engine); each module's docstring
lists its decisions. Importing this package imports neither torch, gymnasium, bfcl-eval
nor textworld.

Captured envs (a real MCP server or HTTP tool API kept as files, see captured.py) load by
directory (`load_sim_env("envs/notes")`) or by name from the folders of SIMWORLD_ENV_PATH
(their names are in SIM_ENVS); `sim_env_name(spec)` is the name an env is served under.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from simworld.simulators.env import SimEnv
from simworld.simulators.envs import captured, textworld
from simworld.simulators.envs.bfcl import bfcl_env
from simworld.simulators.envs.bfcl_real import BfclReal
from simworld.simulators.envs.datascience import DataScienceReal, datascience_env
from simworld.simulators.envs.frozenlake import FrozenLakeReal, frozenlake_env
from simworld.simulators.envs.mock import MockReal, mock_env
from simworld.simulators.envs.search import SearchReal, search_env
from simworld.simulators.envs.textworld import TextWorldReal

_BUILDERS: dict[str, Callable[[], SimEnv]] = {
    "bfcl": bfcl_env,
    "datascience": datascience_env,
    "frozenlake": frozenlake_env,
    "mock": mock_env,
    "search": search_env,
}
if textworld.installed():
    _BUILDERS["textworld"] = textworld.textworld_env
SIM_ENVS = tuple(_BUILDERS) + captured.names_on_path()
_CAPTURED: dict[str, Path] = {}  # captured envs given by directory, by name
_TEXTWORLD_MISSING = (
    "the textworld simulated env needs the optional textworld package: "
    "pip install 'simworld[textworld]'"
)


def load_sim_env(name: str) -> SimEnv:
    """The simulated env called `name` (one of SIM_ENVS, built once per process), or the
    captured env in directory `name` or named `name` (read now)."""
    if name in _BUILDERS:
        return _BUILDERS[name]()
    return captured.load_captured_env(_captured_dir(name))


def sim_env_name(spec: str) -> str:
    """The name env `spec` (a name, or a captured env's directory) is served under; a
    directory is registered under its env's name, so that load_sim_env(name) finds it."""
    if spec in _BUILDERS:
        return spec
    found = _captured_dir(spec)
    name = captured.load_captured_env(found).name  # CapturedEnvError when it is unreadable
    if name in _BUILDERS or _CAPTURED.get(name, found).resolve() != found.resolve():
        raise ValueError(f"{spec}: another env is already called {name!r}; rename one")
    _CAPTURED[name] = found
    return name


def _captured_dir(name: str) -> Path:
    found = _CAPTURED.get(name) or captured.find_captured_env(name)
    if found is not None:
        return found
    if name == "textworld":
        raise ValueError(_TEXTWORLD_MISSING)
    raise ValueError(
        f"unknown simulated env {name!r}; choose from {', '.join(SIM_ENVS)}, or give a "
        f"captured env's directory (or put it in a folder of {captured.PATH_VARIABLE})"
    )


__all__ = [
    "SIM_ENVS",
    "BfclReal",
    "DataScienceReal",
    "FrozenLakeReal",
    "MockReal",
    "SearchReal",
    "TextWorldReal",
    "load_sim_env",
    "sim_env_name",
]
