"""simworld: learned world models that stand in for real environments in agent RL.

The public API, re-exported from the layers that own it (only the data layer is built so
far). Importing it is light: no torch, gymnasium, bfcl-eval or datasets is loaded.

    import simworld
    episodes = simworld.read_episodes("dump.jsonl").episodes
    train = simworld.load_bundled("train")
    for episode in simworld.load_env("frozenlake").record(episodes=3, seed=0): ...

The command line is `simworld` (see `simworld --help`).
"""

from simworld.data.bundle import exclude_apis, load_bundled
from simworld.data.envs import ENV_NAMES, load_env
from simworld.data.formats import FORMATS, detect_format, read_episodes, write_episodes
from simworld.data.records import (
    SCHEMA_VERSION,
    Action,
    Episode,
    Message,
    Observation,
    Outcome,
    Provenance,
    RecordError,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
)

__version__ = "0.1.0"

__all__ = [
    "ENV_NAMES",
    "FORMATS",
    "SCHEMA_VERSION",
    "Action",
    "Episode",
    "Message",
    "Observation",
    "Outcome",
    "Provenance",
    "RecordError",
    "Step",
    "Task",
    "TextAction",
    "TextObservation",
    "ToolCall",
    "ToolCallsAction",
    "ToolResult",
    "ToolResultsObservation",
    "ToolSpec",
    "VolatileField",
    "detect_format",
    "exclude_apis",
    "load_bundled",
    "load_env",
    "read_episodes",
    "write_episodes",
]
