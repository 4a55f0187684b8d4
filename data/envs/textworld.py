"""TextWorld as a real env: seeded generated games (cached on disk), played by a policy that
mixes the walkthrough with random admissible commands.

TextWorld is an optional extra because its dependency jericho is GPL-2.0+:
`pip install 'simworld[textworld]'`.

    from simworld.data.envs import load_env
    env = load_env("textworld", world_size=3, nb_objects=6, quest_length=3)
    episodes = list(env.record(episodes=4, seed=0))

Games come from TextWorld's Python generator with the settings of `tw-make custom`, so
`tw-make custom --world-size W --nb-objects N --quest-length L --seed S` builds the same game.
Compiling one takes 2-10 s (Inform 7, one core), so each game is cached under `cache_dir`
(default `$XDG_CACHE_HOME/simworld/textworld`, else `~/.cache/simworld/textworld`), keyed by
the TextWorld version, the generation parameters and the seed. Consecutive
`episodes_per_game` episodes share a game. What a step holds:

- `action`: TextAction, one command ("open chest drawer");
- `observation`: the game's feedback, the trailing status line and surrounding blank lines
  stripped; the episode's `initial_observation` is the room description (not the banner);
- `state` / `next_state`: {"location": room name, "description": the "look" text,
  "inventory": the "inventory" text, "facts": the logic facts as sorted strings such as
  "at(P, attic: r)", "score", "max_score"};
- `reward`: the score change; `terminated`: won or lost; `truncated`: `max_steps` reached;
- `info`: {"admissible_commands": the commands admissible in `state`, the set the action was
  chosen from (sorted); the next step's info holds those of `next_state`}.

Determinism: with the same seed, generation gives byte-identical .json/.ni files and the same
.z8 except its header serial number (the compile date, YYMMDD); TextWorld lists facts in
hash order, so they are sorted here, and the emulator is seeded per episode.
"""

from __future__ import annotations

import importlib.metadata
import os
import random
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
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

_STATUS_LINE = re.compile(r"\n>\s+-=.*$", flags=re.S)  # "\n>   -= Kitchen =-0/3"
_INFOS = (  # what TextWorld is asked to report after each command
    "admissible_commands",
    "description",
    "inventory",
    "facts",
    "policy_commands",
    "score",
    "max_score",
    "won",
    "lost",
    "objective",
)
_INSTALL = "pip install 'simworld[textworld]' (or pip install textworld==1.7.0)"

RULES = [
    "The game is played with short English commands; the admissible ones for each state are"
    " listed in the step's info.admissible_commands.",
    "A command that makes no sense or is impossible here leaves the world unchanged and the"
    " game says why.",
    "The score rises by one point for each part of the quest completed; the game is won when"
    " the score reaches max_score, and it then ends.",
    "'look' describes the current room and 'inventory' lists what the player carries; neither"
    " changes the world.",
]


@dataclass(frozen=True)
class GameSpec:
    """The generation parameters and seed of one game: they key the cache and the task id."""

    world_size: int
    nb_objects: int
    quest_length: int
    seed: int

    @property
    def key(self) -> str:
        return f"textworld-w{self.world_size}-o{self.nb_objects}-q{self.quest_length}-s{self.seed}"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/simworld/textworld`, else `~/.cache/simworld/textworld`."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "simworld" / "textworld"


class TextWorldEnv:
    """Records TextWorld episodes; see the module docstring for the record layout."""

    name = "textworld"

    def __init__(
        self,
        world_size: int = 5,
        nb_objects: int = 10,
        quest_length: int = 5,
        episodes_per_game: int = 1,
        explore: float = 0.3,
        max_steps: int = 100,
        cache_dir: str | Path | None = None,
    ) -> None:
        try:
            import textworld  # noqa: F401  (checked here so a missing extra fails at once)
        except ImportError as exc:
            raise EnvUnavailable(f"the textworld env needs TextWorld: {_INSTALL}") from exc
        for label, value in [
            ("world_size", world_size),
            ("nb_objects", nb_objects),
            ("quest_length", quest_length),
            ("episodes_per_game", episodes_per_game),
            ("max_steps", max_steps),
        ]:
            if value < 1:
                raise ValueError(f"{label} must be at least 1; got {value}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore is a probability in [0, 1]; got {explore}")
        self.world_size = world_size
        self.nb_objects = nb_objects
        self.quest_length = quest_length
        self.episodes_per_game = episodes_per_game
        self.explore = explore
        self.max_steps = max_steps
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.version = f"textworld=={importlib.metadata.version('textworld')}"
        self.volatile: list[VolatileField] = []

    def record(self, episodes: int | None, seed: int) -> Iterator[Episode]:
        """Yield `episodes` episodes determined by `seed`."""
        if episodes is None:
            raise ValueError("TextWorld's episode set is unbounded (every seed is a new game)")
        for index in range(episodes):
            yield self._episode(self.game_spec(seed, index), seed, index)

    def game_spec(self, seed: int, index: int) -> GameSpec:
        """The game that episode `index` of `record(..., seed)` plays."""
        game_seed = derive_seed("textworld", seed, index // self.episodes_per_game, "game")
        return GameSpec(self.world_size, self.nb_objects, self.quest_length, game_seed)

    def game_file(self, spec: GameSpec) -> Path:
        """The compiled game for `spec`, generated into the cache on first use."""
        folder = self.cache_dir / self.version.replace("==", "-") / spec.key
        path = folder / "game.z8"
        if not path.is_file():
            _generate(spec, folder)
        return path

    def _episode(self, spec: GameSpec, seed: int, index: int) -> Episode:
        episode_seed = derive_seed("textworld", seed, index, "episode")
        rng = random.Random(derive_seed("textworld", seed, index, "policy"))
        env = start_game(self.game_file(spec), episode_seed)
        try:
            game_state = env.reset()
            initial_state = state = game_state_json(game_state)
            initial = TextObservation(clean_feedback(game_state["description"]))
            objective = str(game_state["objective"])
            steps: list[Step] = []
            while True:
                admissible = sorted(game_state["admissible_commands"] or [])
                command = self._choose(rng, admissible, game_state["policy_commands"] or [])
                game_state, _, done = env.step(command)
                next_state = game_state_json(game_state)
                terminated = bool(done or game_state["won"] or game_state["lost"])
                steps.append(
                    Step(
                        action=TextAction(command),
                        observation=TextObservation(clean_feedback(game_state.feedback)),
                        state=state,
                        next_state=next_state,
                        reward=float(next_state["score"] - state["score"]),
                        terminated=terminated,
                        truncated=not terminated and len(steps) + 1 >= self.max_steps,
                        info={"admissible_commands": admissible},
                    )
                )
                state = next_state
                if steps[-1].terminated or steps[-1].truncated:
                    break
        finally:
            env.close()
        return Episode(
            episode_id=f"textworld-{seed}-{index}",
            env=self.name,
            task=Task(id=spec.key, instruction=objective),
            steps=steps,
            rules=list(RULES),
            initial_state=initial_state,
            initial_observation=initial,
            seed=episode_seed,
            provenance=Provenance(
                source=self.name,
                version=self.version,
                origin=f"record(seed={seed}) episode {index}; tw-make custom --world-size"
                f" {spec.world_size} --nb-objects {spec.nb_objects} --quest-length"
                f" {spec.quest_length} --seed {spec.seed}",
                policy=f"walkthrough, random admissible command with p={self.explore}",
            ),
            outcome=_outcome(game_state, len(steps)),
            volatile=list(self.volatile),
        )

    def _choose(self, rng: random.Random, admissible: list[str], walkthrough: list[str]) -> str:
        """The walkthrough's next command, or with probability `explore` (or when there is no
        walkthrough left) a random admissible one."""
        explore = rng.random() < self.explore
        if walkthrough and (not explore or not admissible):
            return str(walkthrough[0])
        if not admissible:
            return "look"
        return rng.choice(admissible)


def start_game(game_file: Path, seed: int) -> Any:
    """TextWorld's env for `game_file`, reporting what a record holds, with Jericho's RNG
    seeded (call `reset()` next)."""
    import textworld

    infos = textworld.EnvInfos(**dict.fromkeys(_INFOS, True))
    with warnings.catch_warnings():
        # Jericho does not know generated games; TextWorld's own wrapper tracks the score.
        warnings.filterwarnings("ignore", message=".*is not fully supported")
        env = textworld.start(str(game_file), request_infos=infos)
    env.seed(seed)  # Jericho's RNG; 0 would mean "from the clock"
    return env


def _generate(spec: GameSpec, folder: Path) -> None:
    """Generate and compile the game of `spec` into `folder` (game.z8, game.json, game.ni),
    atomically: it is built in a sibling temporary folder and renamed into place."""
    import textworld
    from textworld.generator import QuestGenerationError

    options = textworld.GameOptions()
    options.seeds = spec.seed
    options.nb_rooms = spec.world_size
    options.nb_objects = spec.nb_objects
    options.nb_parallel_quests = 1
    # tw-make custom's defaults, so the CLI reproduces the game (GameOptions' own differ).
    options.chaining.min_breadth, options.chaining.max_breadth = 1, 5
    options.chaining.min_depth = 1
    options.quest_length = spec.quest_length  # sets min/max length and max depth
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{spec.key}-", dir=folder.parent))
    options.path = str(building / "game.z8")
    try:
        try:
            textworld.make(options)
        except QuestGenerationError as exc:
            raise ValueError(
                f"TextWorld found no quest of length {spec.quest_length} in a world of"
                f" {spec.world_size} rooms (seed {spec.seed}): lower quest_length or raise"
                " world_size"
            ) from exc
        try:
            building.rename(folder)
        except OSError:
            if not (folder / "game.z8").is_file():  # another process won the race: keep theirs
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)


def clean_feedback(text: Any) -> str:
    """Feedback without the trailing status line and surrounding blank lines."""
    return _STATUS_LINE.sub("", str(text or "")).strip()


def game_state_json(game_state: Any) -> dict[str, JSON]:
    """A step's `state` / `next_state`, from TextWorld's game state (see the docstring)."""
    facts = sorted(str(fact) for fact in game_state["facts"] or [])
    return {
        "location": _location(game_state["facts"] or []),
        "description": clean_feedback(game_state["description"]),
        "inventory": clean_feedback(game_state["inventory"]),
        "facts": facts,
        "score": int(game_state["score"]),
        "max_score": int(game_state["max_score"]),
    }


def _location(facts: list[Any]) -> str | None:
    """The room the player is in: the fact at(P, room)."""
    for fact in facts:
        if fact.name == "at" and fact.arguments[0].type == "P":
            return str(fact.arguments[1].name)
    return None


def _outcome(game_state: Any, n_steps: int) -> Outcome:
    won, lost = bool(game_state["won"]), bool(game_state["lost"])
    score, max_score = int(game_state["score"]), int(game_state["max_score"])
    ending = "won" if won else "lost" if lost else f"not finished after {n_steps} steps"
    return Outcome(
        success=won,
        score=float(score),
        detail=f"{ending}; score {score}/{max_score}",
    )


__all__ = [
    "RULES",
    "GameSpec",
    "TextWorldEnv",
    "clean_feedback",
    "default_cache_dir",
    "game_state_json",
    "start_game",
]
