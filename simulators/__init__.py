"""simworld.simulators: simulated environments built on a world model (plain Python: no
torch, no FastAPI at import).

- `env`: what an env is (tasks, tools, rules, checks, step limit, optional deterministic
  rules and real backend); `envs`: `load_sim_env("bfcl" | "frozenlake" | "mock" |
  "textworld")`.
- `validation`: an action checked against the tools' input schemas before any model is
  asked, with the error text the env's real API would give.
- `cache`: the router's exact cache (env, state, canonical action).
- `router`: rules → real backend (off by default; per tool or under a cost threshold) →
  cache → world model, with bounded retries on output-schema violations and shadow mode.
- `session`: one episode, `reset` / `step` / `state` / `close`, recordable as an Episode.

`simworld.server` exposes sessions over HTTP (REST, OpenEnv, MCP); nothing here imports it.
"""
