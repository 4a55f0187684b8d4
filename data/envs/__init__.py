"""Real environments that give ground truth, by name. Backends import lazily, so listing
envs never imports gymnasium, bfcl-eval or textworld.

    from simworld.data.envs import load_env, ENV_NAMES
"""

from __future__ import annotations

import importlib
from typing import Any

from simworld.data.envs.base import EnvUnavailable, RealEnv

_ENVS = {
    "bfcl": "simworld.data.envs.bfcl:BfclEnv",
    "datascience": "simworld.data.envs.datascience:DataScienceEnv",
    "frozenlake": "simworld.data.envs.frozenlake:FrozenLakeEnv",
    "textworld": "simworld.data.envs.textworld:TextWorldEnv",
    "search": "simworld.data.envs.search:SearchEnv",
}
ENV_NAMES = tuple(_ENVS)


def load_env(name: str, **options: Any) -> RealEnv:
    """The real env called `name`, built with its keyword `options`."""
    if name not in _ENVS:
        raise ValueError(f"unknown env {name!r}; known envs: {', '.join(ENV_NAMES)}")
    module_name, class_name = _ENVS[name].split(":")
    env: RealEnv = getattr(importlib.import_module(module_name), class_name)(**options)
    return env


__all__ = ["ENV_NAMES", "EnvUnavailable", "RealEnv", "load_env"]
