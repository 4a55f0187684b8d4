"""An OpenEnv `Environment` (openenv-core 0.3.0, import name `openenv`) that proxies to a
running simworld server, for frameworks that import environment classes in-process
(NeMo Gym's OpenEnv resources server takes `env_class: "pkg.mod.Cls"` and calls `Cls()`).
openenv-core is not a simworld dependency: install it beside simworld.

    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
    from simworld.adapters.openenv import SimworldEnvironment

    env = SimworldEnvironment("http://127.0.0.1:8000", "mock")
    obs = env.reset(task_id="count-0")              # obs.instruction, obs.tools
    obs = env.step(ListToolsAction())               # ListToolsObservation (not a step)
    obs = env.step(CallToolAction(tool_name="add", arguments={"n": 3}))
    obs.result["data"], obs.reward, obs.done        # {"total": 3}, 0.0, False
    env.state.step_count                            # 1
    env.close()                                     # deletes the episode on the server

    # NeMo Gym (resources_servers/openenv): SIMWORLD_URL=http://... SIMWORLD_ENV=mock
    #   env_class: "simworld.adapters.openenv.SimworldEnvironment"
    #   action_class: "openenv.core.env_server.mcp_types.CallToolAction"   is_mcp: true
    # a text env (frozenlake): action_class "simworld.adapters.openenv.MessageAction"

It proxies to the server's own OpenEnv HTTP routes (`/envs/<env>/reset`, `/step`,
`/state`, `/metadata`; server/openenv.py), each instance keyed by its own random
`episode_id`, so its observations are exactly those OpenEnv's wire clients get, turned
into openenv-core's types:
- reset: `SimworldResetObservation{instruction, tools (tool envs), text (text envs)}`;
  `seed`, `task_id` and `initial_state` go to the server; an `episode_id` passed in is
  not used as the key (two instances given one id would share a session);
- tool envs: `ListToolsAction` answers `ListToolsObservation{tools}` without taking a
  step; `CallToolAction` takes one, answering `CallToolObservation{tool_name, result,
  error}` with `result` shaped as FastMCP's CallToolResult dict (`content`,
  `structured_content`, `meta`, `data`, `is_error`) and `error` a ToolError
  (`invalid_args` / `tool_not_found`) when schema validation refused the call;
- text envs: `MessageAction{message}` answers `SimworldTextObservation{text}`;
- `reward` and `done` (terminated or truncated) on every observation; `state` is the
  server's State (`episode_id`, `step_count`, `task_id`, `state`, `done`).
A server error (the episode is over: 409; an unknown task: 404) raises ServerError.
Without arguments the constructor reads `SIMWORLD_URL`, `SIMWORLD_ENV` and (optionally)
`SIMWORLD_TOKEN`, so a framework that calls `Cls()` can use the class as it is.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from simworld.adapters.client import DEFAULT_TIMEOUT, SimworldClient

OPENENV_CORE_VERSION = "0.3.0"  # the version these types were read from


class MessageAction(Action):  # type: ignore[misc]
    """A text env's action (the field OpenEnv's own text envs use)."""

    message: str = Field(description="The text action (FrozenLake: LEFT, DOWN, RIGHT, UP)")


class SimworldResetObservation(Observation):  # type: ignore[misc]
    """What a reset shows: the task's instruction and, by env kind, its tools or its
    first text (None when the reset gave an explicit initial_state)."""

    instruction: str = Field(description="The task's instruction")
    tools: list[Tool] = Field(default_factory=list, description="The task's tools")
    text: str | None = Field(default=None, description="A text env's first observation")


class SimworldTextObservation(Observation):  # type: ignore[misc]
    """A text env's observation after a step."""

    text: str = Field(description="What the env shows")


class SimworldEnvironment(Environment):  # type: ignore[misc]
    """One simworld env served at `base_url`, one episode per instance (see the module
    docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        base_url: str | None = None,
        env: str | None = None,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__()
        base_url = base_url or os.environ.get("SIMWORLD_URL")
        env = env or os.environ.get("SIMWORLD_ENV")
        if not base_url or not env:
            raise ValueError(
                "SimworldEnvironment needs the server and env: pass base_url and env, or "
                "set SIMWORLD_URL and SIMWORLD_ENV"
            )
        token = token or os.environ.get("SIMWORLD_TOKEN")
        self.env_name = env
        self.client = SimworldClient(base_url, token=token, timeout=timeout)
        self.episode_id: str | None = None
        self._prefix = f"/envs/{env}"

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> SimworldResetObservation:
        """Start a new episode (`task_id`, else the task `seed` picks; `initial_state`)."""
        self._close_episode()
        key = secrets.token_urlsafe(24)
        body: dict[str, Any] = {"episode_id": key, "seed": seed}
        body.update({k: kwargs[k] for k in ("task_id", "initial_state") if k in kwargs})
        reply = self.client.request("POST", f"{self._prefix}/reset", body)
        self.episode_id = key
        return SimworldResetObservation(
            **reply["observation"], reward=reply["reward"], done=reply["done"]
        )

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """One action: CallToolAction / ListToolsAction (tool envs), MessageAction (text)."""
        if self.episode_id is None:
            raise RuntimeError("call reset() before step()")
        wire = action.model_dump(mode="json", exclude={"metadata"})
        body = {"action": wire, "episode_id": self.episode_id}
        reply = self.client.request("POST", f"{self._prefix}/step", body)
        fields = {**reply["observation"], "reward": reply["reward"], "done": reply["done"]}
        if isinstance(action, CallToolAction):
            return CallToolObservation(**fields)
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(**fields)
        return SimworldTextObservation(**fields)

    @property
    def state(self) -> State:
        """The server's State of this instance's episode (an empty State before a reset)."""
        if self.episode_id is None:
            return State()
        params = {"episode_id": self.episode_id}
        return State(**self.client.request("GET", f"{self._prefix}/state", params=params))

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(**self.client.request("GET", f"{self._prefix}/metadata"))

    def close(self) -> None:
        """Delete the episode on the server and close the connection."""
        self._close_episode()
        self.client.close()

    def _close_episode(self) -> None:
        if self.episode_id is not None:
            self.client.close_episode(self.episode_id, missing_ok=True)
            self.episode_id = None


__all__ = [
    "OPENENV_CORE_VERSION",
    "MessageAction",
    "SimworldEnvironment",
    "SimworldResetObservation",
    "SimworldTextObservation",
]
