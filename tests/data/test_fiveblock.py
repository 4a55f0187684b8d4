"""The five-block world-model format: records laid out like the public MDLM world-model corpus
read as one-step Episodes (state, task, tools, rules, steering, history, action, target),
are detected ahead of plain OpenAI records, and malformed ones are named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simworld.data import detect_format, read_episodes
from simworld.data.formats import fiveblock
from simworld.data.records import (
    RecordError,
    TextAction,
    TextObservation,
    ToolCallsAction,
    ToolResultsObservation,
)

TOOLS = [{"name": "venmo__login", "parameters": {"type": "object", "properties": {}}}]
SYSTEM = (
    "## ENVIRONMENT STATE\n```json\n"
    + json.dumps({"balance": 12.5, "friends": ["ann"]})
    + "\n```\n\n## TASK CONTEXT\nPredict the JSON tool response for this action.\n\n"
    "## TOOL SCHEMAS\n" + json.dumps(TOOLS) + "\n\n"
    "## DOMAIN RULES\n- Validate arguments first.\n- Return strict JSON.\n"
    "    (indented detail)\n\n"
    "## COMPUTED QUERY STATE\n- matched_count_after_filters: 0\n\n"
    "## STEERING DIRECTIVES\n- The call is invalid; return an error.\n\n"
    "PREDICTION TARGET: The strict JSON tool response."
)


def _tool_record() -> dict[str, Any]:
    history = [{"role": "user", "content": "pay ann"}]
    action = {"name": "venmo__login", "arguments": {"username": "x"}}
    return {
        "dataset": "appworld",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"State: {json.dumps(history)}\n\nAction: {json.dumps(action)}",
            },
            {
                "role": "assistant",
                "content": '<tool_response>{"error": "Invalid password"}</tool_response>',
            },
        ],
    }


def _text_record() -> dict[str, Any]:
    system = (
        "## ENVIRONMENT STATE\nYou are at cabinet 1. The cabinet 1 is closed.\n\n"
        "## TASK CONTEXT\nPredict the textworld feedback.\n\n"
        "## DOMAIN RULES\n- Unknown actions: Nothing happens.\n\n"
        "## STEERING DIRECTIVES\n- One short paragraph.\n"
    )
    return {
        "messages": [
            {"role": "system", "content": system},
            {
                "role": "user",
                "content": "## RECENT HISTORY\n> look\nNothing.\n\n## ACTION\nopen cabinet 1",
            },
            {"role": "assistant", "content": "You open the cabinet 1. It is empty."},
        ]
    }


def test_a_tool_call_record_reads_as_a_one_step_episode() -> None:
    episode = fiveblock.parse(_tool_record(), "corpus.jsonl:4")
    assert (episode.env, episode.episode_id, episode.provenance.source) == (
        "appworld",
        "corpus.jsonl:4",
        "five-block",
    )
    assert episode.initial_state == {"balance": 12.5, "friends": ["ann"]}
    assert episode.task.instruction == "Predict the JSON tool response for this action."
    assert [t.name for t in episode.tools] == ["venmo__login"]
    assert episode.rules == [
        "Validate arguments first.",
        "Return strict JSON.",
        "    (indented detail)",
    ]
    (step,) = episode.steps
    assert step.state == episode.initial_state
    assert isinstance(step.action, ToolCallsAction)
    (call,) = step.action.calls
    assert (call.id, call.name, call.arguments) == ("call_0", "venmo__login", {"username": "x"})
    assert isinstance(step.observation, ToolResultsObservation)
    (result,) = step.observation.results
    assert result.structured == {"error": "Invalid password"} and result.is_error
    assert result.text.startswith("<tool_response>")  # the target verbatim
    assert step.info == {
        "steering": ["The call is invalid; return an error."],
        "history": [{"role": "user", "content": "pay ann"}],
        "prediction_target": "The strict JSON tool response.",
        "sections": {"COMPUTED QUERY STATE": "- matched_count_after_filters: 0"},
    }


def test_a_text_record_with_action_and_history_sections() -> None:
    episode = fiveblock.parse(_text_record(), "x:1")
    (step,) = episode.steps
    assert step.action == TextAction("open cabinet 1")
    assert step.observation == TextObservation("You open the cabinet 1. It is empty.")
    assert step.state == "You are at cabinet 1. The cabinet 1 is closed."
    assert step.info["history"] == "> look\nNothing."
    assert episode.env == "unknown" and episode.tools == []


def test_schemas_that_are_not_json_are_kept_as_text() -> None:
    record = _tool_record()
    record["messages"][0]["content"] = SYSTEM.replace(json.dumps(TOOLS), "- venmo__login(username)")
    (step,) = fiveblock.parse(record, "x:1").steps
    assert step.info["tool_schemas"] == "- venmo__login(username)"


def test_detected_ahead_of_openai(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps(_tool_record()) + "\n" + json.dumps(_text_record()) + "\n")
    assert detect_format(path) == "five-block"
    result = read_episodes(path)
    assert len(result.episodes) == 2 and result.bad == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda r: r["messages"][0].update(content="## TASK CONTEXT\nx"),
            "messages: no '## ENVIRONMENT STATE' section in the system or user messages",
        ),
        (
            lambda r: r["messages"].pop(),
            "messages[1].role: the last message is the assistant's prediction target; "
            "got role 'user'",
        ),
        (
            lambda r: r["messages"][1].update(content="State: []"),
            "messages: no action: expected an '## ACTION' section or an 'Action:' line in the "
            "user turn",
        ),
        (
            lambda r: r["messages"].insert(1, {"role": "tool", "content": "x"}),
            "messages[1].role: unknown role 'tool'; expected system or user",
        ),
        (
            lambda r: r["messages"][0].update(content=SYSTEM.replace('"name"', '"nom"')),
            "## TOOL SCHEMAS[0].name: expected a string, got null",
        ),
        (lambda r: r.update(dataset=3), "dataset: expected a string, got int"),
    ],
)
def test_malformed_records(change: Any, message: str) -> None:
    record = _tool_record()
    change(record)
    with pytest.raises(RecordError) as err:
        fiveblock.parse(record, "x:1")
    assert str(err.value) == message
