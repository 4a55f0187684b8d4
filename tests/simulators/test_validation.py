"""Tool-call validation: unknown tools, non-JSON arguments, schema violations with their
paths, BFCL's exact missing-argument text on the recorded data, rejected actions.

    python -m pytest -q tests/simulators/test_validation.py
"""

from __future__ import annotations

import json
import re

import pytest
from jsonschema.exceptions import SchemaError

from simworld.data.bundle import load_bundled
from simworld.data.records import JSON, ToolCall, ToolCallsAction, ToolResultsObservation, ToolSpec
from simworld.simulators.validation import (
    NOT_RUN,
    BFCLStyle,
    CallCheck,
    DefaultStyle,
    error_observation,
    validate_calls,
)

ITEM = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
    "required": ["name"],
}
TOOLS = {
    "cd": ToolSpec(
        "cd",
        "Change directory.",
        {
            "type": "object",
            "properties": {"folder": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["folder"],
            "additionalProperties": False,
        },
        annotations={"bfcl_class": "GorillaFileSystem"},
    ),
    "order": ToolSpec(
        "order",
        "Place an order.",
        {
            "type": "object",
            "properties": {"items": {"type": "array", "items": ITEM}, "note": {"type": "string"}},
            "required": ["items", "note"],
        },
    ),
}


def call(name: str, arguments: dict[str, JSON] | str, call_id: str = "c1") -> ToolCall:
    """A call; a string stands for raw arguments that do not parse to an object."""
    if isinstance(arguments, str):
        return ToolCall(call_id, name, None, arguments)
    return ToolCall(call_id, name, arguments, json.dumps(arguments))


def check_one(c: ToolCall, style: BFCLStyle | None = None) -> CallCheck:
    (result,) = validate_calls(ToolCallsAction([c]), TOOLS, style=style)
    return result


def test_valid_call_passes() -> None:
    result = check_one(call("cd", {"folder": "tmp", "count": 2}))
    assert result.ok and result.problems == [] and result.text == ""


def test_unknown_tool_is_named_and_nothing_else_listed() -> None:
    result = check_one(call("foo", {}))
    assert not result.ok
    assert result.message == "Unknown tool 'foo'"
    assert result.text == json.dumps({"error": "Unknown tool 'foo'"})
    assert "cd" not in result.text and "order" not in result.text
    bfcl = check_one(call("foo", {}), BFCLStyle())
    assert bfcl.text == "Error during execution: name 'foo' is not defined"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ('{"folder": ', "Expecting value: line 1 column 12 (char 11)"),
        ("[1, 2]", "expected an object, got an array"),
        ('"tmp"', "expected an object, got a string"),
    ],
)
def test_arguments_that_are_not_a_json_object(raw: str, problem: str) -> None:
    result = check_one(call("cd", raw))
    assert not result.ok
    assert result.problems == [problem]
    assert result.message == f"Arguments of tool 'cd' are not a JSON object: {problem}"


def test_missing_required_and_wrong_type_exact_messages() -> None:
    result = check_one(call("cd", {"count": "x"}))
    assert not result.ok
    assert result.problems == [
        "arguments.count: 'x' is not of type 'integer'",
        "'folder' is a required property",
    ]
    assert result.message == (
        "Invalid arguments for tool 'cd': arguments.count: 'x' is not of type 'integer'; "
        "'folder' is a required property"
    )
    assert json.loads(result.text) == {"error": result.message}
    assert [(v.rule, v.path) for v in result.violations] == [
        ("type", "arguments.count"),
        ("required", "arguments"),
    ]


def test_unexpected_argument() -> None:
    result = check_one(call("cd", {"folder": "a", "fodler": "b"}))
    assert result.problems == ["Additional properties are not allowed ('fodler' was unexpected)"]
    bfcl = check_one(call("cd", {"folder": "a", "fodler": "b"}), BFCLStyle())
    assert bfcl.text == (
        "Error during execution: GorillaFileSystem.cd() got an unexpected keyword argument 'fodler'"
    )


def test_nested_paths_list_every_violation() -> None:
    args = {"items": [{"name": "a", "qty": 2}, {"qty": 0}, {"name": 3}]}
    result = check_one(call("order", args))
    assert sorted(result.problems) == sorted(
        [
            "'note' is a required property",
            "arguments.items[1]: 'name' is a required property",
            "arguments.items[1].qty: 0 is less than the minimum of 1",
            "arguments.items[2].name: 3 is not of type 'string'",
        ]
    )


def test_schema_draft_is_the_one_named() -> None:
    """Draft 4's boolean exclusiveMaximum means nothing in 2020-12."""
    schema = {"properties": {"n": {"type": "number", "maximum": 5, "exclusiveMaximum": True}}}
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", **schema}
    at_max = ToolCallsAction([call("t", {"n": 5})])
    spec4 = ToolSpec("t", "", draft4)
    assert not validate_calls(at_max, {"t": spec4})[0].ok
    with pytest.raises(SchemaError, match="not of type 'number'"):  # invalid under 2020-12
        validate_calls(at_max, {"t": ToolSpec("t", "", schema)})


def test_bfcl_missing_arguments_python_wording() -> None:
    style = BFCLStyle()
    one = check_one(call("cd", {}), style)
    assert one.text == (
        "Error during execution: GorillaFileSystem.cd() missing 1 required positional "
        "argument: 'folder'"
    )
    # The class may come from the constructor; names follow the declared (signature) order.
    two = check_one(call("order", {}), BFCLStyle({"order": "Shop"}))
    assert two.text == (
        "Error during execution: Shop.order() missing 2 required positional arguments: "
        "'items' and 'note'"
    )


def test_partially_invalid_action_is_rejected_whole() -> None:
    action = ToolCallsAction([call("cd", {"folder": "a"}, "ok1"), call("foo", {}, "bad")])
    checks = validate_calls(action, TOOLS)
    assert [c.ok for c in checks] == [True, False]
    observation = error_observation(action, checks)
    assert isinstance(observation, ToolResultsObservation)
    assert [r.call_id for r in observation.results] == ["ok1", "bad"]
    assert all(r.is_error for r in observation.results)
    assert observation.results[1].structured == {"error": "Unknown tool 'foo'"}
    not_run = observation.results[0].structured["error"]
    assert not_run.startswith("Not run: the action was rejected because call 'bad' (foo)")
    assert checks[0].violations == () and checks[0].message == "ok"
    bfcl = validate_calls(action, TOOLS, style=BFCLStyle())
    assert bfcl[0].text == "Error during execution: " + not_run
    assert NOT_RUN == "not_run"


def test_error_observation_refuses_a_valid_or_foreign_action() -> None:
    action = ToolCallsAction([call("cd", {"folder": "a"})])
    with pytest.raises(ValueError, match="nothing to reject"):
        error_observation(action, validate_calls(action, TOOLS))
    bad = ToolCallsAction([call("foo", {}, "x")])
    with pytest.raises(ValueError, match="do not belong"):
        error_observation(action, validate_calls(bad, TOOLS))


def test_default_style_is_used_when_none_given() -> None:
    c = call("foo", {})
    assert check_one(c).text == DefaultStyle()(c, None, [], "Unknown tool 'foo'")


MISSING = re.compile(r"^Error during execution: \w+\.\w+\(\) missing \d+ required positional")


def test_bfcl_missing_argument_parity_on_recorded_data() -> None:
    """Every recorded BFCL result that is Python's missing-argument TypeError is
    reproduced exactly from the call and the episode's tool specs alone."""
    matched, total = 0, 0
    style = BFCLStyle()
    for episode in load_bundled("train", env="bfcl"):
        tools = {t.name: t for t in episode.tools}
        for step in episode.steps:
            if not isinstance(step.action, ToolCallsAction):
                continue
            assert isinstance(step.observation, ToolResultsObservation)
            checks = validate_calls(step.action, tools, style=style)
            for check, result in zip(checks, step.observation.results, strict=True):
                if MISSING.match(result.text):
                    total += 1
                    matched += (not check.ok) and check.text == result.text
    print(f"BFCL missing-argument parity: {matched}/{total}")
    assert total >= 100
    assert matched == total
