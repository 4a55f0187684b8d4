"""Checking an action against the tools' input schemas before any model is asked.

Each call of a `ToolCallsAction` is checked in turn: the tool must exist, its
`raw_arguments` must be a JSON object, and the arguments must satisfy the tool's
`input_schema` (JSON Schema Draft 2020-12, or the draft the schema's `$schema` names;
`format` is not asserted, as a real API would not). An `ErrorStyle` writes the error text
the env's real API would give; `error_observation` turns a rejected action into the
observation the agent sees:

    checks = validate_calls(action, {t.name: t for t in episode.tools}, style=BFCLStyle())
    if not all(c.ok for c in checks):
        observation = error_observation(action, checks)  # the state stays untouched

A partially-invalid action is rejected whole. A real API would run its valid calls, but
running them would change the state while the invalid call's answer is already fixed; so
no call runs, and each valid call gets an error result saying that it did not run because
another call of the action was invalid. Every result of a rejected action has `is_error`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from simworld.data.canonical import parse
from simworld.data.output_schemas import schema_validator
from simworld.data.records import (
    JSON,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
)

# The `rule` of a violation that is not a JSON Schema keyword.
UNKNOWN_TOOL = "unknown_tool"
NOT_JSON = "not_json"
NOT_RUN = "not_run"  # a valid call of a rejected action


@dataclass(frozen=True)
class Violation:
    """One broken rule. `rule` is a JSON Schema keyword ("required", "type", ...) or one of
    UNKNOWN_TOOL, NOT_JSON, NOT_RUN; `path` is the JSON path ("arguments.items[0]");
    `names` are the missing (required) or unexpected (additionalProperties) names."""

    rule: str
    path: str
    message: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class CallCheck:
    """The verdict on one call. `message` is plain text for people and logs, `problems` one
    line per violation; `text` is what the call's result says when the action is rejected
    (in the env's style; empty when the whole action is valid)."""

    call_id: str
    ok: bool
    message: str
    problems: list[str]
    text: str = ""
    violations: tuple[Violation, ...] = field(default=(), repr=False)


class ErrorStyle(Protocol):
    """Writes a failed call's result text as the env's real API would. `spec` is None for
    an unknown tool; `message` is the plain-text summary of `violations`."""

    def __call__(
        self, call: ToolCall, spec: ToolSpec | None, violations: Sequence[Violation], message: str
    ) -> str: ...


class DefaultStyle:
    """`{"error": "<message>"}`, the shape most JSON tool APIs answer with."""

    def __call__(
        self, call: ToolCall, spec: ToolSpec | None, violations: Sequence[Violation], message: str
    ) -> str:
        return json.dumps({"error": message})


class BFCLStyle:
    """BFCL's own text: it reports any exception as "Error during execution: <str(exc)>",
    so the Python TypeError of a bad call is reproduced exactly (`Class.tool() missing 1
    required positional argument: 'folder'`, `... got an unexpected keyword argument 'x'`)
    and an unknown tool is BFCL's NameError. Python checks no types, so a type violation has
    no real counterpart; it reads "Error during execution: <message>".

    The class comes from the spec's `bfcl_class` annotation, else from `classes`."""

    PREFIX = "Error during execution: "

    def __init__(self, classes: Mapping[str, str] | None = None) -> None:
        self.classes = dict(classes or {})

    def __call__(
        self, call: ToolCall, spec: ToolSpec | None, violations: Sequence[Violation], message: str
    ) -> str:
        if spec is None:
            return f"{self.PREFIX}name '{call.name}' is not defined"
        owner = spec.annotations.get("bfcl_class", self.classes.get(spec.name))
        function = f"{owner}.{spec.name}()" if isinstance(owner, str) else f"{spec.name}()"
        # Python reports an unexpected keyword before missing arguments.
        unexpected = _names(violations, "additionalProperties")
        if unexpected:
            return f"{self.PREFIX}{function} got an unexpected keyword argument '{unexpected[0]}'"
        missing = _names(violations, "required")
        if missing:
            return f"{self.PREFIX}{function} {_python_missing(_signature_order(spec, missing))}"
        return self.PREFIX + message


def validate_calls(
    action: ToolCallsAction, tools: Mapping[str, ToolSpec], *, style: ErrorStyle | None = None
) -> list[CallCheck]:
    """One check per call, in call order (see the module docstring). `style` defaults to
    DefaultStyle. When any call fails, every check's `text` is filled in."""
    style = style or DefaultStyle()
    specs = [tools.get(call.name) for call in action.calls]
    found = [(c, s, _violations(c, s)) for c, s in zip(action.calls, specs, strict=True)]
    rejected = any(violations for _, _, violations in found)
    checks = []
    for call, spec, violations in found:
        if violations:
            message = _message(call, violations)
            text = style(call, spec, violations, message)
        else:
            message = "ok"
            text = _not_run_text(call, spec, found, style) if rejected else ""
        problems = [_problem_line(v) for v in violations]
        checks.append(
            CallCheck(call.id, not violations, message, problems, text, tuple(violations))
        )
    return checks


def error_observation(
    action: ToolCallsAction, checks: Sequence[CallCheck]
) -> ToolResultsObservation:
    """The observation of a rejected action: one error result per call, in call order."""
    if len(checks) != len(action.calls) or any(
        c.call_id != call.id for c, call in zip(checks, action.calls, strict=True)
    ):
        raise ValueError("checks do not belong to this action (validate_calls makes them)")
    if all(c.ok for c in checks):
        raise ValueError("every call is valid: there is nothing to reject")
    return ToolResultsObservation(
        [ToolResult(c.call_id, c.text, parse(c.text)[1], is_error=True) for c in checks]
    )


def _violations(call: ToolCall, spec: ToolSpec | None) -> list[Violation]:
    if spec is None:
        return [Violation(UNKNOWN_TOOL, "", f"Unknown tool '{call.name}'")]
    if call.arguments is None:
        return [Violation(NOT_JSON, "arguments", _parse_problem(call.raw_arguments))]
    return [
        _violation(error)
        for error in _validator(_canonical(spec.input_schema)).iter_errors(call.arguments)
    ]


def _violation(error: Any) -> Violation:
    path = "arguments" + "".join(
        f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path
    )
    names: tuple[str, ...] = ()
    if error.validator == "required":  # one error per missing name
        names = tuple(
            n for n in error.validator_value if error.message == f"{n!r} is a required property"
        )
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        names = tuple(n for n in error.instance if n not in allowed)
    return Violation(str(error.validator), path, str(error.message), names)


def _problem_line(violation: Violation) -> str:
    if violation.path in ("", "arguments"):  # a rule about the arguments as a whole names its field
        return violation.message
    return f"{violation.path}: {violation.message}"


def _message(call: ToolCall, violations: Sequence[Violation]) -> str:
    first = violations[0]
    if first.rule == UNKNOWN_TOOL:
        return first.message
    if first.rule == NOT_JSON:
        return f"Arguments of tool '{call.name}' are not a JSON object: {first.message}"
    lines = "; ".join(_problem_line(v) for v in violations)
    return f"Invalid arguments for tool '{call.name}': {lines}"


def _not_run_text(
    call: ToolCall,
    spec: ToolSpec | None,
    found: Sequence[tuple[ToolCall, Any, list[Violation]]],
    style: ErrorStyle,
) -> str:
    bad = ", ".join(f"'{other.id}' ({other.name})" for other, _, violations in found if violations)
    message = f"Not run: the action was rejected because call {bad} was invalid; no call of it ran"
    return style(call, spec, [Violation(NOT_RUN, "", message)], message)


def _parse_problem(raw: str) -> str:
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return f"{exc}"
    kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )
    return f"expected an object, got {kind}"


def _names(violations: Sequence[Violation], rule: str) -> list[str]:
    """The names of the top-level violations of `rule`, each once, in order."""
    found = (n for v in violations if v.rule == rule and v.path == "arguments" for n in v.names)
    return list(dict.fromkeys(found))


def _signature_order(spec: ToolSpec, names: Sequence[str]) -> list[str]:
    """`names` in the order the tool declares its properties (the Python signature's)."""
    declared = [n for n in spec.input_schema.get("properties", {}) if n in names]
    return declared + [n for n in names if n not in declared]


def _python_missing(names: Sequence[str]) -> str:
    """CPython's wording: 'a'; 'a' and 'b'; 'a', 'b', and 'c'."""
    quoted = [f"'{n}'" for n in names]
    if len(quoted) == 1:
        listed = quoted[0]
    elif len(quoted) == 2:
        listed = f"{quoted[0]} and {quoted[1]}"
    else:
        listed = ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
    plural = "argument" if len(quoted) == 1 else "arguments"
    return f"missing {len(quoted)} required positional {plural}: {listed}"


def _canonical(schema: Mapping[str, JSON]) -> str:
    return json.dumps(schema, sort_keys=True)


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    """The shared validator (`schema_validator`), with the schema itself checked once: a
    broken tool schema raises jsonschema.SchemaError (a bug in the env)."""
    validator = schema_validator(json.loads(schema_text))
    validator.check_schema(validator.schema)
    return validator


__all__ = [
    "NOT_JSON",
    "NOT_RUN",
    "UNKNOWN_TOOL",
    "BFCLStyle",
    "CallCheck",
    "DefaultStyle",
    "ErrorStyle",
    "Violation",
    "error_observation",
    "validate_calls",
]
