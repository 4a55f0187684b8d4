"""A plain HTTP JSON tool API, described by an OpenAPI 3 document, spoken to as an MCP
server: each operation becomes a tool, and a tool call becomes the HTTP request.

    spec = load_spec("http://127.0.0.1:9000/openapi.json")        # or a .json/.yaml file
    server = OpenApiServer(spec, "http://127.0.0.1:9000", headers={"Authorization": "..."})
    server.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})   # a JSON-RPC reply
    server.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "add_item", "arguments": {"name": "bolt", "qty": 3}}})

Operations to tools:
- name: the operationId (characters outside `A-Za-z0-9_-` become `_`, cut to 64), else
  `<method>_<path>`; a name taken twice gets `_2`, `_3`.
- description: the summary, then the description, separated by a blank line.
- inputSchema: an object whose properties are the path, query, header and cookie parameters
  (their schemas, with the parameter's description) and the JSON request body: an object
  body's properties are merged in (and its required ones, when the body is required), any
  other body, or one whose properties clash with a parameter, is the property `body`.
  `$ref`s into the document are inlined (a cycle becomes `{}`, any value).
- outputSchema: the JSON schema of the first 2xx (else `default`) response, when it is an
  object schema.
- annotations: readOnlyHint for GET and HEAD, idempotentHint for PUT and DELETE too.

Calls: path parameters are URL-quoted into the path, query parameters (a list repeats the
key) and header and cookie parameters are sent as such, the rest is the JSON body. The result
is the response body as one text block, `isError` for a status of 400 or more, and the body
as structuredContent when the tool has an outputSchema and the body is a JSON object. An API
that cannot be reached is a JSON-RPC error (-32603), never a tool result.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import httpx

from simworld.data.canonical import parse
from simworld.data.records import JSON
from simworld.server.mcp_client import PROTOCOL_VERSION, error_reply

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
Location = Literal["path", "query", "header", "cookie"]
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class SpecError(ValueError):
    """An OpenAPI document simworld cannot use: where in it, and why."""


@dataclass(frozen=True)
class Param:
    name: str
    location: Location


@dataclass(frozen=True)
class Operation:
    """One HTTP operation as a tool: how to call it, and the MCP tool JSON."""

    name: str
    method: str
    path: str
    params: tuple[Param, ...]
    body: Literal["none", "merged", "nested"]
    tool: dict[str, JSON]


def load_spec(location: str, headers: Mapping[str, str] | None = None) -> dict[str, JSON]:
    """An OpenAPI 3 document from a file (JSON or YAML) or an http(s) URL."""
    if location.startswith(("http://", "https://")):
        try:
            response = httpx.get(location, headers=dict(headers or {}), timeout=30)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise SpecError(f"{location}: cannot fetch the OpenAPI document: {exc}") from exc
        text = response.text
    else:
        path = Path(location)
        if not path.is_file():
            raise SpecError(f"{location}: no such OpenAPI document")
        text = path.read_text("utf-8")
    try:
        spec = json.loads(text)
    except ValueError:
        import yaml  # a dependency of transformers; only YAML documents need it

        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(f"{location}: neither JSON nor YAML: {exc}") from exc
    if not isinstance(spec, dict) or not str(spec.get("openapi", "")).startswith("3"):
        raise SpecError(f"{location}: not an OpenAPI 3 document (no 'openapi: 3.x' field)")
    if not isinstance(spec.get("paths"), dict):
        raise SpecError(f"{location}: paths: expected an object of operations")
    return spec


def operations(spec: Mapping[str, JSON]) -> list[Operation]:
    """Every operation of the document as a tool, in document order."""
    found: list[Operation] = []
    taken: set[str] = set()
    paths = spec.get("paths")
    assert isinstance(paths, dict)
    for path, item in paths.items():
        if not isinstance(item, dict):
            raise SpecError(f"paths.{path}: expected an object")
        shared = item.get("parameters", [])
        for method in METHODS:
            if isinstance(item.get(method), dict):
                op = _operation(spec, path, method, item[method], shared, taken)
                taken.add(op.name)
                found.append(op)
    return found


def _operation(
    spec: Mapping[str, JSON],
    path: str,
    method: str,
    op: dict[str, JSON],
    shared: JSON,
    taken: set[str],
) -> Operation:
    where = f"paths.{path}.{method}"
    base = _UNSAFE.sub("_", str(op.get("operationId") or f"{method}_{path.strip('/')}"))[:64]
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base[: 64 - len(str(n)) - 1]}_{n}"
    properties: dict[str, JSON] = {}
    required: list[str] = []
    params: list[Param] = []
    for raw in [*(shared if isinstance(shared, list) else []), *_list(op.get("parameters"))]:
        param = _resolve(spec, raw, where)
        if not isinstance(param, dict) or param.get("in") not in (
            "path",
            "query",
            "header",
            "cookie",
        ):
            raise SpecError(f"{where}.parameters: a parameter needs a name and 'in'")
        pname, location = str(param["name"]), param["in"]
        schema = dict(_resolve(spec, param.get("schema", {}), where) or {})
        if "description" in param and "description" not in schema:
            schema["description"] = param["description"]
        properties[pname] = schema
        params.append(Param(pname, location))
        if param.get("required") or location == "path":
            required.append(pname)
    body = _body(spec, op, where, properties, required)
    tool: dict[str, JSON] = {"name": name}
    text = "\n\n".join(str(op[k]) for k in ("summary", "description") if op.get(k))
    if text:
        tool["description"] = text
    tool["inputSchema"] = {"type": "object", "properties": properties, "required": required}
    output = _output_schema(spec, op, where)
    if output is not None:
        tool["outputSchema"] = output
    tool["annotations"] = {
        "readOnlyHint": method in ("get", "head"),
        "idempotentHint": method in ("get", "head", "put", "delete"),
    }
    return Operation(name, method, path, tuple(params), body, tool)


def _body(
    spec: Mapping[str, JSON],
    op: dict[str, JSON],
    where: str,
    properties: dict[str, JSON],
    required: list[str],
) -> Literal["none", "merged", "nested"]:
    request = _resolve(spec, op.get("requestBody"), where)
    if not isinstance(request, dict):
        return "none"
    content = request.get("content")
    media = content.get("application/json") if isinstance(content, dict) else None
    if not isinstance(media, dict):
        raise SpecError(f"{where}.requestBody: only application/json bodies are supported")
    schema = _resolve(spec, media.get("schema", {}), where)
    body_props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(body_props, dict) and not set(body_props) & set(properties):
        properties.update(body_props)
        if request.get("required"):
            required += [str(r) for r in _list(schema.get("required"))]
        return "merged"
    properties["body"] = schema
    if request.get("required"):
        required.append("body")
    return "nested"


def _output_schema(spec: Mapping[str, JSON], op: dict[str, JSON], where: str) -> JSON:
    responses = op.get("responses")
    if not isinstance(responses, dict):
        return None
    codes = sorted(c for c in responses if str(c).startswith("2")) or ["default"]
    response = _resolve(spec, responses.get(codes[0]), where)
    content = response.get("content") if isinstance(response, dict) else None
    media = content.get("application/json") if isinstance(content, dict) else None
    schema = _resolve(spec, media.get("schema"), where) if isinstance(media, dict) else None
    return schema if isinstance(schema, dict) and schema.get("type") == "object" else None


def _list(value: JSON) -> list[JSON]:
    return value if isinstance(value, list) else []


def _resolve(spec: Mapping[str, JSON], value: JSON, where: str, seen: tuple[str, ...] = ()) -> JSON:
    """`value` with every `$ref` into the document inlined (a cycle becomes {})."""
    if isinstance(value, list):
        return [_resolve(spec, item, where, seen) for item in value]
    if not isinstance(value, dict):
        return value
    ref = value.get("$ref")
    if isinstance(ref, str):
        if ref in seen:
            return {}
        return _resolve(spec, _pointer(spec, ref, where), where, (*seen, ref))
    return {k: _resolve(spec, v, where, seen) for k, v in value.items()}


def _pointer(spec: Mapping[str, JSON], ref: str, where: str) -> JSON:
    if not ref.startswith("#/"):
        raise SpecError(f"{where}: $ref {ref!r} points outside the document")
    node: JSON = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise SpecError(f"{where}: $ref {ref!r} does not resolve")
        node = node[part]
    return copy.deepcopy(node)


# ---------------------------------------------------------------------------- serving


def initialize_result(spec: Mapping[str, JSON], requested: JSON) -> dict[str, JSON]:
    """What the API, as an MCP server, answers to initialize (the client's protocol
    version when it is one of SUPPORTED_VERSIONS, else the newest)."""
    info = spec.get("info")
    info = info if isinstance(info, dict) else {}
    version = requested if requested in SUPPORTED_VERSIONS else PROTOCOL_VERSION
    result: dict[str, JSON] = {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {
            "name": str(info.get("title", "api")),
            "version": str(info.get("version", "")),
        },
    }
    if info.get("description"):
        result["instructions"] = str(info["description"])
    return result


class OpenApiServer:
    """The JSON-RPC side of an MCP server over the API at `base_url` (see the module
    docstring); `headers` go with every request to the API (auth)."""

    def __init__(
        self,
        spec: Mapping[str, JSON],
        base_url: str,
        headers: Mapping[str, str] | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.spec = spec
        self.base_url = base_url.rstrip("/")
        self.operations = {op.name: op for op in operations(spec)}
        self._client = httpx.Client(headers=dict(headers or {}), timeout=timeout)

    def tools(self) -> list[dict[str, JSON]]:
        return [op.tool for op in self.operations.values()]

    def handle(
        self, message: Mapping[str, JSON], headers: Mapping[str, str] | None = None
    ) -> dict[str, JSON] | None:
        """The reply to a JSON-RPC message (None for a notification or a response);
        `headers` (the client's auth) go with the API request of a tools/call."""
        if "id" not in message or "method" not in message:
            return None
        request_id, method = message["id"], message["method"]
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "initialize":
            result = initialize_result(self.spec, params.get("protocolVersion"))
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": self.tools()}
        elif method == "tools/call":
            return self._call(request_id, params, headers or {})
        else:
            return error_reply(request_id, -32601, f"Method not found: {method}")
        return {"jsonrpc": "2.0", "id": request_id, "result": result}

    def close(self) -> None:
        self._client.close()

    def _call(
        self, request_id: JSON, params: Mapping[str, JSON], headers: Mapping[str, str]
    ) -> dict[str, JSON]:
        name, arguments = params.get("name"), params.get("arguments", {})
        op = self.operations.get(name) if isinstance(name, str) else None
        if op is None:
            return error_reply(request_id, -32602, f"Unknown tool: {name}")
        if not isinstance(arguments, dict):
            return error_reply(request_id, -32602, "arguments: expected an object")
        try:
            response = self._request(op, arguments, headers)
        except KeyError as exc:
            text = f"missing path parameter {exc.args[0]!r}"
            result: dict[str, JSON] = {"content": [{"type": "text", "text": text}], "isError": True}
            return {"jsonrpc": "2.0", "id": request_id, "result": result}
        except httpx.HTTPError as exc:
            message = f"the API at {self.base_url} could not be reached: {exc}"
            return error_reply(request_id, -32603, message)
        return {"jsonrpc": "2.0", "id": request_id, "result": _result(op, response)}

    def _request(
        self, op: Operation, arguments: Mapping[str, JSON], headers: Mapping[str, str]
    ) -> httpx.Response:
        path, sent, cookies = op.path, dict(headers), {}
        query: list[tuple[str, str | int | float | bool | None]] = []
        located = {p.name: p.location for p in op.params}
        for param in op.params:
            if param.location == "path":
                path = path.replace(
                    "{" + param.name + "}", quote(_text(arguments[param.name]), safe="")
                )
            elif param.name not in arguments:
                continue
            elif param.location == "query":
                values = arguments[param.name]
                for value in values if isinstance(values, list) else [values]:
                    query.append((param.name, _text(value)))
            elif param.location == "header":
                sent[param.name] = _text(arguments[param.name])
            else:
                cookies[param.name] = _text(arguments[param.name])
        body: JSON = None
        if op.body == "merged":
            body = {k: v for k, v in arguments.items() if k not in located}
        elif op.body == "nested":
            body = arguments.get("body")
        if op.body != "none":
            sent["content-type"] = "application/json"
        if cookies:
            sent["cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        return self._client.request(
            op.method.upper(),
            self.base_url + path,
            params=query,
            headers=sent,
            content=None if op.body == "none" else json.dumps(body).encode(),
        )


def _text(value: JSON) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _result(op: Operation, response: httpx.Response) -> dict[str, JSON]:
    text = response.text
    result: dict[str, JSON] = {"content": [{"type": "text", "text": text}]}
    ok, value = parse(text)
    if response.status_code < 400 and "outputSchema" in op.tool and ok and isinstance(value, dict):
        result["structuredContent"] = value
    result["isError"] = response.status_code >= 400
    return result


__all__ = [
    "SUPPORTED_VERSIONS",
    "OpenApiServer",
    "Operation",
    "Param",
    "SpecError",
    "initialize_result",
    "load_spec",
    "operations",
]
