"""Runs whole verifiers 0.1.14 rollouts of simworld's `load_environment` (simworld/adapters/
verifiers.py) against a running simworld server, with a scripted model in place of an
LLM, and scores them with the env's rubric; prints one JSON report line. Run by
tests/server/test_adapter_verifiers.py with the python of a venv holding verifiers 0.1.14
and simworld (editable, no dependencies).

    python verifiers_adapter_check.py http://127.0.0.1:PORT

The scripted model replaces `get_model_response` (the one call verifiers makes to a
model per turn) and answers each turn with the next scripted message, recording the
tools it was offered. Everything else is verifiers' own loop: `rollout` (setup_state,
env_response, stop conditions, final env response, cleanup) and `Rubric.score_rollout`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import verifiers as vf

from simworld.adapters.client import ServerError, SimworldClient
from simworld.adapters.verifiers import STATE_KEY, SimworldVfEnv, load_environment

CLIENT = vf.ClientConfig(api_base_url="http://127.0.0.1:9/v1")  # never called


def call(call_id: str, name: str, arguments: dict[str, Any]) -> vf.ToolCall:
    return vf.ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))


def script(env: SimworldVfEnv, turns: list[Any]) -> list[list[str]]:
    """Make `env` answer each model turn with the next of `turns` (a list of tool calls or
    a text); the names of the tools offered at each turn are recorded and returned."""
    offered: list[list[str]] = []

    async def respond(state: vf.State, prompt: vf.Messages, *args: Any, **kwargs: Any) -> Any:
        offered.append([tool.name for tool in state["tool_defs"]])
        turn = turns.pop(0)
        calls = turn if isinstance(turn, list) else None
        message = vf.ResponseMessage(
            content=None if calls else turn,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            is_truncated=False,
        )
        return vf.Response(id="scripted", created=0, model="scripted", message=message)

    env.get_model_response = respond  # type: ignore[method-assign]
    return offered


async def rollout(env: SimworldVfEnv, row: dict[str, Any]) -> dict[str, Any]:
    state = await env.rollout(input=row, client=CLIENT, model="scripted")
    await env.rubric.score_rollout(state)
    episode = state[STATE_KEY]
    with SimworldClient(env.client.base_url) as client:
        try:
            client.episode(episode["episode_id"])
            deleted = False
        except ServerError as exc:
            deleted = exc.status == 404
    return {
        "completion": [m.model_dump(mode="json", exclude_none=True) for m in state["completion"]],
        "reward": state["reward"],
        "steps": episode["steps"],
        "stop": state.get("stop_condition"),
        "deleted": deleted,
        "error": None if state.get("error") is None else repr(state["error"]),
    }


def tool_env(base: str) -> dict[str, Any]:
    env = load_environment(base_url=base, env="mock", task_ids=["count-0"])
    row = dict(env.get_dataset()[0])
    report: dict[str, Any] = {
        "is_multiturn": isinstance(env, vf.MultiTurnEnv),
        "row": {key: row[key] for key in ("prompt", "info", "answer")},
    }
    offered = script(
        env,
        [
            [call("c1", "add", {"n": 4}), call("c2", "get", {})],
            [call("c3", "add", {"n": 0})],  # refused by the tool's schema: a counted step
            [call("c4", "add", {"n": 6})],
        ],
    )
    report["won"] = asyncio.run(rollout(env, row))
    report["offered"] = offered
    script(env, ["I am done."])  # no tool calls: the rollout ends
    report["no_tools"] = asyncio.run(rollout(env, row))
    return report


def text_env(base: str) -> dict[str, Any]:
    env = load_environment(base_url=base, env="frozenlake", num_examples=2, max_turns=2)
    rows = [dict(row) for row in env.get_dataset()]
    script(env, ["JUMP", "HOP"])
    return {
        "rows": [{"question": r["question"], "info": r["info"]} for r in rows],
        "rollout": asyncio.run(rollout(env, rows[0])),
    }


def main() -> None:
    os.environ.setdefault("PRIME_API_KEY", "unused")  # the never-called client's key
    base = sys.argv[1]
    print(json.dumps({"version": vf.__version__, "tool": tool_env(base), "text": text_env(base)}))


if __name__ == "__main__":
    main()
