"""Trainer adapters: a running simworld server seen through the interfaces RL frameworks
already take. Client code over the server's wire protocols (httpx only, no torch); each
adapter imports its framework in its own module, so import the one you use:

    from simworld.adapters.client import SimworldClient         # the native REST API
    from simworld.adapters.gymnasium import SimworldGymEnv      # gymnasium.Env (extra "gym")
    from simworld.adapters.trl import environment_factory       # TRL GRPOTrainer tools
    from simworld.adapters.verifiers import load_environment    # verifiers 0.1.14
    from simworld.adapters.openenv import SimworldEnvironment   # openenv-core 0.3.0

TRL, verifiers and openenv-core are not simworld dependencies: install the one you use
beside simworld (verifiers 0.1.14 pins datasets<4.7, so it wants its own virtualenv).
"""

from simworld.adapters.client import ServerError, SimworldClient, Started, Stepped

__all__ = ["ServerError", "SimworldClient", "Started", "Stepped"]
