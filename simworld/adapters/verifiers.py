"""A verifiers environment over a running simworld server: `load_environment`, for
verifiers 0.1.14 (the classic `vf.MultiTurnEnv` API; 0.3.x moved it to
`verifiers.legacy` and 0.4.0 removed it). verifiers is not a simworld dependency, and
0.1.14 pins datasets<4.7, so it usually lives in its own virtualenv beside simworld.

    from simworld.adapters.verifiers import load_environment

    vf_env = load_environment(base_url="http://127.0.0.1:8000", env="mock", num_examples=8)
    vf_env.get_dataset()[0]["prompt"]        # [{"role": "user", "content": <instruction>}]
    results = vf_env.evaluate(client=..., model="...")   # any OpenAI-compatible model

    # or as an installed environment module: vf-eval <module> -a '{"base_url": ..., "env": ...}'
    # (SIMWORLD_URL / SIMWORLD_ENV stand in for base_url / env when they are not given)

verifiers 0.4.0 ("v1": Taskset + Harness + Toolset) needs no adapter: its
`OpenEnvTaskset(base_url=...)` speaks OpenEnv, which the server serves at `/envs/<env>`.

The dataset: one row per `task_ids` entry, else one per seed in range(num_examples) (the
task each seed picks, as the server's REST and OpenEnv routes pick it). Building it starts
and deletes one episode per row, to read the task's instruction and tools. A row holds
`question` (the instruction, and for text envs the first observation after a blank
line), `answer` "" and `info` (JSON text): `task_id`, plus `tool_defs` (verifiers' flat
`{name, description, parameters}`) for tool envs, so each row offers its own task's tools.

A rollout (`SimworldVfEnv`): `setup_state` starts an episode of the row's task;
`env_response` takes the last assistant message as one step: its tool calls (their
arguments passed on as the JSON text the model wrote; the server answers malformed or
schema-breaking ones with the real API's error) become tool messages, or, in a text env,
its text becomes the action and the observation comes back as a user message. When the
episode terminates or is truncated the step's messages are the final env response, which
ends the rollout. A tool-env turn without tool calls ends it too (as `vf.ToolEnv` does).
The reward (rubric function `simworld_reward`) is the sum of the episode's step rewards;
the episode is deleted in the rollout's cleanup. HTTP calls run in worker threads, so
concurrent rollouts step the server concurrently (and meet in its batching).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import verifiers as vf
from datasets import Dataset

from simworld.adapters.client import DEFAULT_TIMEOUT, SimworldClient, Started, Stepped

VERIFIERS_VERSION = "0.1.14"  # the version this adapter was written and tested against
STATE_KEY = "simworld"  # the rollout state's entry: {"episode_id", "reward", "steps"}


class SimworldVfEnv(vf.MultiTurnEnv):  # type: ignore[misc]
    """A simworld env of the server at `base_url` as a verifiers multi-turn env (see the
    module docstring)."""

    def __init__(
        self,
        *,
        base_url: str,
        env: str,
        action_kind: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("rubric", vf.Rubric(funcs=[simworld_reward]))
        super().__init__(**kwargs)
        self.env_name = env
        self.action_kind = action_kind
        self.client = SimworldClient(base_url, token=token, timeout=timeout)

    async def setup_state(self, state: vf.State) -> None:
        info = state["info"]
        started = await asyncio.to_thread(self.client.start, self.env_name, task_id=info["task_id"])
        state[STATE_KEY] = {"episode_id": started.episode_id, "reward": 0.0, "steps": 0}

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> Any:
        last = messages[-1]
        episode = state[STATE_KEY]
        if self.action_kind == "text":
            text = last.content if isinstance(last.content, str) else ""
            stepped = await asyncio.to_thread(self.client.step, episode["episode_id"], text=text)
            response: list[Any] = [vf.UserMessage(content=stepped.text)]
        else:
            calls = [_openai_call(call) for call in last.tool_calls or []]
            stepped = await asyncio.to_thread(
                self.client.step, episode["episode_id"], tool_calls=calls
            )
            response = [vf.ToolMessage(**message) for message in stepped.messages]
        _record(episode, stepped)
        if stepped.done:
            state["final_env_response"] = response
        return response

    @vf.stop  # type: ignore[untyped-decorator]
    async def no_tools_called(self, state: vf.State) -> bool:
        """A tool env's rollout ends at an assistant turn without tool calls."""
        if self.action_kind == "text" or not state["trajectory"]:
            return False
        last = state["trajectory"][-1]["completion"][-1]
        return bool(last.role == "assistant" and not last.tool_calls)

    @vf.cleanup  # type: ignore[untyped-decorator]
    async def close_episode(self, state: vf.State) -> None:
        """Delete the rollout's episode on the server."""
        episode = state.get(STATE_KEY)
        if episode is not None:
            await asyncio.to_thread(
                self.client.close_episode, episode["episode_id"], missing_ok=True
            )

    @vf.teardown  # type: ignore[untyped-decorator]
    async def close_client(self) -> None:
        self.client.close()


async def simworld_reward(state: vf.State) -> float:
    """The sum of the rollout's step rewards, as the simulated env gave them."""
    episode = state.get(STATE_KEY) or {}
    return float(episode.get("reward", 0.0))


def load_environment(
    base_url: str | None = None,
    env: str | None = None,
    *,
    task_ids: list[str] | None = None,
    num_examples: int = 8,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    **kwargs: Any,
) -> SimworldVfEnv:
    """The verifiers environment for `env` on the server at `base_url` (see the module
    docstring); `kwargs` go to `vf.MultiTurnEnv` (max_turns, system_prompt, rubric, ...)."""
    base_url = base_url or os.environ.get("SIMWORLD_URL")
    env = env or os.environ.get("SIMWORLD_ENV")
    if not base_url or not env:
        raise ValueError("load_environment needs base_url and env (or SIMWORLD_URL, SIMWORLD_ENV)")
    token = token or os.environ.get("SIMWORLD_TOKEN")
    with SimworldClient(base_url, token=token, timeout=timeout) as client:
        picks: list[dict[str, Any]] = (
            [{"task_id": t} for t in task_ids]
            if task_ids is not None
            else [{"seed": seed} for seed in range(num_examples)]
        )
        starts = [client.start(env, **pick) for pick in picks]
        for started in starts:
            client.close_episode(started.episode_id)
    if not starts:
        raise ValueError("load_environment needs at least one task (task_ids or num_examples)")
    return SimworldVfEnv(
        base_url=base_url,
        env=env,
        action_kind=starts[0].action_kind,
        token=token,
        timeout=timeout,
        dataset=Dataset.from_list([_row(started) for started in starts]),
        **kwargs,
    )


def _row(started: Started) -> dict[str, str]:
    """A dataset row for the task an episode started."""
    first = started.text
    question = started.instruction if first is None else f"{started.instruction}\n\n{first}"
    info: dict[str, Any] = {"task_id": started.task_id}
    if started.action_kind == "tool_calls":
        info["tool_defs"] = [_tool_def(tool) for tool in started.tools]
    return {"question": question, "answer": "", "info": json.dumps(info)}


def _tool_def(tool: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool in verifiers' flat form."""
    function = tool["function"]
    return {
        "name": function["name"],
        "description": function.get("description") or "",
        "parameters": function.get("parameters") or {"type": "object", "properties": {}},
    }


def _openai_call(call: Any) -> dict[str, Any]:
    """A verifiers ToolCall (flat: id, name, arguments text) as an OpenAI tool call."""
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}


def _record(episode: dict[str, Any], stepped: Stepped) -> None:
    episode["reward"] += stepped.reward
    episode["steps"] += 1


__all__ = [
    "STATE_KEY",
    "VERIFIERS_VERSION",
    "SimworldVfEnv",
    "load_environment",
    "simworld_reward",
]
