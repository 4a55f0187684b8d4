"""Drives simworld's `/mcp` with openenv-core's MCPToolClient in production mode (its
JSON-RPC over HTTP `/mcp`: `openenv/session/create`, then `tools/list` and `tools/call`
with `session_id` in the params, `openenv/session/close` on exit); run with the
openenv-core virtualenv of test_openenv_contract.py, by test_mcp_contract.py:

    VENV/bin/python tests/server/openenv_mcp_check.py BASE_URL

BASE_URL is an OpenEnv base_url of the `mock` env (`http://127.0.0.1:PORT/envs/mock`);
the client derives `<BASE_URL>/mcp`. openenv-core 0.3.0 has no switch for production
mode: its own code reads the `use_production_mode` attribute, which is set here. A
tools/call result is MCP's CallToolResult, which the client returns as is (it unwraps a
FastMCP `data` key only when there is one). A failed check raises (exit status 1);
success prints what was seen as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from openenv.core.mcp_client import MCPToolClient


async def main(url: str) -> None:
    client = MCPToolClient(base_url=url)
    client.use_production_mode = True
    async with client:
        tools = await client.list_tools()
        first = await client.call_tool("add", n=3)
        second = await client.call_tool("add", n=2)  # the same session: the total grows
        refused = await client.call_tool("add", n=0)
        try:
            await client.call_tool("nope")
        except RuntimeError as exc:
            unknown = str(exc)
        else:
            raise AssertionError("an unknown tool did not raise")
        session = client._production_session_id
    report: dict[str, Any] = {
        "tools": [tool.name for tool in tools],
        "schema": tools[0].input_schema,
        "first": first,
        "second": second,
        "refused": refused,
        "unknown": unknown,
        "session_id": session,
        "closed": client._production_session_id is None,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
