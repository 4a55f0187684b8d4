"""Drives simworld's MCP server with the mcp SDK 2.x client (`mcp.Client`) and with
`fastmcp.Client`; run with a virtualenv that has both (fastmcp 4 pins mcp 2.x) and not
simworld, by tests/server/test_mcp_contract.py:

    VENV/bin/python tests/server/mcp2_client_check.py CONFIG_JSON

CONFIG_JSON: {"http": URL of a `mock` env's /mcp (`add` answered exactly), "stdio": the
argv of `simworld mcp --env mock ...`}. Each client connects over streamable HTTP (the
URL) and over stdio (mcp: StdioServerParameters; fastmcp: an `{"mcpServers": {...}}`
config, the form a real server's config takes, so swapping it is changing `command`),
in its default mode: mcp 2.x probes `server/discover` first and falls back to
`initialize`. Each lists the tools, calls `add` (structured result), makes a
schema-invalid call (isError) and calls an unknown tool (a JSON-RPC error). A failed
check raises (exit status 1); success prints what was seen as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import fastmcp
import mcp
from mcp import MCPError, StdioServerParameters


async def with_mcp(target: str | StdioServerParameters) -> dict[str, Any]:
    async with mcp.Client(target) as client:
        tools, cursor = [], None
        while True:  # mcp.Client.list_tools answers one page
            page = await client.list_tools(cursor=cursor)
            tools += page.tools
            if (cursor := page.next_cursor) is None:
                break
        added = await client.call_tool("add", {"n": 3})
        assert not added.is_error and added.structured_content == {"total": 3}, added
        refused = await client.call_tool("add", {"n": 0})
        assert refused.is_error, refused
        try:
            await client.call_tool("nope", {})
        except MCPError as exc:
            unknown = {"code": exc.code, "message": exc.message}
        else:
            raise AssertionError("an unknown tool did not raise")
        return {
            "version": client.protocol_version,
            "tools": [tool.name for tool in tools],
            "added": added.structured_content,
            "refused": refused.content[0].text,
            "unknown": unknown,
        }


async def with_fastmcp(target: str | dict[str, Any]) -> dict[str, Any]:
    async with fastmcp.Client(target) as client:
        tools = await client.list_tools()
        added = await client.call_tool("add", {"n": 3})
        refused = await client.call_tool("add", {"n": 0}, raise_on_error=False)
        assert refused.is_error, refused
        try:
            await client.call_tool("nope", {})
        except Exception as exc:  # fastmcp wraps some errors: report what it raised
            unknown = {"type": type(exc).__name__, "message": str(exc)}
        else:
            raise AssertionError("an unknown tool did not raise")
        return {
            "tools": [tool.name for tool in tools],
            "added": added.structured_content,
            "data_total": added.data.total,  # fastmcp builds a type from outputSchema
            "refused": refused.content[0].text,
            "unknown": unknown,
        }


async def main(config: dict[str, Any]) -> None:
    argv = config["stdio"]
    stdio = StdioServerParameters(command=argv[0], args=argv[1:])
    servers = {"mcpServers": {"sim": {"command": argv[0], "args": argv[1:]}}}
    report = {
        "mcp_http": await with_mcp(config["http"]),
        "mcp_stdio": await with_mcp(stdio),
        "fastmcp_http": await with_fastmcp(config["http"]),
        "fastmcp_stdio": await with_fastmcp(servers),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
