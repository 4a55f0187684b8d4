"""OpenAI chat transcripts: plain dumps read (tool calls, results by id, text parts, MCP and
bare tool shapes, text games), our extra key is optional, and every malformed record is a
bad record naming the message index and field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simworld.data.formats import openai
from simworld.data.records import (
    Episode,
    Message,
    RecordError,
    TextAction,
    TextObservation,
    ToolCallsAction,
    ToolResultsObservation,
)


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _plain() -> dict[str, Any]:
    """A TRL-style record: parallel calls answered out of order, a closing answer."""
    return {
        "id": "row-7",
        "messages": [
            {"role": "system", "content": "You help."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Weather in "},
                    {"type": "text", "text": "Paris?"},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _call("a", "weather", '{"city": "Paris"}'),
                    _call("b", "time", '{"city": "Paris", '),
                ],
            },
            {"role": "tool", "tool_call_id": "b", "content": "Error: bad arguments"},
            {"role": "tool", "tool_call_id": "a", "content": '{"temp": 21}'},
            {"role": "assistant", "content": "21 degrees."},
        ],
        "tools": [
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
            {"name": "time", "description": "Local time.", "inputSchema": {"type": "object"}},
        ],
    }


def test_a_plain_dump_reads_without_the_extra_key() -> None:
    episode = openai.parse(_plain(), "dump.jsonl:3")
    assert (episode.episode_id, episode.env, episode.task.id) == ("row-7", "unknown", "row-7")
    assert episode.task.instruction == "Weather in Paris?"
    assert episode.provenance.source == "openai" and episode.provenance.origin == "dump.jsonl:3"
    (step,) = episode.steps
    assert step.messages == [
        Message("system", "You help."),
        Message("user", "Weather in Paris?"),
    ]
    assert isinstance(step.action, ToolCallsAction)
    first, second = step.action.calls
    assert (first.arguments, first.raw_arguments) == ({"city": "Paris"}, '{"city": "Paris"}')
    assert (second.arguments, second.raw_arguments) == (None, '{"city": "Paris", ')
    assert isinstance(step.observation, ToolResultsObservation)
    assert [(r.call_id, r.text, r.structured) for r in step.observation.results] == [
        ("a", '{"temp": 21}', {"temp": 21}),
        ("b", "Error: bad arguments", None),
    ]
    assert episode.final_messages == [Message("assistant", "21 degrees.")]
    assert [t.name for t in episode.tools] == ["weather", "time"]
    assert episode.tools[1].original["inputSchema"] == {"type": "object"}


def test_an_mcp_tool_is_written_as_an_openai_tool_and_kept_in_the_extra_key() -> None:
    episode = openai.parse(_plain(), "dump.jsonl:3")
    record, _ = openai.render(episode)
    assert record["tools"][1] == {
        "type": "function",
        "function": {
            "name": "time",
            "description": "Local time.",
            "parameters": {"type": "object"},
        },
    }
    assert record["tools"][0] == _plain()["tools"][0]  # already OpenAI: verbatim


def test_a_plain_text_game_reads_as_text_steps() -> None:
    record = {
        "messages": [
            {"role": "user", "content": "You are in a hall."},
            {"role": "assistant", "content": "go north"},
            {"role": "user", "content": "A kitchen."},
            {"role": "assistant", "content": "I give up."},
        ]
    }
    episode = openai.parse(record, "game.jsonl:1")
    assert episode.initial_observation == TextObservation("You are in a hall.")
    assert [(s.action, s.observation) for s in episode.steps] == [
        (TextAction("go north"), TextObservation("A kitchen."))
    ]
    assert episode.final_messages == [Message("assistant", "I give up.")]


def _error(record: dict[str, Any]) -> str:
    with pytest.raises(RecordError) as err:
        openai.parse(record, "x:1")
    return str(err.value)


def _mutated(change: Any) -> dict[str, Any]:
    record = _plain()
    change(record)
    return record


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["messages"][1].update(role="robot"),
            "messages[1].role: unknown role 'robot'; expected one of system, user, assistant, tool",
        ),
        (
            lambda r: r["messages"][3].update(tool_call_id="zzz"),
            "messages[3].tool_call_id: tool result for call 'zzz' with no matching call before it",
        ),
        (
            lambda r: r["messages"].insert(1, {"role": "tool", "tool_call_id": "a", "content": ""}),
            "messages[1].tool_call_id: tool result for call 'a' with no matching call before it",
        ),
        (
            lambda r: r["messages"].pop(4),
            "messages[2]: tool call 'a' (weather) has no tool result",
        ),
        (
            lambda r: r["messages"][4].update(tool_call_id="b"),
            "messages[4].tool_call_id: a second tool result for call 'b'",
        ),
        (
            lambda r: r["messages"][2]["tool_calls"][0]["function"].update(arguments={"city": "P"}),
            "messages[2].tool_calls[0].function.arguments: expected a string, got object",
        ),
        (
            lambda r: r["messages"][2]["tool_calls"][1].pop("id"),
            "messages[2].tool_calls[1].id: expected a string, got null",
        ),
        (
            lambda r: r["messages"][5].update(content=42),
            "messages[5].content: expected a string or a list of text parts, got int",
        ),
        (
            lambda r: r["messages"][1]["content"][0].update(type="image_url"),
            "messages[1].content[0].type: only text parts are supported, got 'image_url'",
        ),
        (
            lambda r: r["messages"][1].update(tool_calls=[_call("c", "x", "{}")]),
            "messages[1].tool_calls: only assistant messages make tool calls, not user",
        ),
        (lambda r: r.pop("messages"), "messages: missing required field"),
        (lambda r: r.update(messages={}), "messages: expected an array, got object"),
        (
            lambda r: r["tools"][0]["function"].pop("name"),
            "tools[0].function.name: expected a string, got null",
        ),
        (
            lambda r: r.update(simworld={"episode": {"seed": "7"}}),
            "simworld.episode.seed: expected an integer, got string ('7')",
        ),
        (
            lambda r: r.update(simworld={"steps": [{}, {}]}),
            "simworld.steps: 2 entries for the 1 steps of the transcript",
        ),
        (
            lambda r: r.update(simworld={"schema_version": 9}),
            "simworld.schema_version: schema_version 9 is not one this simworld reads (1)",
        ),
    ],
)
def test_malformed_records_name_the_message_and_field(change: Any, message: str) -> None:
    assert _error(_mutated(change)) == message


def test_not_an_object() -> None:
    assert _error([]) == "record: expected an object, got array"  # type: ignore[arg-type]


def test_without_the_extra_key_our_records_keep_their_steps(episodes: list[Episode]) -> None:
    for episode in episodes:
        record, _ = openai.render(episode)
        assert "simworld" not in record  # render alone is a plain OpenAI record
        plain = openai.parse(json.loads(json.dumps(record)), "x:1")
        assert len(plain.steps) == len(episode.steps)
