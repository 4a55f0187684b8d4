"""simworld.data: the one trajectory schema, dump readers and writers, and the real
environments that record ground truth.

    from simworld.data import read_episodes, write_episodes
    episodes = read_episodes("dump.jsonl").episodes
"""

from simworld.data.formats import (
    FORMATS,
    BadRecord,
    DumpError,
    ReadResult,
    detect_format,
    iter_episodes,
    read_episodes,
    write_episodes,
)

__all__ = [
    "FORMATS",
    "BadRecord",
    "DumpError",
    "ReadResult",
    "detect_format",
    "iter_episodes",
    "read_episodes",
    "write_episodes",
]
