"""ShareGPT (LLaMA-Factory) transcripts: plain records read, parallel calls and their array
observation, tools as a JSON string, and malformed records named by turn and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simworld.data.formats import sharegpt
from simworld.data.records import Message, RecordError, ToolCallsAction, ToolResultsObservation


def _plain() -> dict[str, Any]:
    return {
        "conversations": [
            {"from": "human", "value": "Add 1 and 2, then double 5."},
            {
                "from": "function_call",
                "value": json.dumps(
                    [
                        {"name": "add", "arguments": {"a": 1, "b": 2}},
                        {"name": "double", "arguments": '{"x": 5'},
                    ]
                ),
            },
            {"from": "observation", "value": json.dumps(["3", "Error: bad JSON"])},
            {
                "from": "function_call",
                "value": json.dumps({"name": "double", "arguments": {"x": 5}}),
            },
            {"from": "observation", "value": "10"},
            {"from": "gpt", "value": "3 and 10."},
        ],
        "system": "You can call tools.",
        "tools": json.dumps(
            [{"name": "add", "parameters": {"type": "object"}}, {"name": "double"}]
        ),
    }


def test_a_plain_llamafactory_record_reads() -> None:
    episode = sharegpt.parse(_plain(), "calls.jsonl:1")
    assert [t.name for t in episode.tools] == ["add", "double"]
    first, second = episode.steps
    assert first.messages == [
        Message("system", "You can call tools."),
        Message("user", "Add 1 and 2, then double 5."),
    ]
    assert isinstance(first.action, ToolCallsAction)
    assert [(c.id, c.name, c.arguments, c.raw_arguments) for c in first.action.calls] == [
        ("call_0", "add", {"a": 1, "b": 2}, '{"a": 1, "b": 2}'),
        ("call_1", "double", None, '{"x": 5'),
    ]
    assert isinstance(first.observation, ToolResultsObservation)
    assert [r.text for r in first.observation.results] == ["3", "Error: bad JSON"]
    assert isinstance(second.action, ToolCallsAction)
    assert second.action.calls[0].id == "call_2"
    assert episode.final_messages == [Message("assistant", "3 and 10.")]


def _error(change: Any) -> str:
    record = _plain()
    change(record)
    with pytest.raises(RecordError) as err:
        sharegpt.parse(record, "x:1")
    return str(err.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["conversations"][0].update({"from": "bot"}),
            "conversations[0].from: unknown role 'bot'; expected one of human, gpt, "
            "function_call, observation, system",
        ),
        (
            lambda r: r["conversations"][2].update(value='["3"]'),
            "conversations[2].value: the observation after 2 calls must be a JSON array of 2 "
            "result texts",
        ),
        (
            lambda r: r["conversations"].insert(0, {"from": "observation", "value": "x"}),
            "conversations[0]: tool result with no matching call before it",
        ),
        (
            lambda r: r["conversations"].pop(4),
            "conversations[3]: tool call 'call_2' (double) has no tool result",
        ),
        (
            lambda r: r["conversations"][1].update(value="double(5)"),
            'conversations[1].value: expected JSON {"name", "arguments"} or a list of them',
        ),
        (
            lambda r: r["conversations"][3].update(value='{"arguments": {}}'),
            "conversations[3].value.name: expected a string, got null",
        ),
        (
            lambda r: r["conversations"][3].update(value='{"name": "double", "arguments": 5}'),
            "conversations[3].value.arguments: expected an object or a string",
        ),
        (
            lambda r: r["conversations"][5].update(value=None),
            "conversations[5].value: expected a string, got null",
        ),
        (lambda r: r.update(tools="[{"), "tools: expected a JSON string holding a list of tools"),
        (lambda r: r.pop("conversations"), "conversations: missing required field"),
    ],
)
def test_malformed_records_name_the_turn_and_field(change: Any, message: str) -> None:
    assert _error(change) == message
