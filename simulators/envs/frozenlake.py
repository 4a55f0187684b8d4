"""The `frozenlake` simulated env: the bundled FrozenLake maps as tasks, the goal/hole check,
exact rules for invalid actions, and an exact (stochastic) real backend without gymnasium.

    from simworld.simulators.envs.frozenlake import FrozenLakeReal, frozenlake_env, render
    env = frozenlake_env()
    task = env.task_for(seed=3)                 # {"board", "position", "size"} at reset
    real = FrozenLakeReal(seed=0)               # env.real is FrozenLakeReal(0)
    answer = real.execute(task.initial_state, TextAction("DOWN"))
    answer.observation.text                     # '  (Down)\\nSFFF\\nAHFF\\n...' as recorded

Tasks: one per distinct map in the bundled episodes (all splits), id = the episode's task id
("frozenlake-8x8-1785905302"), with the episode's initial state and initial observation:
347 tasks from the 400 bundled episodes (small 4x4 maps repeat; the first id of a map wins).

Decisions:
- `max_steps` is 200 for every map. Gymnasium registers 100 steps for 4x4 maps and 200 for
  8x8 (FrozenLake8x8-v1); a SimEnv has one limit, so a 4x4 episode here is truncated at 200
  rather than 100. `rules` are those of an 8x8 episode, whose last line says 200 steps.
- `check`: reward 1.0 and terminated when the state after the step has the agent on G;
  terminated with 0.0 on H; otherwise 0.0, not terminated. A state that holds no valid
  position (a broken prediction) gets 0.0, not terminated, instead of an exception.
- `responder`: the exactly-known part of the dynamics. An action other than LEFT, DOWN,
  RIGHT, UP (case-sensitive, as recorded) leaves the state unchanged and gets a text
  observation naming the valid actions (gymnasium itself would raise on it). A valid move
  on the slippery ice is stochastic, so the responder leaves it to the model (None).
- `real`: FrozenLakeReal(0), the true transition distribution (1/3 intended, 1/3 each
  perpendicular, a move into the edge stays) sampled with `random.Random(seed)`; the same
  seed gives the same sequence of moves, though not gymnasium's own draws (its numpy RNG
  is not reproduced). Observations are rendered exactly as the recorded data shows them.
  `env.real` is one backend per process, so its draws interleave across sessions; a caller
  that needs a reproducible sequence per episode makes its own `FrozenLakeReal(seed)`.
"""

from __future__ import annotations

import functools
import random

from simworld.data.bundle import SPLITS, load_bundled
from simworld.data.records import JSON, Action, Observation, TextAction, TextObservation
from simworld.simulators.env import Answer, SimEnv, SimTask, StepCheck

ACTIONS = ("LEFT", "DOWN", "RIGHT", "UP")  # gymnasium's Discrete(4) order
AGENT = "A"
MAX_STEPS = 200
REAL_COST = 1e-4  # a table lookup: cheap enough that any cost threshold admits it
_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))  # (drow, dcol) per action


def render(state: JSON, action: str | None) -> str:
    """The observation text of `state` after `action` (None: a reset), as recorded: the
    action line ("  (Down)", empty after a reset), then the board with the agent as A."""
    size, position = state["size"], state["position"]
    rows = [list(row) for row in state["board"]]
    rows[position // size][position % size] = AGENT
    head = "" if action is None else f"  ({action.capitalize()})"
    return "\n".join([head, *("".join(row) for row in rows)]) + "\n"


def invalid_action_text(text: str, state: JSON) -> str:
    """What an action outside ACTIONS gets: the valid ones, then the unchanged board."""
    head = f"  (invalid action {text!r}: choose one of {', '.join(ACTIONS)}; no move made)"
    return head + render(state, None)


def slip_targets(state: JSON, action: str) -> tuple[int, int, int]:
    """Where the agent lands for each equally likely slip of `action`: the perpendicular
    direction before it, the intended one, the perpendicular after (gymnasium's order)."""
    index = ACTIONS.index(action)
    return (
        _moved(state, (index - 1) % 4),
        _moved(state, index),
        _moved(state, (index + 1) % 4),
    )


def check(state: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
    """Goal: reward 1.0 and terminated; hole: terminated with 0.0; else nothing."""
    cell = _cell(after)
    if cell == "G":
        return StepCheck(reward=1.0, terminated=True)
    return StepCheck(terminated=cell == "H")


def respond(state: JSON, action: Action) -> Answer | None:
    """An invalid action's exact answer (state unchanged); a valid move is left to the model."""
    text = action.text if isinstance(action, TextAction) else f"<{action.kind} action>"
    if text in ACTIONS:
        return None
    return Answer(TextObservation(invalid_action_text(text, state)), patch=[])


class FrozenLakeReal:
    """The real FrozenLake dynamics as a RealBackend: each `execute` samples one slip."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)

    def execute(self, state: JSON, action: Action) -> Answer:
        invalid = respond(state, action)
        if invalid is not None:
            return invalid
        assert isinstance(action, TextAction)  # respond() answered every other kind
        position = self.rng.choice(slip_targets(state, action.text))
        after = {**state, "position": position}
        patch: list[JSON] = (
            [] if position == state["position"] else [_replace("/position", position)]
        )
        return Answer(TextObservation(render(after, action.text)), patch=patch)

    def cost(self, state: JSON, action: Action) -> float:
        return REAL_COST


@functools.cache
def frozenlake_env() -> SimEnv:
    """The frozenlake SimEnv (built once per process from the bundled episodes)."""
    tasks: dict[str, SimTask] = {}
    boards: set[tuple[str, ...]] = set()
    rules: tuple[str, ...] = ()
    for split in SPLITS:
        for episode in load_bundled(split, env="frozenlake"):
            board = tuple(episode.initial_state["board"])
            if len(board) == 8 and not rules:
                rules = tuple(episode.rules)
            if board in boards or episode.task.id in tasks:
                continue
            boards.add(board)
            tasks[episode.task.id] = SimTask(
                id=episode.task.id,
                instruction=episode.task.instruction,
                initial_state=episode.initial_state,
                initial_observation=episode.initial_observation,
            )
    return SimEnv(
        name="frozenlake",
        tasks={task_id: tasks[task_id] for task_id in sorted(tasks)},
        action_kind="text",
        rules=rules,
        max_steps=MAX_STEPS,
        check=check,
        responder=respond,
        real=FrozenLakeReal(0),
    )


def _moved(state: JSON, direction: int) -> int:
    size, position = state["size"], state["position"]
    row, col = divmod(position, size)
    d_row, d_col = _MOVES[direction]
    row, col = min(max(row + d_row, 0), size - 1), min(max(col + d_col, 0), size - 1)
    return int(row * size + col)


def _cell(state: JSON) -> str | None:
    """The board cell under the agent, or None when `state` holds no valid position."""
    try:
        size, position, board = state["size"], state["position"], state["board"]
        cell = board[position // size][position % size]
    except (KeyError, IndexError, TypeError, ZeroDivisionError):
        return None
    is_position = isinstance(position, int) and 0 <= position < size * size
    return cell if is_position and isinstance(cell, str) else None


def _replace(path: str, value: JSON) -> dict[str, JSON]:
    return {"op": "replace", "path": path, "value": value}


__all__ = [
    "ACTIONS",
    "AGENT",
    "MAX_STEPS",
    "REAL_COST",
    "FrozenLakeReal",
    "check",
    "frozenlake_env",
    "invalid_action_text",
    "render",
    "respond",
    "slip_targets",
]
