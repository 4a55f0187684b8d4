"""MCP's wire (JSON-RPC 2.0 messages, protocol versions, tools and tool results) for
simworld's envs, as the MCP specification 2025-11-25 writes it; server/mcp.py serves it.

    request = parse_message({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    mcp_tool(spec)                       # the tool as tools/list shows it
    call_result(mcp_tool(spec), result)  # {"content", "structuredContent"?, "isError"}
    dumps(success(1, {"tools": []}))     # compact UTF-8 JSON bytes

Messages. A request is `{"jsonrpc": "2.0", "id": str | int, "method", "params"?: {...}}`,
a notification the same without `id`; a message with `result` or `error` and no `method`
is a client's response (this server sends no requests, so it is read and dropped).
Anything else is -32600 Invalid Request; `params` that are not an object are -32602.

Versions. SUPPORTED_VERSIONS are the handshake-era revisions; `initialize` answers the
client's version when it is one of them, else the latest. A request without the
`MCP-Protocol-Version` header is read as 2025-03-26 (the spec's rule), the last revision
with JSON-RPC batches.

Tools (decisions):
- a tool whose `ToolSpec.original` is an MCP tool (it has `inputSchema`: a captured MCP
  server) is replayed exactly as stored, key order included; `dumps` writes it compactly,
  as the MCP SDKs' pydantic models do, so the tool's bytes are the captured server's;
- any other tool is rendered `{name, description, inputSchema}`, plus `outputSchema` only
  when the schema was really declared: by the env's own code (no `original`) or by the
  tool JSON itself (`outputSchema`/`output_schema`). BFCL's function docs only describe
  their `response`, and simworld infers a schema from that and from recorded results, so
  a BFCL tool gets no `outputSchema` (a client would reject every answer that strays from
  an inferred guess). MCP's own annotation hints are kept; other annotations
  (`bfcl_class`) are simworld's and stay out.

Results. `content` is one text block with the result's text; `isError` its flag. When the
tool declares an `outputSchema` and the result is not an error, `structuredContent` is
the result's JSON (its `structured` value, else its text parsed), checked against the
schema. A result that breaks it (after the router's own retries) is answered as the MCP
SDK servers answer a tool whose return breaks its schema: `isError: true` and the text
"Output validation error: <what is wrong>", never a structuredContent a client would
refuse.
"""

from __future__ import annotations

import base64
import binascii
import importlib.metadata
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simworld.data.canonical import parse
from simworld.data.output_schemas import schema_validator
from simworld.data.records import JSON, ToolResult, ToolSpec

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]
DEFAULT_VERSION = "2025-03-26"  # a request without MCP-Protocol-Version (spec)
BATCH_VERSIONS = frozenset({"2024-11-05", "2025-03-26"})  # 2025-06-18 removed batches
VERSION_HEADER = "mcp-protocol-version"
SESSION_HEADER = "mcp-session-id"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000

MCP_HINTS = ("title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
_CURSOR_TAG = "tools:"

RequestId = str | int


class RpcError(Exception):
    """A JSON-RPC error to answer with: `code`, `message`, optional `data`."""

    def __init__(self, code: int, message: str, data: JSON = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True)
class RpcRequest:
    """A request or notification (`id` None) as received."""

    method: str
    params: dict[str, Any]
    id: RequestId | None = None

    @property
    def notification(self) -> bool:
        return self.id is None


# ---------------------------------------------------------------------------- messages


def parse_message(message: Any) -> RpcRequest | None:
    """The request in `message`; None for a client's response; RpcError when it is not a
    JSON-RPC 2.0 message."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message object")
    if "method" not in message and ("result" in message or "error" in message):
        return None
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string')
    rid = message.get("id")
    if "id" in message and (not isinstance(rid, str | int) or isinstance(rid, bool)):
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, 'Invalid params: "params" must be an object')
    return RpcRequest(method, params, rid)


def request_id(message: Any) -> RequestId | None:
    """The id of `message` when it has a usable one (for an error about the message)."""
    rid = message.get("id") if isinstance(message, dict) else None
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def success(rid: RequestId | None, result: JSON) -> dict[str, JSON]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def failure(rid: RequestId | None, code: int, message: str, data: JSON = None) -> dict[str, JSON]:
    error: dict[str, JSON] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def dumps(value: Any) -> bytes:
    """Compact JSON, non-ASCII as UTF-8 (as the MCP SDKs write it); a string holding a lone
    surrogate (which UTF-8 cannot carry) falls back to ASCII escapes."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


# ---------------------------------------------------------------------------- params


class _Params(BaseModel):
    # MCP lets every request carry `_meta` and later revisions add fields: extra is allowed.
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class InitializeParams(_Params):
    protocol_version: str = Field(alias="protocolVersion")
    capabilities: dict[str, Any] = Field(default_factory=dict)
    client_info: dict[str, Any] = Field(default_factory=dict, alias="clientInfo")


class ListParams(_Params):
    cursor: str | None = None
    session_id: str | None = Field(default=None, min_length=1)


class CallParams(_Params):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    session_id: str | None = Field(default=None, min_length=1)


class CreateParams(_Params):
    """openenv/session/create: OpenEnv sends no params; simworld takes a task and seed."""

    task_id: str | None = Field(default=None, min_length=1)
    seed: int | None = Field(default=None, ge=0)
    initial_state: Any = None


class CloseParams(_Params):
    session_id: str = Field(min_length=1)


P = TypeVar("P", bound=_Params)


def params_of(kind: type[P], request: RpcRequest) -> P:
    """`request.params` as `kind`; RpcError -32602 naming each bad field otherwise."""
    try:
        return kind.model_validate(request.params)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in ('params', *e['loc']))}: {e['msg']}"
            for e in exc.errors(include_url=False)
        ]
        raise RpcError(INVALID_PARAMS, f"Invalid params: {'; '.join(problems[:5])}") from exc


def negotiate(requested: str) -> str:
    """The version `initialize` answers: the client's when supported, else the latest."""
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def initialize_result(
    env: str, version: str, tools: bool, captured: Mapping[str, JSON] | None = None
) -> dict[str, JSON]:
    """What `initialize` answers for `env` (`tools`: whether it is a tool env). A captured
    env replays what its real server answered (serverInfo, capabilities, instructions),
    with the version negotiated here."""
    if captured:
        return {**captured, "protocolVersion": version}
    capabilities: dict[str, JSON] = {"tools": {"listChanged": False}} if tools else {}
    info = {"name": f"simworld-{env}", "version": _version()}
    return {"protocolVersion": version, "capabilities": capabilities, "serverInfo": info}


def _version() -> str:
    try:
        return importlib.metadata.version("simworld")
    except importlib.metadata.PackageNotFoundError:
        return "0"


# ---------------------------------------------------------------------------- tools


def is_mcp_tool(spec: ToolSpec) -> bool:
    """Whether the tool was received as an MCP tool (it is then replayed verbatim)."""
    return "inputSchema" in spec.original


def mcp_tool(spec: ToolSpec) -> dict[str, JSON]:
    """The tool as tools/list shows it (see the module docstring)."""
    if is_mcp_tool(spec):
        return spec.original
    tool: dict[str, JSON] = {
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.input_schema,
    }
    if spec.output_schema is not None and _declares_output(spec.original):
        tool["outputSchema"] = spec.output_schema
    hints = {key: spec.annotations[key] for key in MCP_HINTS if key in spec.annotations}
    if hints:
        tool["annotations"] = hints
    return tool


def _declares_output(original: dict[str, JSON]) -> bool:
    """Whether a tool's own JSON declares an output schema (no JSON: the env's code did)."""
    if not original:
        return True
    function = original.get("function")
    tool = function if isinstance(function, dict) else original
    return "outputSchema" in tool or "output_schema" in tool


def page(tools: list[dict[str, JSON]], cursor: str | None, size: int | None) -> dict[str, JSON]:
    """One tools/list page from `cursor` (None: the first); `size` None: all of them."""
    start = 0 if cursor is None else _offset(cursor, len(tools))
    end = len(tools) if size is None else min(start + size, len(tools))
    result: dict[str, JSON] = {"tools": list(tools[start:end])}
    if end < len(tools):
        result["nextCursor"] = base64.urlsafe_b64encode(f"{_CURSOR_TAG}{end}".encode()).decode()
    return result


def _offset(cursor: str, total: int) -> int:
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeError, ValueError):
        text = ""
    number = text.removeprefix(_CURSOR_TAG)
    if not text.startswith(_CURSOR_TAG) or not number.isdigit() or int(number) > total:
        raise RpcError(INVALID_PARAMS, f"Invalid params: unknown cursor {cursor[:80]!r}")
    return int(number)


def call_result(tool: dict[str, JSON], result: ToolResult) -> dict[str, JSON]:
    """A tools/call result from the step's ToolResult (see the module docstring)."""
    answer: dict[str, JSON] = {"content": [{"type": "text", "text": result.text}]}
    schema = tool.get("outputSchema")
    if isinstance(schema, dict) and not result.is_error:
        structured = result.structured if result.structured is not None else parse(result.text)[1]
        problem = _output_problem(schema, structured)
        if problem is not None:
            text = f"Output validation error: {problem}"
            return {"content": [{"type": "text", "text": text}], "isError": True}
        answer["structuredContent"] = structured
    answer["isError"] = result.is_error
    return answer


def error_result(text: str) -> dict[str, JSON]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def _output_problem(schema: dict[str, JSON], structured: JSON) -> str | None:
    if not isinstance(structured, dict):
        return "the result is not a JSON object, as the tool's outputSchema requires"
    first = best_match(schema_validator(schema).iter_errors(structured))
    if first is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
    return f"{where.lstrip('.') or 'result'}: {first.message}"


__all__ = [
    "BATCH_VERSIONS",
    "DEFAULT_VERSION",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "LATEST_VERSION",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SERVER_ERROR",
    "SESSION_HEADER",
    "SUPPORTED_VERSIONS",
    "VERSION_HEADER",
    "CallParams",
    "CloseParams",
    "CreateParams",
    "InitializeParams",
    "ListParams",
    "RequestId",
    "RpcError",
    "RpcRequest",
    "call_result",
    "dumps",
    "error_result",
    "failure",
    "initialize_result",
    "is_mcp_tool",
    "mcp_tool",
    "negotiate",
    "page",
    "params_of",
    "parse_message",
    "request_id",
    "success",
]
