"""Scripted client sessions with the official `mcp` SDK's client (1.x), for the capture and
proxy tests: the same code runs against the real server's proxy and against the simulated
server; only the URL changes.

    python notes_mcp_client.py URL SESSIONS.json    # prints one JSON line, the report

SESSIONS.json: [[["add_note", {"title": "milk"}], ["list_notes", {}]], ...], one list of
calls per session; each session is its own MCP session (streamable HTTP: initialize,
tools/list, the calls in order, then the SDK's DELETE). The report: {"server": serverInfo
name, "sessions": [{"session_id", "tools": [names], "results": [{"name", "is_error",
"text", "structured"}]}]}. Runs with the mcp test venv's python (client_venvs.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def run_session(url: str, calls: list[list[Any]]) -> tuple[str, dict[str, Any]]:
    async with (
        streamablehttp_client(url) as (read, write, session_id),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        listed = await session.list_tools()
        results = []
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            texts = [block.text for block in result.content if block.type == "text"]
            results.append(
                {
                    "name": name,
                    "is_error": result.isError,
                    "text": "\n".join(texts),
                    "structured": result.structuredContent,
                }
            )
        report = {
            "session_id": session_id(),
            "tools": [tool.name for tool in listed.tools],
            "results": results,
        }
        return init.serverInfo.name, report


async def main(url: str, plan: list[list[list[Any]]]) -> dict[str, Any]:
    server, sessions = "", []
    for calls in plan:
        server, report = await run_session(url, calls)
        sessions.append(report)
    return {"server": server, "sessions": sessions}


if __name__ == "__main__":
    with open(sys.argv[2], encoding="utf-8") as stream:
        sessions = json.load(stream)
    print(json.dumps(asyncio.run(main(sys.argv[1], sessions))))
