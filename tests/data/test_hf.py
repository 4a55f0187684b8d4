"""The Hugging Face `datasets` bridge: readable columns plus a lossless one, and plain
OpenAI-style datasets read too."""

from __future__ import annotations

import json

import pytest

from simworld.data.records import Episode

datasets = pytest.importorskip("datasets", reason="the hf bridge needs `datasets` (extra: hf)")

from simworld.data.formats.hf import dataset_to_episodes, episodes_to_dataset  # noqa: E402


def test_round_trip_through_a_dataset(episodes: list[Episode]) -> None:
    ds = episodes_to_dataset(episodes)
    assert ds.column_names == [
        "episode_id",
        "env",
        "task_id",
        "instruction",
        "num_steps",
        "total_reward",
        "success",
        "messages",
        "tools",
        "simworld",
    ]
    row = ds[0]
    assert (row["episode_id"], row["env"], row["task_id"], row["num_steps"]) == (
        "tools-0",
        "mock",
        "mock-scenario-3",
        2,
    )
    assert row["total_reward"] == 1.0 and row["success"] is True
    call = row["messages"][2]["tool_calls"][0]
    assert call["function"] == {"name": "cd", "arguments": '{"folder":"docs"}'}
    assert json.loads(row["tools"])[0]["function"]["name"] == "cd"
    result = dataset_to_episodes(ds)
    assert result.episodes == episodes and result.bad == []


def test_a_plain_openai_dataset_reads(episodes: list[Episode]) -> None:
    ds = episodes_to_dataset(episodes).remove_columns(["simworld"])
    result = dataset_to_episodes(ds)
    assert result.bad == []
    assert [len(e.steps) for e in result.episodes] == [len(e.steps) for e in episodes]
    assert result.episodes[0].steps[0].action == episodes[0].steps[0].action
    assert result.episodes[0].provenance.origin == "dataset[0]"


def test_bad_rows_are_listed() -> None:
    ds = datasets.Dataset.from_list(
        [
            {"messages": [{"role": "robot", "content": "x"}], "tools": "[]"},
            {"messages": [{"role": "user", "content": "hi"}], "tools": "[{"},
        ]
    )
    result = dataset_to_episodes(ds)
    assert [str(b) for b in result.bad] == [
        "dataset[0]: messages[0].role: unknown role 'robot'; expected one of system, user, "
        "assistant, tool",
        "dataset[1]: tools: expected a JSON string holding a list of tools",
    ]
