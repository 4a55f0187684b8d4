"""A hand-written streamable HTTP MCP server for the capture and proxy tests: small enough
to read, strict where the tests need it (a bearer token, sessions, paged tools/list, SSE
replies with a notification first), and it keeps every request it got for the asserts.

    upstream = FakeMcp(token="secret-token-0123456789", page_size=2, sse=True)
    base = serve(upstream.app())                      # tests/server/conftest.py's fixture
    url = base + "/mcp"
    upstream.requests                                 # [(method, headers, body text)]
    upstream.issued, upstream.ended                   # session ids given out, ended (DELETE)

Tools: `echo(text)` -> the text back; `login(user, password)` -> {"user", "token": a
session token made from the bearer token, so redaction of echoed secrets can be tested};
`boom()` -> a tool error. Replies are written with `json.dumps(..., indent=1)` so their
bytes differ from compact JSON: a proxy that re-serializes would be caught.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

TOOLS = [
    {
        "name": "echo",
        "description": "Echo the text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "inputSchema": {
            "type": "object",
            "properties": {"user": {"type": "string"}, "password": {"type": "string"}},
        },
        "name": "login",
        "title": "Log in",
    },
    {"name": "boom", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
]


class FakeMcp:
    """The server's state and its ASGI app (see the module docstring)."""

    def __init__(self, token: str | None = None, page_size: int | None = None, sse: bool = False):
        self.token = token
        self.page_size = page_size
        self.sse = sse
        self.requests: list[tuple[str, dict[str, str], str]] = []
        self.sessions: set[str] = set()
        self.issued: list[str] = []
        self.ended: list[str] = []

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/mcp", self._endpoint, methods=["POST", "DELETE"])])

    async def _endpoint(self, request: Request) -> Response:
        body = (await request.body()).decode()
        self.requests.append((request.method, dict(request.headers), body))
        if self.token and request.headers.get("authorization") != f"Bearer {self.token}":
            return JSONResponse({"error": "unauthorized"}, status_code=401)
        session = request.headers.get("mcp-session-id")
        if request.method == "DELETE":
            self.ended.append(session or "")
            self.sessions.discard(session or "")
            return Response(status_code=200)
        message = json.loads(body)
        if message.get("method") != "initialize" and session not in self.sessions:
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32600,
                                 "message": "no session"}}, status_code=404)  # fmt: skip
        if "id" not in message:
            return Response(status_code=202)
        headers = {}
        if message["method"] == "initialize":
            session = secrets.token_hex(8)
            self.sessions.add(session)
            self.issued.append(session)
            headers["mcp-session-id"] = session
        reply = {"jsonrpc": "2.0", "id": message["id"], **self._answer(message)}
        text = json.dumps(reply, indent=1)
        if not self.sse:
            return Response(text, media_type="application/json", headers=headers)
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                           "params": {"level": "info", "data": "working"}})  # fmt: skip
        data = "".join(f"data: {line}\n" for line in text.split("\n"))
        stream = f"event: message\ndata: {note}\n\nevent: message\n{data}\n"
        return Response(stream, media_type="text/event-stream", headers=headers)

    def _answer(self, message: dict[str, Any]) -> dict[str, Any]:
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            return {"result": {"protocolVersion": params.get("protocolVersion"),
                               "capabilities": {"tools": {"listChanged": True}},
                               "serverInfo": {"name": "fake", "version": "9.1"},
                               "instructions": "A fake server."}}  # fmt: skip
        if method == "tools/list":
            start = int(params.get("cursor") or 0)
            end = len(TOOLS) if self.page_size is None else start + self.page_size
            result: dict[str, Any] = {"tools": TOOLS[start:end]}
            if end < len(TOOLS):
                result["nextCursor"] = str(end)
            return {"result": result}
        if method == "tools/call":
            return {"result": self._call(params["name"], params.get("arguments") or {})}
        return {"error": {"code": -32601, "message": f"Method not found: {method}"}}

    def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if name == "echo":
            return {"content": [{"type": "text", "text": arguments["text"]}], "isError": False}
        if name == "login":
            value = {"user": arguments.get("user"), "token": f"session-of-{self.token}"}
            text = json.dumps(value, indent=2)
            return {"content": [{"type": "text", "text": text}], "structuredContent": value}
        return {"content": [{"type": "text", "text": "it blew up"}], "isError": True}
