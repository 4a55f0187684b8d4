"""The core records: exact JSON round trip, tagged variants, and validation messages that
name the field and the rule."""

from __future__ import annotations

import json

import pytest

from simworld.data.records import (
    Episode,
    Message,
    Outcome,
    Provenance,
    RecordError,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
    from_json,
    to_json,
)


def _episode() -> Episode:
    spec = ToolSpec(
        name="cd",
        description="Change directory.",
        input_schema={"type": "object", "properties": {"folder": {"type": "string"}}},
        output_schema={"type": "object"},
        original={"name": "cd", "parameters": {"type": "dict"}, "description": "Change directory."},
    )
    calls = ToolCallsAction(
        calls=[
            ToolCall(
                id="c0", name="cd", arguments={"folder": "docs"}, raw_arguments='{"folder":"docs"}'
            ),
            ToolCall(id="c1", name="cd", arguments=None, raw_arguments='{"folder": "do'),
        ],
        content="Let me look.",
    )
    obs = ToolResultsObservation(
        results=[
            ToolResult(call_id="c0", text='{"cwd": "/docs"}', structured={"cwd": "/docs"}),
            ToolResult(call_id="c1", text="Error: bad JSON", is_error=True),
        ]
    )
    return Episode(
        episode_id="ep-1",
        env="mock",
        task=Task(id="scenario-1", instruction="go to docs", apis=["FileSystem"]),
        steps=[
            Step(
                action=calls,
                observation=obs,
                state={"cwd": "/"},
                next_state={"cwd": "/docs"},
                reward=0.5,
                info={"turn": 0},
                messages=[Message(role="user", content="go to docs")],
            ),
            Step(
                action=TextAction(text="look"),
                observation=TextObservation(text="A room."),
                terminated=True,
            ),
        ],
        tools=[spec],
        initial_state={"cwd": "/"},
        initial_observation=TextObservation(text="Welcome"),
        seed=7,
        provenance=Provenance(source="mock", version="1", origin="x:1", policy="ground_truth"),
        outcome=Outcome(success=True, score=1.0),
        volatile=[VolatileField(key="message_id", kind="id", pattern=r"^\d+$")],
        final_messages=[Message(role="assistant", content="Done.")],
    )


def test_round_trip_is_exact() -> None:
    episode = _episode()
    text = json.dumps(to_json(episode))
    back = from_json(Episode, json.loads(text))
    assert back == episode
    assert json.dumps(to_json(back)) == text


def test_tagged_variants_decode_to_their_classes() -> None:
    back = from_json(Episode, to_json(_episode()))
    assert isinstance(back.steps[0].action, ToolCallsAction)
    assert isinstance(back.steps[1].action, TextAction)
    assert isinstance(back.steps[1].observation, TextObservation)
    assert back.steps[0].action.calls[1].arguments is None


def test_integer_reward_becomes_float() -> None:
    obj = to_json(_episode())
    obj["steps"][0]["reward"] = 1
    assert from_json(Episode, obj).steps[0].reward == 1.0


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.update(episode_id=3), "episode_id: expected a string, got int (3)"),
        (lambda o: o.pop("task"), "task: missing required field of Episode"),
        (lambda o: o.update(colour="red"), "colour: unknown field for Episode"),
        (
            lambda o: o["steps"][0]["action"].update(kind="dance"),
            "steps[0].action.kind: expected one of ['tool_calls', 'text'], got 'dance'",
        ),
        (
            lambda o: o["steps"][0]["action"]["calls"][0].update(name=None),
            "steps[0].action.calls[0].name: expected a string, got null (None)",
        ),
        (
            lambda o: o["steps"][1].update(reward="1"),
            "steps[1].reward: expected a number, got string ('1')",
        ),
        (
            lambda o: o["steps"][1].update(terminated=1),
            "steps[1].terminated: expected a boolean, got int (1)",
        ),
        (
            lambda o: o["steps"][0]["messages"][0].update(role="robot"),
            "steps[0].messages[0].role: expected one of ['system', 'user', 'assistant'], "
            "got 'robot'",
        ),
        (lambda o: o.update(steps={}), "steps: expected an array, got object ({})"),
        (
            lambda o: o["steps"][0].update(state={"x": float("nan")}),
            "steps[0].state.x: nan is not a JSON number",
        ),
        (
            lambda o: o["volatile"][0].update(kind="uuid"),
            "volatile[0].kind: expected one of ['id', 'token', 'timestamp', 'noise'], got 'uuid'",
        ),
    ],
)
def test_validation_names_field_and_rule(mutate: object, message: str) -> None:
    obj = to_json(_episode())
    mutate(obj)  # type: ignore[operator]
    with pytest.raises(RecordError) as err:
        from_json(Episode, obj)
    assert str(err.value) == message


def test_not_an_object() -> None:
    with pytest.raises(RecordError, match="expected an object, got array"):
        from_json(Episode, [])
