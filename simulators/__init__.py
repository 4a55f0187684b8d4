"""simworld.simulators: simulated environments built on a world model.

Built so far: `validation` (an action checked against the tools' input schemas before any
model is asked, with the error text the env's real API would give) and `cache` (the exact
cache of the router, keyed on env, state and canonical action). Sessions, the router and
the envs are not built yet: see the open issues."""
