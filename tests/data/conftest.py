"""Episodes for the format tests: hand-made ones that reach every corner of the records, and
recorder-made ones from the real envs (skipped with the reason when an env is missing)."""

from __future__ import annotations

import importlib.util

import pytest
from episode_builders import text_episode, tool_episode

from simworld.data.records import Episode, Task


@pytest.fixture
def episodes() -> list[Episode]:
    """Hand-made episodes of both kinds."""
    return [tool_episode("tools-0"), text_episode("text-0"), tool_episode("tools-1")]


@pytest.fixture
def mixed() -> Episode:
    """A tool step, then a text step: fine for the records, not for a chat transcript."""
    calls = tool_episode()
    text = text_episode()
    return Episode(
        episode_id="mixed-0",
        env="mock",
        task=Task(id="mixed"),
        steps=[calls.steps[0], text.steps[0]],
        tools=calls.tools,
    )


def _recorded(module: str, name: str, count: int) -> list[Episode]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet")
    from simworld.data.envs import EnvUnavailable, load_env

    try:
        episodes = load_env(name).record(None if name == "bfcl" else count, seed=0)
        return [episode for _, episode in zip(range(count), episodes, strict=False)]
    except EnvUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def frozenlake_episodes() -> list[Episode]:
    """Three episodes from the real FrozenLake recorder."""
    return _recorded("simworld.data.envs.frozenlake", "frozenlake", 3)


@pytest.fixture(scope="session")
def bfcl_episodes() -> list[Episode]:
    """The first six episodes of the real BFCL multi-turn recorder."""
    return _recorded("simworld.data.envs.bfcl.env", "bfcl", 6)


@pytest.fixture(scope="session")
def textworld_episodes() -> list[Episode]:
    """One generated TextWorld game played through (about a second)."""
    return _recorded("simworld.data.envs.textworld", "textworld", 1)
