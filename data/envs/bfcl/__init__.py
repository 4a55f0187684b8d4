"""BFCL multi-turn backends as a real environment: `BfclEnv` records ground-truth episodes
(and off-policy variants) by replaying BFCL's entries against its own Python backends.

    from simworld.data.envs.bfcl import BfclEnv
    episodes = list(BfclEnv(categories=("base",), off_policy=1).record(None, seed=0))

Importing this package does not import bfcl-eval; `BfclEnv()` checks it is installed.
Modules, by concept: `scenarios` (entries and ground truth), `schemas` (function docs as
ToolSpecs), `calls` (call strings), `backend` (live instances, results, clock),
`state` (state as JSON), `plan` / `offpolicy` / `auth` / `perturb` (what an episode does),
`recorder` (plans into Episodes), `volatile` (RNG-drawn fields), `env` (BfclEnv).
"""

from simworld.data.envs.bfcl.env import BFCL_VERSION, CATEGORIES, BfclEnv

__all__ = ["BFCL_VERSION", "CATEGORIES", "BfclEnv"]
