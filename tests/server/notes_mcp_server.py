"""A small real MCP server for the capture and proxy tests: a notes store, written with the
official `mcp` SDK's FastMCP (1.x), stateful within one process.

    python notes_mcp_server.py                         # stdio (one client, one store)
    python notes_mcp_server.py --http 9000 [--json]    # streamable HTTP at /mcp (SSE replies,
                                                       # or JSON ones with --json)

Runs with the python of the mcp test venv (tests/server/client_venvs.py), never simworld's.
Tools: add_note(title, body?) -> {"id", "title"}; list_notes() -> {"count", "titles"};
get_note(id) -> the note, with an outputSchema (an unknown id is a tool error);
delete_note(id) -> {"deleted"}; login(user, password) -> a session token (for redaction).
Results are deterministic: ids count from 1 and the token is derived from the user.
"""

from __future__ import annotations

import argparse
import hashlib
from typing import TypedDict

from mcp.server.fastmcp import FastMCP


class Note(TypedDict):
    id: int
    title: str
    body: str


def build(port: int = 8000, json_response: bool = False) -> FastMCP:
    server = FastMCP(
        "notes",
        instructions="A notes store: add, list, read and delete short notes.",
        port=port,
        json_response=json_response,
    )
    notes: dict[int, Note] = {}

    @server.tool(structured_output=False)
    def add_note(title: str, body: str = "") -> dict[str, object]:
        """Add a note; returns its id and title."""
        note_id = max(notes, default=0) + 1
        notes[note_id] = Note(id=note_id, title=title, body=body)
        return {"id": note_id, "title": title}

    @server.tool(structured_output=False)
    def list_notes() -> dict[str, object]:
        """The number of notes and their titles."""
        return {"count": len(notes), "titles": [n["title"] for n in notes.values()]}

    @server.tool()
    def get_note(id: int) -> Note:
        """One note by id."""
        if id not in notes:
            raise ValueError(f"no note {id}")
        return notes[id]

    @server.tool(structured_output=False)
    def delete_note(id: int) -> dict[str, object]:
        """Delete a note by id."""
        return {"deleted": notes.pop(id, None) is not None}

    @server.tool(structured_output=False)
    def login(user: str, password: str) -> dict[str, object]:
        """Log in; returns a session token."""
        token = "tok-" + hashlib.sha256(f"{user}:{password}".encode()).hexdigest()[:16]
        return {"user": user, "token": token}

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument("--json", action="store_true", help="JSON replies instead of SSE")
    args = parser.parse_args()
    if args.http is None:
        build().run("stdio")
    else:
        build(args.http, args.json).run("streamable-http")


if __name__ == "__main__":
    main()
