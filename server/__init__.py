"""simworld.server: the FastAPI app serving simulated environments (`simworld serve`).

    from simworld.server import Settings, create_app
    app = create_app(Settings(model="default", envs=("bfcl",)))   # then uvicorn.run(app)

- `settings`: what one server runs (model, envs, address, API keys, limits, batching,
  recording, routing).
- `app`: `create_app`, the lifespan that loads model and envs, the error contract (JSON
  errors by kind, 413, the 500 of last resort); `auth`: API tokens (bearer header or
  `/k/<token>/` URL prefix); `deps`: the hub and the caller's owner for routes.
- `hub`: envs, routers and live sessions with their limits and owners, behind every
  protocol; `batching`: concurrent model calls merged; `recording`: served steps appended
  to a dump; `metrics`: Prometheus text.
- Protocols: `rest` + `wire` (native REST, `/v1/...`), `openenv` + `openenv_wire`
  (OpenEnv HTTP and WebSocket), `mcp` + `mcp_wire` (MCP streamable HTTP and OpenEnv's
  JSON-RPC at `/mcp`), `mcp_stdio` (`simworld mcp`, the same over stdin/stdout).
- `cli`: `simworld serve`.

Importing the package imports FastAPI, not torch: the model loads in the app's lifespan.
"""

from simworld.server.app import create_app
from simworld.server.settings import Settings

__all__ = ["Settings", "create_app"]
