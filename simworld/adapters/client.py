"""A thin client of a running simworld server's native REST API (server/rest.py), over
httpx: what every trainer adapter here shares. It needs no torch, only httpx.

    from simworld.adapters.client import SimworldClient, tool_call

    with SimworldClient("http://127.0.0.1:8000") as client:
        started = client.start("mock", task_id="count-0")      # POST /v1/episodes
        started.instruction, started.tools                     # OpenAI function tools
        stepped = client.step(started.episode_id, tool_calls=[tool_call("add", {"n": 3})])
        stepped.text, stepped.reward, stepped.terminated, stepped.truncated
        client.close_episode(started.episode_id)               # DELETE

Replies become small frozen dataclasses (`Started`, `Stepped`); the JSON of a simworld
Observation stays a dict (`observation`), and `observation_text` reads it as one string.
A server error (any non-2xx) raises `ServerError` carrying the status and the server's
`{"error": {"kind", "message"}}`; a connection failure is httpx's own exception.
`token` is sent as `Authorization: Bearer <token>`; a server whose clients cannot send
headers also takes `base_url="http://host:port/k/<token>"`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

DEFAULT_TIMEOUT = 120.0  # seconds: a step may wait for a batched world-model call


class ServerError(Exception):
    """A non-2xx answer: `status` (HTTP), `kind` (the server's error label, e.g.
    "not_found", "conflict", "validation") and the server's `message`."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"HTTP {status} ({kind}): {message}")
        self.status = status
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Started:
    """A new episode (the reply to POST /v1/episodes)."""

    episode_id: str
    env: str
    task_id: str
    instruction: str
    action_kind: str  # "tool_calls" or "text"
    max_steps: int
    observation: dict[str, Any] | None  # simworld Observation JSON; None for most tool envs
    tools: list[dict[str, Any]]  # OpenAI function tools
    info: dict[str, Any]

    @property
    def text(self) -> str | None:
        """The first observation as text, or None when the env gives none."""
        return None if self.observation is None else observation_text(self.observation)


@dataclass(frozen=True)
class Stepped:
    """One step's result (the reply to POST /v1/episodes/{id}/step)."""

    observation: dict[str, Any]  # simworld Observation JSON
    messages: list[dict[str, Any]]  # OpenAI tool messages, one per call ([] for text envs)
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]  # {"source", "retries", "problems", "step", "shadow"?}

    @property
    def text(self) -> str:
        return observation_text(self.observation)

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


def observation_text(observation: dict[str, Any]) -> str:
    """A simworld Observation's JSON as one string: a text observation's text, or the
    texts of the tool results joined by newlines (in call order)."""
    if observation.get("kind") == "text":
        return str(observation["text"])
    return "\n".join(str(result["text"]) for result in observation.get("results", []))


def tool_call(
    name: str, arguments: dict[str, Any] | str, call_id: str = "call_0"
) -> dict[str, Any]:
    """An OpenAI tool call; `arguments` is sent as given when a string, else as JSON."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


class SimworldClient:
    """The native REST API of the server at `base_url` (see the module docstring)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout, transport=transport
        )

    # ------------------------------------------------------------------ episodes

    def envs(self) -> list[dict[str, Any]]:
        """GET /v1/envs: each served env's name, action kind, tasks, tools, step limit."""
        envs: list[dict[str, Any]] = self.request("GET", "/v1/envs")["envs"]
        return envs

    def start(
        self,
        env: str,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        initial_state: Any = None,
    ) -> Started:
        """Start an episode of `env` (task `task_id`, else the one `seed` picks)."""
        body: dict[str, Any] = {"env": env}
        for key, value in (("task_id", task_id), ("seed", seed), ("initial_state", initial_state)):
            if value is not None:
                body[key] = value
        reply = self.request("POST", "/v1/episodes", body)
        return Started(**{field: reply[field] for field in Started.__dataclass_fields__})

    def step(
        self,
        episode_id: str,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        text: str | None = None,
    ) -> Stepped:
        """One action: OpenAI `tool_calls`, or a `text` action (exactly one of them)."""
        if (tool_calls is None) == (text is None):
            raise ValueError("step takes exactly one of tool_calls and text")
        body = {"text": text} if tool_calls is None else {"tool_calls": tool_calls}
        reply = self.request("POST", f"/v1/episodes/{episode_id}/step", body)
        return Stepped(**{field: reply[field] for field in Stepped.__dataclass_fields__})

    def episode(self, episode_id: str) -> dict[str, Any]:
        """GET /v1/episodes/{id}: task, state, steps so far, whether it is over."""
        view: dict[str, Any] = self.request("GET", f"/v1/episodes/{episode_id}")
        return view

    def close_episode(self, episode_id: str, *, missing_ok: bool = False) -> None:
        """DELETE the episode; with `missing_ok`, one the server no longer knows (closed,
        or expired after its idle limit) is not an error."""
        try:
            self.request("DELETE", f"/v1/episodes/{episode_id}")
        except ServerError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    # ------------------------------------------------------------------ plumbing

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        """The JSON reply of one request; ServerError on a non-2xx status."""
        response = self.http.request(method, path, json=body, params=params)
        if response.is_success:
            return response.json()
        raise _server_error(response)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> SimworldClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _server_error(response: httpx.Response) -> ServerError:
    """The error a non-2xx reply carries (the server's JSON, else the raw text)."""
    try:
        body = response.json()
    except ValueError:
        return ServerError(response.status_code, "http", response.text[:500])
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return ServerError(response.status_code, str(error["kind"]), str(error["message"]))
    detail = body.get("detail", body) if isinstance(body, dict) else body
    return ServerError(response.status_code, "http", str(detail)[:500])


__all__ = [
    "DEFAULT_TIMEOUT",
    "ServerError",
    "SimworldClient",
    "Started",
    "Stepped",
    "observation_text",
    "tool_call",
]
