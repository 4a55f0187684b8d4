"""Tool definitions in the shapes dumps use, to and from ToolSpec.

Read: an OpenAI chat tool `{"type": "function", "function": {name, description, parameters}}`,
a Responses-API flat tool `{"type": "function", name, parameters}`, a bare function object
`{name, description, parameters}` (LLaMA-Factory, BFCL), an MCP tool `{name, description,
inputSchema, outputSchema, annotations}`, or an Anthropic-style `{name, input_schema}`. The
tool JSON is kept verbatim in `ToolSpec.original`.

Write: a tool whose `original` already has the shape a format wants is written as it was
received, byte for byte; any other tool is converted (the caller keeps what the conversion
cannot carry, see chat.py).
"""

from __future__ import annotations

from typing import Any

from simworld.data.formats.base import expect_object, expect_str, join, type_name
from simworld.data.records import JSON, RecordError, ToolSpec

EMPTY_SCHEMA: dict[str, JSON] = {"type": "object", "properties": {}}


def tool_from_json(value: Any, path: str) -> ToolSpec:
    """A ToolSpec from any supported tool shape; errors name the field path."""
    tool = expect_object(value, path)
    function, where = tool, path
    if tool.get("type") == "function" and "function" in tool:
        where = join(path, "function")
        function = expect_object(tool["function"], where)
    name = expect_str(function.get("name"), join(where, "name"))
    description = function.get("description", "")
    if description is None:
        description = ""
    expect_str(description, join(where, "description"))
    key = next((k for k in ("inputSchema", "input_schema") if k in function), "parameters")
    schema = function.get(key, EMPTY_SCHEMA)
    output = function.get("outputSchema", function.get("output_schema"))
    output_path = join(where, "outputSchema")
    annotations = function.get("annotations", {})
    return ToolSpec(
        name=name,
        description=description,
        input_schema=dict(expect_object(schema, join(where, key))),
        output_schema=None if output is None else expect_object(output, output_path),
        annotations=expect_object(annotations, join(where, "annotations")),
        original=tool,
    )


def tools_from_json(value: Any, path: str) -> list[ToolSpec]:
    """A tool list (null or absent means none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError(path, f"expected an array of tools, got {type_name(value)}")
    return [tool_from_json(tool, join(path, i)) for i, tool in enumerate(value)]


def is_openai_tool(tool: dict[str, JSON]) -> bool:
    return tool.get("type") == "function" and isinstance(tool.get("function"), dict)


def is_function_object(tool: dict[str, JSON]) -> bool:
    """A bare function object: a name and `parameters`, no MCP or Responses keys."""
    return (
        isinstance(tool.get("name"), str)
        and "type" not in tool
        and not {"inputSchema", "input_schema"} & tool.keys()
    )


def function_object(spec: ToolSpec) -> dict[str, JSON]:
    """`{name, description, parameters}`: the function part of an OpenAI tool."""
    function: dict[str, JSON] = {"name": spec.name}
    if spec.description:
        function["description"] = spec.description
    function["parameters"] = spec.input_schema
    return function


def openai_tool(spec: ToolSpec) -> dict[str, JSON]:
    """The tool as OpenAI chat completions take it: `original` when it is already so."""
    original: dict[str, JSON] = spec.original
    if is_openai_tool(original):
        return original
    return {"type": "function", "function": function_object(spec)}


def llamafactory_tool(spec: ToolSpec) -> dict[str, JSON]:
    """The tool as LLaMA-Factory's `tools` list takes it (OpenAI-wrapped or bare)."""
    original: dict[str, JSON] = spec.original
    if is_openai_tool(original) or is_function_object(original):
        return original
    return function_object(spec)


__all__ = [
    "EMPTY_SCHEMA",
    "function_object",
    "is_function_object",
    "is_openai_tool",
    "llamafactory_tool",
    "openai_tool",
    "tool_from_json",
    "tools_from_json",
]
