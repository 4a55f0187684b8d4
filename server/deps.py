"""What every route needs from the connection: the hub, and the caller's owner identity.

    @router.post("/v1/episodes")
    def create(body: CreateEpisode, hub: HubDep, owner: OwnerDep) -> EpisodeCreated: ...

The hub is built in the app's lifespan and kept on `app.state.hub` (tests build their own
and pass it to `create_app`). The owner is set by the auth middleware on the ASGI scope's
state (`scope["state"]["owner"]`), for HTTP requests and WebSockets alike: the API token
the caller presented, or "" when the server runs without one.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from simworld.server.hub import Hub


def hub_of(conn: HTTPConnection) -> Hub:
    hub: Hub = conn.app.state.hub
    return hub


def owner_of(conn: HTTPConnection) -> str:
    owner = conn.scope.get("state", {}).get("owner", "")
    assert isinstance(owner, str)
    return owner


HubDep = Annotated[Hub, Depends(hub_of)]
OwnerDep = Annotated[str, Depends(owner_of)]

__all__ = ["HubDep", "OwnerDep", "hub_of", "owner_of"]
