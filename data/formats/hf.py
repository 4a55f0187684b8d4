"""A bridge between Episodes and Hugging Face `datasets` (imported only when called).

    from simworld.data.formats.hf import dataset_to_episodes, episodes_to_dataset
    ds = episodes_to_dataset(read_episodes("dump.jsonl").episodes)
    ds.push_to_hub("me/my-trajectories")             # or ds.save_to_disk(...)
    result = dataset_to_episodes(ds)                 # ReadResult(episodes, bad, "hf")

One row per episode. Columns for people and trainers: `episode_id`, `env`, `task_id`,
`instruction`, `num_steps`, `total_reward` (null when no step has a reward), `success`,
`messages` (OpenAI chat messages: role, content, tool_calls with JSON-string arguments,
tool_call_id; what openai.py writes, without its extra key), `tools` (the OpenAI tool list as
a JSON string, since tool schemas have no fixed Arrow type); and `simworld`, the episode's
full JSON (to_json) as a string: the lossless column.

Reading takes the `simworld` column when a row has it, else the row's `messages` (and
`tools`, a JSON string or a list) as an OpenAI record. A row that cannot be read is a
BadRecord located "dataset[7]".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from simworld.data.formats import openai
from simworld.data.formats.base import ReadResult, expect_object, parse_json_text
from simworld.data.jsonio import BadRecord
from simworld.data.records import JSON, Episode, RecordError, from_json, to_json

if TYPE_CHECKING:
    import datasets

LOSSLESS = "simworld"


def episodes_to_dataset(episodes: Iterable[Episode]) -> datasets.Dataset:
    """One row per episode: readable columns plus the lossless `simworld` column."""
    import datasets

    rows = [_row(episode) for episode in episodes]
    return datasets.Dataset.from_list(rows, features=_features())


def _features() -> datasets.Features:
    from datasets import Features, Value

    call = {
        "id": Value("string"),
        "type": Value("string"),
        "function": {"name": Value("string"), "arguments": Value("string")},
    }
    message = {
        "role": Value("string"),
        "content": Value("string"),
        "tool_calls": [call],
        "tool_call_id": Value("string"),
    }
    return Features(
        {
            "episode_id": Value("string"),
            "env": Value("string"),
            "task_id": Value("string"),
            "instruction": Value("string"),
            "num_steps": Value("int64"),
            "total_reward": Value("float64"),
            "success": Value("bool"),
            "messages": [message],
            "tools": Value("string"),
            LOSSLESS: Value("string"),
        }
    )


def _row(episode: Episode) -> dict[str, Any]:
    record, _ = openai.render(episode)  # ValueError when a step does not fit a transcript
    messages = record["messages"]
    rewards = [step.reward for step in episode.steps if step.reward is not None]
    return {
        "episode_id": episode.episode_id,
        "env": episode.env,
        "task_id": episode.task.id,
        "instruction": episode.task.instruction,
        "num_steps": len(episode.steps),
        "total_reward": sum(rewards) if rewards else None,
        "success": episode.outcome.success,
        "messages": [
            {
                "role": m["role"],
                "content": m.get("content"),
                "tool_calls": m.get("tool_calls"),
                "tool_call_id": m.get("tool_call_id"),
            }
            for m in messages
        ],
        "tools": json.dumps(record.get("tools", []), ensure_ascii=False),
        LOSSLESS: json.dumps(to_json(episode), ensure_ascii=False),
    }


def dataset_to_episodes(ds: Iterable[dict[str, Any]]) -> ReadResult:
    """The episodes of a dataset made by `episodes_to_dataset`, or of any dataset with OpenAI
    `messages` (+ `tools`) columns; rows that cannot be read are listed in `bad`."""
    result = ReadResult(episodes=[], bad=[], format="hf")
    for index, row in enumerate(ds):
        location = f"dataset[{index}]"
        try:
            result.episodes.append(_episode(row, location))
        except RecordError as exc:
            result.bad.append(BadRecord(location, str(exc)))
    return result


def _episode(row: dict[str, Any], location: str) -> Episode:
    lossless = row.get(LOSSLESS)
    if isinstance(lossless, str) and lossless:
        value = parse_json_text(lossless)
        if value is None:
            raise RecordError(LOSSLESS, "not valid JSON")
        episode: Episode = from_json(Episode, expect_object(value, LOSSLESS))
        return episode
    record: dict[str, JSON] = {"messages": row.get("messages")}
    tools = row.get("tools")
    if isinstance(tools, str):
        tools = parse_json_text(tools) if tools.strip() else None
        if tools is None and row["tools"].strip():
            raise RecordError("tools", "expected a JSON string holding a list of tools")
    record["tools"] = tools
    if row.get("id") is not None:
        record["id"] = row["id"]
    parsed: Episode = openai.parse(record, location)
    return parsed


__all__ = ["LOSSLESS", "dataset_to_episodes", "episodes_to_dataset"]
