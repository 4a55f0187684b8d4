"""simworld.simulators: simulated environments built on a world model (sessions, schema
checks, routing). Not built yet: see the open issues."""
