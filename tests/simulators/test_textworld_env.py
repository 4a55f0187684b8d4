"""The textworld simulated env (simulators/envs/textworld.py): the check and the
look/inventory rules on plain states (no TextWorld needed), then, on two small generated
games (3 rooms, 6 objects, quests of 3): tasks equal to the recorder's resets, the real
backend replaying recorded episodes exactly, the rules agreeing with the real game, a
session played through the real game, and the refusal of a state the game never reached.

    python -m pytest -q tests/simulators/test_textworld_env.py

The games are generated once per module into a temporary cache (1-2 s each here; up to
~10 s on a slow core). The default env (4 games of the recorder's default size, compiled
into the user cache on first use) is exercised by the slow test.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from simworld.data.records import (
    JSON,
    Episode,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
)
from simworld.simulators.env import SimEnv
from simworld.simulators.envs import SIM_ENVS, TextWorldReal, load_sim_env
from simworld.simulators.envs.textworld import (
    REAL_SECONDS_PER_STEP,
    build_textworld_env,
    check,
    installed,
    respond,
)
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session
from simworld.worldmodel.patch import apply

needs_textworld = pytest.mark.skipif(
    importlib.util.find_spec("textworld") is None, reason="textworld is an optional extra"
)
SMALL = {"world_size": 3, "nb_objects": 6, "quest_length": 3}
ROOM = {
    "location": "attic",
    "description": "-= Attic =-\nA dusty attic.",
    "inventory": "You are carrying nothing.",
    "facts": ["at(P, attic: r)"],
    "score": 0,
    "max_score": 2,
}


def _scored(score: int) -> JSON:
    return {**ROOM, "score": score}


def test_check_rewards_the_score_change_and_ends_on_the_marker_or_max_score() -> None:
    def verdict(before: int, after: int, text: str = "Done.") -> tuple[float, bool]:
        got = check(_scored(before), TextAction("x"), TextObservation(text), _scored(after))
        return got.reward, got.terminated

    assert verdict(0, 1) == (1.0, False)
    assert verdict(1, 2) == (1.0, True)  # max_score reached
    assert verdict(0, 0, "...\n*** The End ***\n...") == (0.0, True)
    assert verdict(0, 0, "*** You lost! ***") == (0.0, True)
    assert verdict(0, 0) == (0.0, False)
    broken = check(ROOM, TextAction("x"), TextObservation(""), {"score": "high"})
    assert (broken.reward, broken.terminated) == (0.0, False)


def test_look_and_inventory_are_answered_from_the_state() -> None:
    look = respond(ROOM, TextAction("look"))
    assert look is not None and look.patch == []
    assert look.observation == TextObservation(ROOM["description"])
    inventory = respond(ROOM, TextAction(" inventory "))
    assert inventory is not None and inventory.observation == TextObservation(ROOM["inventory"])
    assert respond(ROOM, TextAction("go east")) is None
    assert respond(None, TextAction("look")) is None
    assert respond(ROOM, ToolCallsAction([ToolCall("c", "look", {}, "{}")])) is None


def test_textworld_is_listed_exactly_when_installed() -> None:
    assert ("textworld" in SIM_ENVS) is installed()
    if not installed():
        with pytest.raises(ValueError, match="pip install 'simworld\\[textworld\\]'"):
            load_sim_env("textworld")


@pytest.fixture(scope="module")
def games(tmp_path_factory: pytest.TempPathFactory) -> tuple[SimEnv, list[Episode]]:
    """The env of two small games and the recorder's first two episodes (the same games)."""
    from simworld.data.envs.textworld import TextWorldEnv

    recorder = TextWorldEnv(**SMALL, cache_dir=tmp_path_factory.mktemp("textworld-cache"))
    env = build_textworld_env(recorder, games=2)
    return env, list(recorder.record(episodes=2, seed=0))


@needs_textworld
def test_tasks_are_the_recorders_resets(games: tuple[SimEnv, list[Episode]]) -> None:
    from simworld.data.envs.textworld import TextWorldEnv

    env, episodes = games
    assert env.action_kind == "text" and env.max_steps == 100 and env.rules
    assert list(env.tasks) == [e.task.id for e in episodes]
    for episode in episodes:
        task = env.tasks[episode.task.id]
        assert task.instruction == episode.task.instruction
        assert task.initial_state == episode.initial_state
        assert task.initial_observation == episode.initial_observation
    with pytest.raises(ValueError, match="games must be at least 1"):
        build_textworld_env(TextWorldEnv(**SMALL), games=0)


@needs_textworld
def test_the_real_game_replays_recorded_episodes_and_the_rules_agree(
    games: tuple[SimEnv, list[Episode]],
) -> None:
    env, episodes = games
    assert isinstance(env.real, TextWorldReal)
    real = TextWorldReal(env.real.starts)  # a backend of its own: nothing remembered yet
    steps = looks = 0
    for episode in episodes:
        for step in episode.steps:
            answer = real.execute(step.state, step.action)
            assert answer.observation == step.observation
            assert answer.patch is not None and apply(step.state, answer.patch) == step.next_state
            verdict = env.check(step.state, step.action, answer.observation, step.next_state)
            assert (verdict.reward, verdict.terminated) == (step.reward, step.terminated)
            steps += 1
        assert episode.steps[-1].terminated and episode.outcome.success
        for step in episode.steps:  # every state on the way is remembered: ask the game
            for command in ("look", "inventory"):
                ruled = respond(step.state, TextAction(command))
                assert ruled is not None
                assert real.execute(step.state, TextAction(command)) == ruled
                looks += 1
    assert steps >= 4 and looks == 2 * steps


@needs_textworld
def test_a_session_routed_by_cost_plays_the_real_game(
    games: tuple[SimEnv, list[Episode]],
) -> None:
    env, episodes = games
    episode = episodes[0]
    router = Router(env, None, RouterConfig(max_real_cost=REAL_SECONDS_PER_STEP))
    session = Session(env, router, episode_id="tw")
    assert session.reset(episode.task.id).observation == episode.initial_observation
    for step in episode.steps:
        out = session.step(step.action)
        expected_source = "rules" if step.action.text in ("look", "inventory") else "real"
        assert out.info["source"] == expected_source
        assert (out.observation, out.reward, out.terminated) == (
            step.observation,
            step.reward,
            step.terminated,
        )
    assert session.episode().steps[-1].next_state == episode.steps[-1].next_state


@needs_textworld
def test_a_state_the_game_never_reached_is_refused(
    games: tuple[SimEnv, list[Episode]],
) -> None:
    env, _ = games
    real = env.real
    assert real is not None
    task = next(iter(env.tasks.values()))
    assert isinstance(task.initial_state, dict)
    elsewhere = {**task.initial_state, "score": 7}
    with pytest.raises(ValueError, match="cannot be restored from a JSON state"):
        real.execute(elsewhere, TextAction("look"))
    with pytest.raises(ValueError, match="takes text commands"):
        real.execute(task.initial_state, ToolCallsAction([]))
    assert real.cost(task.initial_state, TextAction("look")) == REAL_SECONDS_PER_STEP


@needs_textworld
@pytest.mark.slow
def test_the_default_env_loads_the_recorders_default_games() -> None:
    env = load_sim_env("textworld")
    assert len(env.tasks) == 4 and load_sim_env("textworld") is env
    assert all(task_id.startswith("textworld-w5-o10-q5-s") for task_id in env.tasks)
    assert isinstance(env.real, TextWorldReal)
    assert Path(next(iter(env.real.starts.values())).game_file).is_file()
