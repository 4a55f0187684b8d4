"""Output schemas per tool: the declared ones, or ones inferred from recorded results.

Envs whose `ToolSpec`s declare no `output_schema` still record what their tools returned;
a JSON Schema inferred from those results lets schema-validity metrics and simulators check
a predicted result's shape:

    from simworld.data import read_episodes
    from simworld.data.output_schemas import infer_output_schemas
    schemas = infer_output_schemas(read_episodes("dump.jsonl").episodes)  # name -> schema
    schemas["get_balance"]  # from results {"balance": 10} and {"balance": 2.5}
    # {"type": "object", "properties": {"balance": {"type": "number"}}, "required": ["balance"]}
    schemas, replaced = checked_output_schemas(episodes)   # declared ones the data breaks

Inference is the union of what was seen, per node: the JSON types observed (`"type"` is one
name or a sorted list; "integer" next to "number" becomes "number"), for objects
`properties` for every key seen and `required` for the keys present in every sample, for
arrays `items` merged over all elements. Only non-error results whose text parses as JSON
count. The output is deterministic: keys sorted, no descriptions, no examples.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from simworld.data.canonical import parse
from simworld.data.records import (
    JSON,
    Episode,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)


def _type_name(value: JSON) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}[type(value)]


def infer_schema(samples: Sequence[JSON]) -> dict[str, JSON]:
    """The smallest schema of this family that every sample validates against."""
    by_type: dict[str, list[JSON]] = {}
    for sample in samples:
        by_type.setdefault(_type_name(sample), []).append(sample)
    types = set(by_type)
    if {"integer", "number"} <= types:
        types.discard("integer")
    names = sorted(types)
    if not names:
        return {}  # no samples: anything goes
    schema: dict[str, JSON] = {"type": names[0] if len(names) == 1 else names}
    objects: list[dict[str, JSON]] = by_type.get("object", [])
    if objects:
        keys = sorted({key for obj in objects for key in obj})
        schema["properties"] = {
            key: infer_schema([obj[key] for obj in objects if key in obj]) for key in keys
        }
        required = [key for key in keys if all(key in obj for obj in objects)]
        if required:
            schema["required"] = required
    elements = [item for array in by_type.get("array", []) for item in array]
    if elements:
        schema["items"] = infer_schema(elements)
    return schema


def text_result_tools(episodes: Iterable[Episode]) -> set[str]:
    """Tools whose recorded non-error results are all text that is not JSON (BFCL's `touch`,
    `echo` and `mkdir` answer "None"): whatever output schema they declare, the real tool
    does not answer JSON."""
    answered: set[str] = set()
    as_json: set[str] = set()
    for name, result in _non_error_results(episodes):
        answered.add(name)
        if parse(result.text)[0]:
            as_json.add(name)
    return answered - as_json


def _non_error_results(episodes: Iterable[Episode]) -> Iterator[tuple[str, ToolResult]]:
    """(tool name, result) of every recorded non-error result, in recorded order."""
    for episode in episodes:
        for step in episode.steps:
            action, observation = step.action, step.observation
            if not isinstance(action, ToolCallsAction):
                continue
            if not isinstance(observation, ToolResultsObservation):
                continue
            for call, result in zip(action.calls, observation.results, strict=False):
                if not result.is_error:
                    yield call.name, result


def _recorded_results(episodes: Iterable[Episode]) -> dict[str, list[JSON]]:
    """Tool name -> the parsed JSON of its non-error results, in recorded order."""
    samples: dict[str, list[JSON]] = {}
    for name, result in _non_error_results(episodes):
        ok, value = parse(result.text)  # "None", Python reprs: no shape to learn from
        if ok:
            samples.setdefault(name, []).append(value)
    return samples


def infer_output_schemas(episodes: Iterable[Episode]) -> dict[str, dict[str, JSON]]:
    """Tool name -> output JSON Schema: the declared `output_schema` when a ToolSpec has
    one (the first seen wins), else one inferred from the tool's recorded results. Tools
    with neither are left out."""
    episodes = list(episodes)
    declared: dict[str, dict[str, JSON]] = {}
    for episode in episodes:
        for tool in episode.tools:
            if tool.output_schema is not None:
                declared.setdefault(tool.name, tool.output_schema)
    inferred = {
        name: infer_schema(values)
        for name, values in _recorded_results(episodes).items()
        if name not in declared
    }
    return dict(sorted({**inferred, **declared}.items()))


def schema_validator(schema: Mapping[str, JSON]) -> Any:
    """A jsonschema validator for `schema`, of the draft its `$schema` names (2020-12 when
    it names none), built once per distinct schema: every schema check in simworld (tool
    arguments, output schemas, the schema-validity metric) goes through here."""
    return _validator(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=1024)
def _validator(schema_text: str) -> Any:
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    schema = json.loads(schema_text)
    return validator_for(schema, default=Draft202012Validator)(schema)


def checked_output_schemas(
    episodes: Iterable[Episode],
) -> tuple[dict[str, dict[str, JSON]], list[str]]:
    """Tool name -> output schema that the recorded results really follow: a declared
    schema is kept when every recorded non-error JSON result of its tool validates against
    it, and replaced by the inferred one otherwise (BFCL declares `message_id` an integer,
    say, and returns an object). Returns the schemas and the names of the replaced ones."""
    episodes = list(episodes)
    samples = _recorded_results(episodes)
    schemas = infer_output_schemas(episodes)
    replaced = []
    for name, schema in schemas.items():
        validator = schema_validator(schema)
        if any(not validator.is_valid(value) for value in samples.get(name, [])):
            schemas[name] = infer_schema(samples[name])
            replaced.append(name)
    return schemas, replaced


__all__ = [
    "checked_output_schemas",
    "infer_output_schemas",
    "infer_schema",
    "schema_validator",
    "text_result_tools",
]
