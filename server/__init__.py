"""simworld.server: the FastAPI app serving simulated environments (REST, OpenEnv, MCP).
Not built yet: see the open issues."""
