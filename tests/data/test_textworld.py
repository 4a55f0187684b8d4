"""Tests for the TextWorld real env on two small generated games (3 rooms, 6 objects, quests of
3 actions): the walkthrough wins, records are deterministic within a process, across processes
(different hash seeds) and across fresh caches, the state layout, and the JSON round trip.

The games are generated once per module into a temporary cache (about 1-2 s each here; up to
~10 s on a slow core), so the generation tests are marked slow.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simworld.data.envs import EnvUnavailable, load_env
from simworld.data.envs.textworld import GameSpec, TextWorldEnv
from simworld.data.records import Episode, TextAction, TextObservation, from_json, to_json

needs_textworld = pytest.mark.skipif(
    importlib.util.find_spec("textworld") is None, reason="textworld is an optional extra"
)
SMALL = {"world_size": 3, "nb_objects": 6, "quest_length": 3}
Z8_SERIAL = slice(0x12, 0x18)  # the Z-machine header's serial number: the compile date


def _dumps(episodes: list[Episode]) -> list[str]:
    return [json.dumps(to_json(e)) for e in episodes]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("textworld-cache")


@pytest.fixture(scope="module")
def episodes(cache: Path) -> list[Episode]:
    env = load_env("textworld", **SMALL, episodes_per_game=2, explore=0.3, cache_dir=cache)
    return list(env.record(episodes=4, seed=0))


@needs_textworld
@pytest.mark.slow
def test_walkthrough_wins(cache: Path) -> None:
    env = TextWorldEnv(**SMALL, explore=0.0, cache_dir=cache)
    for episode in env.record(episodes=2, seed=0):
        assert episode.outcome.success is True
        last = episode.steps[-1]
        assert last.terminated and not last.truncated
        assert sum(s.reward or 0.0 for s in episode.steps) == last.next_state["max_score"]
        assert len(episode.steps) <= 3 * SMALL["quest_length"]
        for step in episode.steps:
            assert isinstance(step.action, TextAction)
            assert step.action.text in step.info["admissible_commands"]


@needs_textworld
@pytest.mark.slow
def test_same_seed_gives_identical_records(cache: Path, episodes: list[Episode]) -> None:
    env = load_env("textworld", **SMALL, episodes_per_game=2, explore=0.3, cache_dir=cache)
    assert _dumps(list(env.record(episodes=4, seed=0))) == _dumps(episodes)
    assert episodes[0].task.id == episodes[1].task.id != episodes[2].task.id


_RECORD_SCRIPT = """
import json, sys
from simworld.data.envs import load_env
from simworld.data.records import to_json
env = load_env("textworld", **json.loads(sys.argv[1]))
print(json.dumps([to_json(e) for e in env.record(episodes=4, seed=0)]))
"""


@needs_textworld
@pytest.mark.slow
def test_records_do_not_depend_on_the_hash_seed(cache: Path, episodes: list[Episode]) -> None:
    # TextWorld lists facts in set order, which PYTHONHASHSEED changes between processes.
    options = json.dumps({**SMALL, "episodes_per_game": 2, "explore": 0.3, "cache_dir": str(cache)})
    outputs = []
    for hash_seed in ("1", "2"):
        run = subprocess.run(
            [sys.executable, "-c", _RECORD_SCRIPT, options],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.append(json.loads(run.stdout))
    assert outputs[0] == outputs[1] == [to_json(e) for e in episodes]


@needs_textworld
@pytest.mark.slow
def test_same_seed_generates_the_same_game(cache: Path, tmp_path: Path) -> None:
    spec = GameSpec(seed=12345, **SMALL)
    first = TextWorldEnv(**SMALL, cache_dir=cache).game_file(spec)
    second = TextWorldEnv(**SMALL, cache_dir=tmp_path).game_file(spec)
    assert first != second
    for suffix in (".json", ".ni"):
        assert first.with_suffix(suffix).read_bytes() == second.with_suffix(suffix).read_bytes()
    one, two = bytearray(first.read_bytes()), bytearray(second.read_bytes())
    one[Z8_SERIAL] = two[Z8_SERIAL] = b"000000"
    assert one == two
    assert [p.name for p in second.parent.parent.iterdir()] == [spec.key]  # no temp folders


@needs_textworld
@pytest.mark.slow
def test_state_and_observations(episodes: list[Episode]) -> None:
    for episode in episodes:
        assert isinstance(episode.initial_observation, TextObservation)
        assert episode.initial_observation.text == episode.initial_state["description"]
        assert "________" not in episode.initial_observation.text  # no ASCII banner
        assert episode.task.instruction
        assert episode.initial_state == episode.steps[0].state
        for before, after in zip(episode.steps, episode.steps[1:], strict=False):
            assert after.state == before.next_state
        for step in episode.steps:
            state = step.next_state
            assert set(state) == {
                "location",
                "description",
                "inventory",
                "facts",
                "score",
                "max_score",
            }
            assert state["facts"] == sorted(state["facts"])
            assert f"at(P, {state['location']}: r)" in state["facts"]
            assert step.reward == state["score"] - step.state["score"]
            assert isinstance(step.observation, TextObservation)
            assert not re.search(r"\n>\s+-=", step.observation.text)
            assert step.info["admissible_commands"] == sorted(step.info["admissible_commands"])
        assert episode.outcome.success == episode.steps[-1].terminated


@needs_textworld
@pytest.mark.slow
def test_json_round_trip(episodes: list[Episode]) -> None:
    for episode in episodes:
        assert from_json(Episode, json.loads(json.dumps(to_json(episode)))) == episode


@needs_textworld
def test_bad_options_and_unbounded_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quest_length"):
        TextWorldEnv(quest_length=0, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="explore"):
        TextWorldEnv(explore=-0.1, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="unbounded"):
        next(TextWorldEnv(cache_dir=tmp_path).record(episodes=None, seed=0))


def test_missing_textworld_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(EnvUnavailable, match="pip install"):
        TextWorldEnv()
