"""FrozenLake (gymnasium) as a real env: seeded random maps, a seeded policy, and the exact
transition distribution behind every step.

    from simworld.data.envs import load_env
    env = load_env("frozenlake", sizes=(4, 8), is_slippery=True, explore=0.25)
    episodes = list(env.record(episodes=100, seed=0))

Each episode draws a map size from `sizes` and a map from `generate_random_map(size, seed)`,
then plays it with a policy that mostly takes the sensible move (the least expected distance
to the goal under the true dynamics, holes counting as far) and with probability `explore`
a random one, so a batch both reaches the goal and falls into holes. What a step holds:

- `action`: TextAction "LEFT" | "DOWN" | "RIGHT" | "UP";
- `observation`: the env's ansi render after the move (the last-action line, then the board),
  with the highlighted agent cell replaced by the plain marker "A";
- `state` / `next_state`: {"board": [rows of S/F/H/G], "position": row * size + col, "size"};
- `reward`, `terminated` (hole or goal), `truncated` (the registered time limit: 100 steps,
  200 on 8x8 maps as FrozenLake8x8-v1; false when the last step also terminated, where
  gymnasium's TimeLimit reports both);
- `info`: {"transitions": env.unwrapped.P[s][a] verbatim as [{"prob", "next_position",
  "reward", "terminated"}] (a slip into a wall repeats a next position; entries are not
  merged), "next_position": the realised one}.

The same `(episodes, seed)` and options give identical records: maps, env resets and the
policy all draw from seeds derived from `seed` and the episode index.
"""

from __future__ import annotations

import importlib.metadata
import random
import re
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from simworld.data.envs.base import EnvUnavailable
from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Episode,
    Outcome,
    Provenance,
    Step,
    Task,
    TextAction,
    TextObservation,
    VolatileField,
)

ACTIONS = ("LEFT", "DOWN", "RIGHT", "UP")  # gymnasium's Discrete(4) order
AGENT = "A"
_HIGHLIGHT = re.compile(r"\x1b\[[0-9;]*m(.)\x1b\[0m")  # utils.colorize(cell, "red", highlight)
_MOVES = ((0, -1), (1, 0), (0, 1), (-1, 0))  # (drow, dcol) per action

Transition = tuple[float, int, float, bool]  # (prob, next_position, reward, terminated)


class FrozenLakeEnv:
    """Records FrozenLake episodes; see the module docstring for the record layout."""

    name = "frozenlake"

    def __init__(
        self, sizes: Sequence[int] = (4, 8), is_slippery: bool = True, explore: float = 0.25
    ) -> None:
        try:
            import gymnasium  # noqa: F401  (checked here so a missing extra fails at once)
        except ImportError as exc:
            raise EnvUnavailable(
                "the frozenlake env needs gymnasium: pip install 'simworld[gym]'"
                " (or pip install gymnasium==1.2.2)"
            ) from exc
        sizes = tuple(sizes)
        if not sizes or any(not isinstance(n, int) or n < 2 for n in sizes):
            raise ValueError(f"sizes must be map sides of at least 2, e.g. (4, 8); got {sizes}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore is a probability in [0, 1]; got {explore}")
        self.sizes = sizes
        self.is_slippery = is_slippery
        self.explore = explore
        self.version = f"gymnasium=={importlib.metadata.version('gymnasium')}"
        self.volatile: list[VolatileField] = []

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes determined by `seed`."""
        if episodes is None:
            raise ValueError(
                "FrozenLake's episode set is unbounded (every seed is a new map): give a count"
            )
        for index in range(episodes):
            yield self._episode(seed, index)

    def _episode(self, seed: int, index: int) -> Episode:
        import gymnasium as gym
        from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as Lake
        from gymnasium.envs.toy_text.frozen_lake import generate_random_map

        size = self.sizes[derive_seed("frozenlake", seed, index, "size") % len(self.sizes)]
        map_seed = derive_seed("frozenlake", seed, index, "map")
        episode_seed = derive_seed("frozenlake", seed, index, "env")
        board: list[str] = generate_random_map(size, seed=map_seed)
        env_id = "FrozenLake8x8-v1" if size == 8 else "FrozenLake-v1"
        env = gym.make(env_id, desc=board, is_slippery=self.is_slippery, render_mode="ansi")
        policy = _Policy(board, random.Random(derive_seed("frozenlake", seed, index, "policy")))

        position, _ = env.reset(seed=episode_seed)
        initial = TextObservation(_plain(env.render()))
        lake = env.unwrapped
        assert isinstance(lake, Lake)
        table: dict[int, dict[int, list[Transition]]] = lake.P
        steps: list[Step] = []
        while True:
            action = policy.act(position, table[position], self.explore)
            next_position, reward, terminated, truncated, _ = env.step(action)
            steps.append(
                Step(
                    action=TextAction(ACTIONS[action]),
                    observation=TextObservation(_plain(env.render())),
                    state=_state(board, position),
                    next_state=_state(board, int(next_position)),
                    reward=float(reward),
                    terminated=bool(terminated),
                    truncated=bool(truncated and not terminated),
                    info={
                        "transitions": _transitions(table[position][action]),
                        "next_position": int(next_position),
                    },
                )
            )
            position = int(next_position)
            if terminated or truncated:
                break
        limit = env.spec.max_episode_steps if env.spec else None
        # No env.close(): the ansi render opens no window and holds nothing to release.

        task_id = f"frozenlake-{size}x{size}-{map_seed}"
        return Episode(
            episode_id=f"frozenlake-{seed}-{index}",
            env=self.name,
            task=Task(id=task_id, instruction=_instruction(size)),
            steps=steps,
            rules=_rules(self.is_slippery, limit),
            initial_state=_state(board, 0),
            initial_observation=initial,
            seed=episode_seed,
            provenance=Provenance(
                source=self.name,
                version=self.version,
                origin=f"record(seed={seed}) episode {index}",
                policy=f"least expected distance to goal, random with p={self.explore}",
            ),
            outcome=_outcome(board, position, steps),
            volatile=list(self.volatile),
        )


class _Policy:
    """The sensible move (least expected goal distance over the true next-state distribution)
    or, with probability `explore`, a uniformly random one. Ties go to the lower action."""

    def __init__(self, board: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.distance = _goal_distances(board)

    def act(self, position: int, actions: dict[int, list[Transition]], explore: float) -> int:
        if self.rng.random() < explore:
            return self.rng.randrange(len(ACTIONS))

        def expected(action: int) -> float:
            return sum(p * self.distance[s] for p, s, _, _ in actions[action])

        return min(range(len(ACTIONS)), key=expected)


def _goal_distances(board: list[str]) -> list[float]:
    """Steps from each cell to the goal over safe cells (BFS); holes and cells that cannot
    reach the goal count as far (twice the cell count)."""
    size = len(board)
    far = float(2 * size * size)
    distance = [far] * (size * size)
    goal = next(
        r * size + c for r, row in enumerate(board) for c, cell in enumerate(row) if cell == "G"
    )
    distance[goal] = 0.0
    queue = deque([goal])
    while queue:
        cell = queue.popleft()
        row, col = divmod(cell, size)
        for d_row, d_col in _MOVES:
            r, c = row + d_row, col + d_col
            if 0 <= r < size and 0 <= c < size and board[r][c] != "H":
                neighbour = r * size + c
                if distance[neighbour] == far:
                    distance[neighbour] = distance[cell] + 1
                    queue.append(neighbour)
    return distance


def _plain(render: Any) -> str:
    """The ansi render with the highlighted agent cell replaced by AGENT."""
    text = _HIGHLIGHT.sub(AGENT, str(render))
    if "\x1b" in text:
        raise RuntimeError(f"unexpected escape sequence in the FrozenLake render: {text!r}")
    return text


def _state(board: list[str], position: int) -> dict[str, JSON]:
    return {"board": list(board), "position": position, "size": len(board)}


def _transitions(entries: list[Transition]) -> list[JSON]:
    return [
        {"prob": float(p), "next_position": int(s), "reward": float(r), "terminated": bool(t)}
        for p, s, r, t in entries
    ]


def _outcome(board: list[str], position: int, steps: list[Step]) -> Outcome:
    size = len(board)
    cell = board[position // size][position % size]
    detail = {"G": "reached the goal", "H": "fell into a hole"}.get(
        cell, f"time limit after {len(steps)} steps"
    )
    score = sum(step.reward or 0.0 for step in steps)
    return Outcome(success=cell == "G", score=score, detail=detail)


def _instruction(size: int) -> str:
    return (
        f"Cross this {size}x{size} frozen lake from the start S (top left) to the goal G"
        " (bottom right) without falling into a hole H."
    )


def _rules(is_slippery: bool, limit: int | None) -> list[str]:
    move = (
        "The ice is slippery: the agent moves in the intended direction with probability 1/3"
        " and in each of the two perpendicular directions with probability 1/3."
        if is_slippery
        else "The ice is not slippery: the agent always moves in the intended direction."
    )
    rules = [
        "The lake is a square grid: S start, F frozen ice, H hole, G goal. The board shows the"
        " agent's cell as A; cells are numbered row * size + column.",
        "Actions are LEFT, DOWN, RIGHT, UP. A move into the edge of the grid leaves the agent"
        " where it is.",
        move,
        "Reaching G gives reward 1 and ends the episode; entering H ends it with reward 0;"
        " every other move gives 0.",
        "The observation after a move starts with the action chosen (not the direction the"
        " agent slid), e.g. '  (Down)'.",
    ]
    if limit is not None:
        rules.append(f"The episode is cut off (truncated) after {limit} steps.")
    return rules


__all__ = ["ACTIONS", "AGENT", "FrozenLakeEnv"]
