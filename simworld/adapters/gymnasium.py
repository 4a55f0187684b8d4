"""A `gymnasium.Env` over one episode at a time of a running simworld server (gymnasium is
the `gym` extra; this module is the only one here that imports it).

    from simworld.adapters.gymnasium import SimworldGymEnv

    env = SimworldGymEnv("http://127.0.0.1:8000", "frozenlake")
    obs, info = env.reset(seed=3)                   # or options={"task_id": "frozenlake-..."}
    obs, reward, terminated, truncated, info = env.step("DOWN")
    env.close()                                     # deletes the episode on the server

    tools = SimworldGymEnv("http://127.0.0.1:8000", "mock")
    obs, info = tools.reset(seed=0)                 # obs: the task's instruction
    info["tools"]                                   # the task's OpenAI function tools
    obs, reward, terminated, truncated, info = tools.step(
        {"name": "add", "arguments": '{"n": 3}'})   # obs: '{"total": 3}'

Spaces (both `gymnasium.spaces.Text`, or a Dict of them; charsets `string.printable`):
- observation: `Text(max_observation_chars, min_length=0)`. Observations are the server's
  text, never altered or cut: one longer than `max_observation_chars` (default 100,000),
  or with a character outside `charset`, lies outside the space. Pass
  `charset=unicode_charset()` for a space that holds every printable Unicode character
  (a 9 MB character table per copy of the space, which vector envs make per env).
- text envs (frozenlake) act with `Text(max_action_chars)` (default 4,096): the action text.
- tool envs (mock, bfcl) act with `Dict({"name": Text(1..64, [A-Za-z0-9_.-]), "arguments":
  Text(0..max_action_chars)})`: the function part of one OpenAI tool call, arguments as a
  JSON string. `arguments` may also be a dict (sent as JSON), and a list of such calls is
  taken as one parallel action; both lie outside the declared space. Any name and any
  argument string is a valid step: the server answers an unknown tool or arguments that
  break the tool's schema with the error the real API gives, and counts the step. So a
  sampled action always steps, which is what `gymnasium.utils.env_checker.check_env` asks.

Reset. `seed` goes to the server, which picks the task with it (the same seed gives the
same task over REST, OpenEnv and here); without one the env's own `np_random` draws it,
so `reset(seed=s)` followed by seedless resets replays the same tasks. `options` may hold
`task_id` and `initial_state`. A reset deletes the previous episode before starting the
next. The first observation is the env's first text (text envs), else the task's
instruction; `info` holds `episode_id`, `task_id`, `instruction`, `tools` (OpenAI format),
`observation` (the simworld Observation JSON, or None) and the server's reset info.

Step. `terminated` and `truncated` are the server's, kept apart (truncated: the env's or
the server's step limit). `info` is the server's step info (`source`, `retries`,
`problems`, `step`) plus `messages` (OpenAI tool messages) and `observation` (the
simworld Observation JSON). Stepping a finished episode raises ServerError (409).
"""

from __future__ import annotations

import functools
import json
import string
import sys
from typing import Any

import gymnasium
from gymnasium import spaces

from simworld.adapters.client import DEFAULT_TIMEOUT, SimworldClient, Started, tool_call

MAX_OBSERVATION_CHARS = 100_000
MAX_ACTION_CHARS = 4096
MAX_TOOL_NAME_CHARS = 64  # OpenAI's limit on a function name
TOOL_NAME_CHARSET = string.ascii_letters + string.digits + "_.-"
_SEED_BOUND = 2**31 - 1


@functools.cache
def unicode_charset() -> frozenset[str]:
    """Every printable Unicode character, plus tab, newline and carriage return (0.1 s to
    build, once per process)."""
    printable = (chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    return frozenset(ch for ch in printable if ch.isprintable()) | frozenset("\t\n\r")


class SimworldGymEnv(gymnasium.Env[str, Any]):
    """One simworld env of the server at `base_url` as a gymnasium Env (see the module
    docstring for the spaces, reset and step)."""

    def __init__(
        self,
        base_url: str,
        env: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_observation_chars: int = MAX_OBSERVATION_CHARS,
        max_action_chars: int = MAX_ACTION_CHARS,
        charset: frozenset[str] | str = string.printable,
        client: SimworldClient | None = None,
    ) -> None:
        self.episode_id: str | None = None
        self._steps = 0
        self._owns_client = client is None
        self.client = client or SimworldClient(base_url, token=token, timeout=timeout)
        info = next((e for e in self.client.envs() if e["name"] == env), None)
        if info is None:
            self.close()
            raise ValueError(f"the server at {base_url} serves no env {env!r}")
        self.env_name = env
        self.action_kind: str = info["action_kind"]
        self.observation_space = spaces.Text(max_observation_chars, min_length=0, charset=charset)
        self.action_space: spaces.Space[Any] = _action_space(self.action_kind, max_action_chars)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"task_id", "initial_state"})
        if unknown:
            raise ValueError(f"reset options take task_id and initial_state, not {unknown}")
        if seed is None:
            seed = int(self.np_random.integers(_SEED_BOUND))
        self._end_episode()
        started = self.client.start(
            self.env_name,
            task_id=options.get("task_id"),
            seed=seed,
            initial_state=options.get("initial_state"),
        )
        self.episode_id, self._steps = started.episode_id, 0
        return _first_text(started), _reset_info(started)

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.episode_id is None:
            raise RuntimeError("call reset() before step()")
        if self.action_kind == "text":
            if not isinstance(action, str):
                raise TypeError(f"a text env takes a str action, got {type(action).__name__}")
            stepped = self.client.step(self.episode_id, text=action)
        else:
            calls = action if isinstance(action, list) else [action]
            stepped = self.client.step(
                self.episode_id, tool_calls=[self._call(c, i) for i, c in enumerate(calls)]
            )
        self._steps += 1
        info = {**stepped.info, "messages": stepped.messages, "observation": stepped.observation}
        return stepped.text, stepped.reward, stepped.terminated, stepped.truncated, info

    def close(self) -> None:
        """Delete the episode (if any) and close the connection; safe to call twice."""
        self._end_episode()
        if self._owns_client:
            self.client.close()

    def _call(self, call: Any, index: int) -> dict[str, Any]:
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            raise TypeError(
                'a tool env takes {"name": str, "arguments": str | dict} (or a list of them), '
                f"got {call!r}"
            )
        arguments = call["arguments"]
        if not isinstance(arguments, str | dict):
            raise TypeError(f"arguments must be a JSON string or a dict, got {arguments!r}")
        return tool_call(str(call["name"]), arguments, f"call_{self._steps}_{index}")

    def _end_episode(self) -> None:
        if self.episode_id is not None:
            self.client.close_episode(self.episode_id, missing_ok=True)
            self.episode_id = None


def _action_space(action_kind: str, max_chars: int) -> spaces.Space[Any]:
    text = spaces.Text(max_chars, min_length=1, charset=string.printable)
    if action_kind == "text":
        return text
    name = spaces.Text(MAX_TOOL_NAME_CHARS, min_length=1, charset=TOOL_NAME_CHARSET)
    arguments = spaces.Text(max_chars, min_length=0, charset=string.printable)
    return spaces.Dict({"name": name, "arguments": arguments})


def _first_text(started: Started) -> str:
    text = started.text
    return started.instruction if text is None else text


def _reset_info(started: Started) -> dict[str, Any]:
    return {
        **started.info,
        "episode_id": started.episode_id,
        "task_id": started.task_id,
        "instruction": started.instruction,
        "tools": started.tools,
        "observation": started.observation,
    }


def action_json(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    """A tool env's action in the declared space: `{"name", "arguments": JSON string}`."""
    return {"name": name, "arguments": json.dumps(arguments)}


__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_OBSERVATION_CHARS",
    "SimworldGymEnv",
    "action_json",
    "unicode_charset",
]
