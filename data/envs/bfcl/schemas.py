"""BFCL function docs as ToolSpecs with real JSON Schema.

BFCL describes each backend's tools in `bfcl_eval/data/multi_turn_func_doc/<file>.json`,
one JSON object per line: `name`, `description`, `parameters` and `response` (a schema of
the output). Their types are BFCL pseudo-types ("dict", "float", "tuple", ...); this module
maps every `type` through `GORILLA_TO_OPENAPI`, recursing into `properties`, `items` and
`additionalProperties`, and leaves every other keyword as it is (BFCL writes the default of
an optional argument whose Python default is None as the string "None"; it stays).

    specs = tool_specs(["GorillaFileSystem", "MathAPI"])

- `input_schema` is the converted `parameters` plus `"additionalProperties": false`: the
  backend methods take no `**kwargs`, so an unknown argument is a TypeError in reality.
- `output_schema` is the converted `response` (None when a doc has none).
- `original` is the doc line's JSON object verbatim, key order included.
- `annotations` carry `bfcl_class`, and for a miss_func entry's held-out tool the turn from
  which BFCL offers it, `held_out_until_turn`.
"""

from __future__ import annotations

import copy
import functools
import importlib.resources
import json
from collections.abc import Mapping, Sequence

from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING
from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

from simworld.data.records import JSON, ToolSpec

# The eight classes of the multi-turn categories (web search and memory are not among them).
MULTI_TURN_CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)
_SUBSCHEMA_KEYS = ("items", "additionalProperties")


@functools.cache
def _docs(class_name: str) -> tuple[dict[str, JSON], ...]:
    root = importlib.resources.files("bfcl_eval") / "data" / "multi_turn_func_doc"
    path = root / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    docs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
    return tuple(docs)


def function_docs(class_name: str) -> list[dict[str, JSON]]:
    """The class's function docs in file order (fresh copies)."""
    return copy.deepcopy(list(_docs(class_name)))


def convert_schema(node: JSON) -> JSON:
    """A BFCL schema with every pseudo-type mapped to its JSON Schema type."""
    if not isinstance(node, dict):
        return copy.deepcopy(node)
    out: dict[str, JSON] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            if value not in GORILLA_TO_OPENAPI:
                raise ValueError(f"unknown BFCL type {value!r}")
            out[key] = GORILLA_TO_OPENAPI[value]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA_KEYS and isinstance(value, dict):
            out[key] = convert_schema(value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tool_spec(doc: dict[str, JSON], class_name: str, held_out_until: int | None = None) -> ToolSpec:
    """One doc line as a ToolSpec (see the module docstring for each field)."""
    input_schema = convert_schema(doc["parameters"])
    input_schema["additionalProperties"] = False
    response = doc.get("response")
    annotations: dict[str, JSON] = {"bfcl_class": class_name}
    if held_out_until is not None:
        annotations["held_out_until_turn"] = held_out_until
    return ToolSpec(
        name=doc["name"],
        description=doc["description"],
        input_schema=input_schema,
        output_schema=None if response is None else convert_schema(response),
        annotations=annotations,
        original=copy.deepcopy(doc),
    )


def tool_specs(classes: Sequence[str], held_out: Mapping[str, int] | None = None) -> list[ToolSpec]:
    """The tools of `classes` in BFCL's order (class order, then doc order); `held_out`
    maps a tool name to the turn from which it is offered."""
    held_out = held_out or {}
    return [
        tool_spec(doc, name, held_out.get(doc["name"])) for name in classes for doc in _docs(name)
    ]


def required_arguments(spec: ToolSpec) -> list[str]:
    required = spec.input_schema.get("required", [])
    return [name for name in required if isinstance(name, str)]


__all__ = [
    "MULTI_TURN_CLASSES",
    "convert_schema",
    "function_docs",
    "required_arguments",
    "tool_spec",
    "tool_specs",
]
