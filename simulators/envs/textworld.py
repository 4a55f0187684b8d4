"""The `textworld` simulated env: generated TextWorld games as tasks, text commands as
actions, the score/end check, exact answers for "look" and "inventory", and a real backend
that plays the game's own engine (needs the optional `textworld` package, like the
recorder: `pip install 'simworld[textworld]'`).

    from simworld.simulators.envs.textworld import textworld_env
    env = textworld_env()                        # GAMES games; the first load compiles them
    task = env.task_for(seed=0)                  # state {"location", "description", ...}
    answer = env.real.execute(task.initial_state, TextAction("go east"))
    answer.observation.text, answer.patch        # the game's feedback, the state change

Tasks: the games `simworld record --env textworld --seed 0` plays first, with the
recorder's default options (5 rooms, 10 objects, quests of 5), one task per game: id =
the recorder's task id ("textworld-w5-o10-q5-s107871694"), instruction = the game's
objective, initial state and observation = what the recorder writes at reset. The bundle
holds no TextWorld episodes, so the games come from the recorder's generator and its disk
cache (`simworld.data.envs.textworld`): compiling one takes 2-13 s (Inform 7, one core)
the first time, about 0.2 s to start after that. `build_textworld_env` makes the env for
other options, seeds, game counts or cache folders.

Decisions:
- `max_steps` 100, the recorder's default episode length.
- `rules`: the recorder's RULES (how commands, score and the end work).
- `check`: reward = the score change between the states (the recorder's reward);
  terminated when the observation shows TextWorld's end marker ("*** The End ***" on a
  win, "*** You lost! ***" on a loss: the markers the game's own won/lost flags read) or
  the state's score reached its max_score > 0. A state without integer scores gets 0.0.
- `responder`: "look" and "inventory" answered from the state, whose "description" and
  "inventory" are those very commands' text; the state is unchanged (patch []). The
  recorded steps show both exactly so (see the tests). Every other command is left to the
  model or the real backend.
- `volatile`: none (the games are deterministic; Jericho's RNG is seeded per task).
- `real`: TextWorldReal. A TextWorld state cannot be rebuilt from its JSON: the facts are
  TextWorld's logic view, while the text comes from the compiled game running in a
  Z-machine, whose memory the JSON does not hold. So the backend plays the real game from
  the states it can reach: one of the `remember` most recent states it produced (kept as
  live game copies), else a task's initial state (a fresh start of the game, seeded as the
  recorder seeds that task's episode). A step from any other state (a model's prediction
  that left the real game's path) is a ValueError that says so; in shadow mode the router
  counts it as a shadow error. Routed by the cost threshold (`max_real_cost` >=
  REAL_SECONDS_PER_STEP), every step of a session runs the real game.
- What the JSON state does not show: the game's turn count (every command counts), seen
  only in the closing line "You scored 1 out of a possible 1, in 8 turns.". A remembered
  game carries its count, so a session played here (one at a time) reads exactly as
  recorded; sessions that reach the same JSON state share the latest game, and so its
  count (remembered games come before a task's fresh start for this reason: "examine"
  and "look" at the start change no JSON, only the count). Commands the responder answers
  never reach the game, so they are not counted either.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simworld.data.envs.seeding import derive_seed
from simworld.data.envs.textworld import (
    RULES,
    TextWorldEnv,
    clean_feedback,
    game_state_json,
    start_game,
)
from simworld.data.records import JSON, Action, Observation, TextAction, TextObservation
from simworld.simulators.env import Answer, SimEnv, SimTask, StepCheck
from simworld.worldmodel.patch import diff

GAMES = 4
MAX_STEPS = 100
REMEMBER = 64  # live game copies kept by TextWorldReal
# Seconds per command: a step copies the live game (60-90 ms) and runs the command (10-15
# ms). Replaying the 30 steps of the default games' first 4 recorded episodes on a shared
# 2-core machine took a median of 0.10-0.17 s and a 90th percentile of up to 0.5 s.
REAL_SECONDS_PER_STEP = 0.2
WON, LOST = "*** The End ***", "*** You lost! ***"  # what TextWorld's won / lost flags read
LOOK, INVENTORY = "look", "inventory"


def installed() -> bool:
    """Whether the optional `textworld` package is importable."""
    return importlib.util.find_spec("textworld") is not None


def check(state: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
    """Reward: the score change; terminated: the end marker shown or max_score reached."""
    before, score, max_score = _int(state, "score"), _int(after, "score"), _int(after, "max_score")
    reward = float(score - before) if score is not None and before is not None else 0.0
    text = observation.text if isinstance(observation, TextObservation) else ""
    reached = score is not None and max_score is not None and 0 < max_score <= score
    return StepCheck(reward=reward, terminated=WON in text or LOST in text or reached)


def respond(state: JSON, action: Action) -> Answer | None:
    """Answer the "look" and "inventory" commands from the state; None for any other."""
    if not isinstance(action, TextAction) or not isinstance(state, dict):
        return None
    key = {LOOK: "description", INVENTORY: "inventory"}.get(action.text.strip())
    if key is None or not isinstance(state.get(key), str):
        return None
    return Answer(TextObservation(state[key]), patch=[])


@dataclass(frozen=True)
class GameStart:
    """How a task's game starts: the compiled game and the seed of Jericho's RNG."""

    game_file: Path
    seed: int


class TextWorldReal:
    """The real TextWorld games as a RealBackend; see the module docstring."""

    def __init__(self, starts: Mapping[str, GameStart], remember: int = REMEMBER) -> None:
        """`starts`: each task's initial state, as JSON text with sorted keys, to its game."""
        if remember < 0:
            raise ValueError(f"remember must be >= 0, got {remember}")
        self.starts = dict(starts)
        self.remember = remember
        self._started: dict[str, Any] = {}  # key: a game at its start, copied for each step
        self._live: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def execute(self, state: JSON, action: Action) -> Answer:
        """Run the command in the real game at `state` (a state this backend can reach)."""
        if not isinstance(action, TextAction):
            raise ValueError(f"the textworld env takes text commands, not a {action.kind} action")
        with self._lock:
            game = self._game_at(state)
            game_state, _, _ = game.step(action.text)
            after = game_state_json(game_state)
            observation = TextObservation(clean_feedback(game_state.feedback))
            self._keep(after, game)
        return Answer(observation, diff(state, after))

    def cost(self, state: JSON, action: Action) -> float:
        """Seconds: REAL_SECONDS_PER_STEP per command."""
        return REAL_SECONDS_PER_STEP

    def _game_at(self, state: JSON) -> Any:
        """A live game at `state` that the caller may step: a remembered one first (it
        carries the turn count; see the module docstring), then a task's start."""
        key = state_key(state)
        live = self._live.get(key)
        if live is not None:
            self._live.move_to_end(key)
            return _copy(live)
        start = self.starts.get(key)
        if start is None:
            raise ValueError(
                "the real TextWorld game cannot be restored from a JSON state it has not "
                "reached: this state is neither a task's initial state nor one of the last "
                f"{self.remember} states this backend produced"
            )
        if key not in self._started:
            self._started[key] = start_game(start.game_file, start.seed)
            self._started[key].reset()
        return _copy(self._started[key])

    def _keep(self, state: JSON, game: Any) -> None:
        if self.remember == 0:
            game.close()
            return
        key = state_key(state)
        old = self._live.pop(key, None)
        if old is not None:
            old.close()
        self._live[key] = game
        while len(self._live) > self.remember:
            self._live.popitem(last=False)[1].close()


def state_key(state: JSON) -> str:
    """A state as the backend indexes it: JSON text with sorted keys."""
    return json.dumps(state, sort_keys=True)


def build_textworld_env(recorder: TextWorldEnv, games: int = GAMES, seed: int = 0) -> SimEnv:
    """The env of the first `games` games that `recorder.record(..., seed)` plays (games
    are generated into the recorder's cache when missing)."""
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    tasks: dict[str, SimTask] = {}
    starts: dict[str, GameStart] = {}
    index = 0
    while len(tasks) < games:
        spec = recorder.game_spec(seed, index)
        start = GameStart(
            recorder.game_file(spec), derive_seed("textworld", seed, index, "episode")
        )
        index += 1
        if spec.key in tasks:  # episodes_per_game > 1: the next episode plays the same game
            continue
        game = start_game(start.game_file, start.seed)
        try:
            game_state = game.reset()
            state = game_state_json(game_state)
            tasks[spec.key] = SimTask(
                id=spec.key,
                instruction=str(game_state["objective"]),
                initial_state=state,
                initial_observation=TextObservation(clean_feedback(game_state["description"])),
            )
        finally:
            game.close()
        starts[state_key(state)] = start
    return SimEnv(
        name="textworld",
        tasks=tasks,
        action_kind="text",
        rules=tuple(RULES),
        max_steps=MAX_STEPS,
        check=check,
        responder=respond,
        real=TextWorldReal(starts),
    )


@functools.cache
def textworld_env() -> SimEnv:
    """The textworld SimEnv: GAMES games of the recorder's defaults, seed 0 (built once per
    process; the recorder's EnvUnavailable when textworld is not installed)."""
    return build_textworld_env(TextWorldEnv(), GAMES, seed=0)


def _copy(game: Any) -> Any:
    """A copy of a live game at the same point (Jericho warns again on each copy that it
    does not know generated games; TextWorld's own wrapper tracks the score)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not fully supported")
        return game.copy()


def _int(state: JSON, key: str) -> int | None:
    """The integer at `state[key]`, or None (no such key, not a dict, not an int)."""
    value = state.get(key) if isinstance(state, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


__all__ = [
    "GAMES",
    "MAX_STEPS",
    "REAL_SECONDS_PER_STEP",
    "REMEMBER",
    "GameStart",
    "TextWorldReal",
    "build_textworld_env",
    "check",
    "installed",
    "respond",
    "state_key",
    "textworld_env",
]
