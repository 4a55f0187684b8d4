"""Drives simworld's MCP server with the mcp SDK 1.x client (ClientSession); run with a
virtualenv that has `mcp<2` (and not simworld), by tests/server/test_mcp_contract.py:

    VENV/bin/python tests/server/mcp1_client_check.py CONFIG_JSON

CONFIG_JSON: {"http": URL of a `mock` env's /mcp (answered exactly: `add` by its real
backend), "model_http": URL of a `mock` /mcp whose `add` the world model answers (or
null), "stdio": the argv of `simworld mcp --env mock ...` (or null)}. Over streamable HTTP
and over stdio: initialize, every tools/list page, tools/call of `add` (structured
result), a schema-invalid call (isError), an unknown tool (a JSON-RPC error); on the
model's server, a call whose result, whatever the model says, passes the client's own
outputSchema check. A failed check raises (exit status 1); success prints what was seen
as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp import ClientSession, McpError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


async def exercise(session: ClientSession) -> dict[str, Any]:
    init = await session.initialize()
    tools, cursor = [], None
    while True:
        page = await session.list_tools(params=None if cursor is None else _page(cursor))
        tools += page.tools
        cursor = page.nextCursor
        if cursor is None:
            break
    added = await session.call_tool("add", {"n": 3})
    assert not added.isError and added.structuredContent == {"total": 3}, added
    again = await session.call_tool("add", {"n": 2})
    refused = await session.call_tool("add", {"n": 0})
    assert refused.isError and refused.structuredContent is None, refused
    try:
        await session.call_tool("nope", {})
    except McpError as exc:
        unknown = {"code": exc.error.code, "message": exc.error.message}
    else:
        raise AssertionError("an unknown tool did not raise")
    await session.send_ping()
    return {
        "version": init.protocolVersion,
        "server": init.serverInfo.name,
        "tools": [tool.name for tool in tools],
        "output_schema": tools[0].outputSchema,
        "added": added.structuredContent,
        "again": again.structuredContent,
        "refused": refused.content[0].text,
        "unknown": unknown,
    }


def _page(cursor: str) -> Any:
    from mcp.types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor)


async def over_http(url: str) -> dict[str, Any]:
    connection = streamable_http_client(url)
    async with connection as (read, write, session_id), ClientSession(read, write) as session:
        report = await exercise(session)
        report["session_id"] = session_id()
    return report


async def over_stdio(argv: list[str]) -> dict[str, Any]:
    server = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        return await exercise(session)


async def model_call(url: str) -> dict[str, Any]:
    """One call the world model answers: a valid result, or isError, never a refusal."""
    connection = streamable_http_client(url)
    async with connection as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        result = await session.call_tool("add", {"n": 2})
    return {"isError": result.isError, "structured": result.structuredContent}


async def main(config: dict[str, Any]) -> None:
    report: dict[str, Any] = {"http": await over_http(config["http"])}
    if config.get("stdio"):
        report["stdio"] = await over_stdio(config["stdio"])
    if config.get("model_http"):
        report["model"] = await model_call(config["model_http"])
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
