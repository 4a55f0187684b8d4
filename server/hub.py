"""The server's state behind every protocol: the envs, one router per env over the shared
world model, and the live sessions, with their limits, owners, recording and metrics.

    hub = Hub({"bfcl": load_sim_env("bfcl")}, load_world_model("default"))
    live, first = hub.open("bfcl", owner="", seed=3)            # server-chosen id
    result = hub.step(live.id, "", action)                        # simulators.session.StepResult
    hub.state(live.id, ""), hub.close(live.id, "")

Every protocol adapter (native REST, OpenEnv HTTP and WebSocket, later MCP) is a thin
layer over these calls, so the same seed gives the same episode whichever drives it.

Decisions:
- Ids. `open` without a key draws the id from `secrets` (192 bits, URL-safe): the id is a
  capability. With a key (OpenEnv HTTP clients name their own `episode_id`), the key is
  the id within the owner's namespace; opening an existing key resets that session.
- Owners. Sessions live under (owner, id); the owner is the caller's credential (the API
  token, "" when the server has none). Asking for an id under another owner reads exactly
  like asking for one that does not exist (404), so one session can never reach another.
- Limits. `max_sessions` live sessions (idle ones are swept first; past it, 429);
  `idle_seconds` without a call ends a session (it then reads as unknown); `max_steps`
  caps every env's own step limit (an episode at the cap is truncated; a further step is
  a 409 like any finished episode). Request size is the HTTP layer's (Limits carries it).
- Routing. One RouterConfig for the server, applied to each env as far as it can be: the
  real-backend settings (real_tools, max_real_cost, shadow) only where the env has a real
  backend, real_tools cut to the env's own tools (a name no served env has is an error).
- Concurrency. Steps of one session run one at a time (a lock per session); sessions run
  in parallel, and their model calls meet in the batching model.
- Errors. Client mistakes raise `HubError` subclasses carrying an HTTP status and a kind
  (the metrics' error label); adapters map them to their protocol. Anything else is a bug,
  with one exception: a session started from a client's own `initial_state` may hold a
  state the env's code cannot read (`{"totl": 3}` for the counter), so an exception while
  stepping it is the client's mistake (BadRequest naming initial_state), and a state whose
  JSON type differs from the task's own (an array for an object) is refused at reset.
- No model. A hub built with `model=None` answers what rules, a real backend and the cache
  cover; a step that needs the world model is refused with Unavailable (503).
- Simulate. `simulate` answers one action from a task and a state without keeping a
  session: a throwaway session, not counted against max_sessions, never recorded.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from simworld.data.records import JSON, Action, Episode
from simworld.server.metrics import Metrics
from simworld.server.recording import Recorder
from simworld.simulators.env import SimEnv, UnknownTask
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import ActionError, Reset, Session, SessionError, StepResult
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import Prediction, WorldModel


@dataclass(frozen=True)
class Limits:
    """What one server allows (each answered with a clear 4xx when reached)."""

    max_sessions: int = 1024
    idle_seconds: float = 1800.0
    max_request_bytes: int = 1_000_000
    max_steps: int | None = None  # None: each env's own limit

    def __post_init__(self) -> None:
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {self.max_sessions}")
        if self.idle_seconds <= 0:
            raise ValueError(f"idle_seconds must be positive, got {self.idle_seconds}")
        if self.max_request_bytes < 1024:
            raise ValueError(f"max_request_bytes must be >= 1024, got {self.max_request_bytes}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be at least 1 (or None), got {self.max_steps}")


class HubError(Exception):
    """A client mistake: `status` is the HTTP status, `kind` the error label."""

    status = 400
    kind = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(HubError):
    status, kind = 404, "not_found"


class BadRequest(HubError):
    status, kind = 422, "validation"


class Conflict(HubError):
    status, kind = 409, "conflict"


class LimitReached(HubError):
    status, kind = 429, "limit"


class Unavailable(HubError):
    status, kind = 503, "unavailable"


class NoModel:
    """The stand-in world model of a hub without one: any step that reaches it is refused."""

    budget = Budget()

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        raise Unavailable(
            "this server runs without a world model (--model none), and no rule, real "
            "backend or cached answer covers this step; serve a model to answer it"
        )


@dataclass
class Live:
    """One live session and its bookkeeping."""

    id: str
    owner: str
    env: str
    session: Session
    last_used: float
    record_id: str | None = None
    client_state: bool = False  # reset from the client's own initial_state
    lock: threading.Lock = field(default_factory=threading.Lock)


class Hub:
    """Envs, routers and live sessions (see the module docstring). Thread-safe."""

    def __init__(
        self,
        envs: Mapping[str, SimEnv],
        model: WorldModel | None,
        *,
        router: RouterConfig | None = None,
        limits: Limits | None = None,
        recorder: Recorder | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not envs:
            raise ValueError("a hub needs at least one env")
        self.limits = limits or Limits()
        self.envs = {name: self._capped(env) for name, env in envs.items()}
        answerer = NoModel() if model is None else model
        config = router or RouterConfig()
        self.routers = {
            name: Router(env, answerer, _config_for(env, config)) for name, env in self.envs.items()
        }
        served = {name for env in self.envs.values() for name in _tool_names(env)}
        unknown = sorted(config.real_tools - served)
        if unknown:
            raise ValueError(f"real_tools names tools no served env has: {unknown}")
        self.model = model
        self.recorder = recorder
        self.metrics = metrics or Metrics()
        self._clock = clock
        self._live: dict[tuple[str, str], Live] = {}
        self._lock = threading.Lock()

    # -------------------------------------------------------------- lookups

    def env(self, name: str) -> SimEnv:
        if name not in self.envs:
            raise NotFound(f"no env {name!r} is served here; envs: {', '.join(self.envs)}")
        return self.envs[name]

    def get(self, episode_id: str, owner: str) -> Live:
        """The live session `episode_id` of `owner` (unknown, expired and foreign alike: 404)."""
        with self._lock:
            self._sweep()
            live = self._live.get((owner, episode_id))
            if live is None:
                raise NotFound(f"no live episode {episode_id!r} (unknown, closed or expired)")
            live.last_used = self._clock()
            return live

    def live_count(self) -> int:
        with self._lock:
            self._sweep()
            return len(self._live)

    # -------------------------------------------------------------- lifecycle

    def open(
        self,
        env: str,
        owner: str,
        *,
        task_id: str | None = None,
        seed: int | None = None,
        initial_state: JSON = None,
        key: str | None = None,
    ) -> tuple[Live, Reset]:
        """Start an episode of `env`: a new session (server-chosen id when `key` is None),
        or, when `owner` already has a live session keyed `key`, a reset of it."""
        sim = self.env(env)
        if key is not None:
            with self._lock:
                existing = self._live.get((owner, key))
            if existing is not None and existing.env == env:
                return existing, self.reset(key, owner, task_id, seed, initial_state)
            if existing is not None:
                self.close(key, owner)
        episode_id = key if key is not None else secrets.token_urlsafe(24)
        live = Live(
            episode_id,
            owner,
            env,
            Session(sim, self.routers[env], episode_id=episode_id),
            self._clock(),
        )
        with self._lock:
            self._check_room()  # before the reset: a refused session is neither reset nor recorded
        first = self._reset(live, task_id, seed, initial_state)
        with self._lock:
            try:
                self._check_room()
            except LimitReached:
                self._end_record(live)
                raise
            self._live[(owner, episode_id)] = live
            self.metrics.sessions(len(self._live))
        return live, first

    def reset(
        self,
        episode_id: str,
        owner: str,
        task_id: str | None = None,
        seed: int | None = None,
        initial_state: JSON = None,
    ) -> Reset:
        live = self.get(episode_id, owner)
        with live.lock:
            return self._reset(live, task_id, seed, initial_state)

    def step(self, episode_id: str, owner: str, action: Action) -> StepResult:
        live = self.get(episode_id, owner)
        with live.lock:
            return self._step(live, action)

    def simulate(
        self,
        env: str,
        action: Action,
        *,
        task_id: str | None = None,
        state: JSON = None,
        seed: int | None = None,
    ) -> tuple[str, StepResult, JSON]:
        """The answer to `action` from `state` (None: the task's own initial state) in task
        `task_id` (None: chosen by `seed`): the task's id, the step's result and the state
        after it. No session is kept."""
        sim = self.env(env)
        episode_id = "simulate-" + secrets.token_urlsafe(12)
        session = Session(sim, self.routers[env], episode_id=episode_id)
        live = Live(episode_id, "", env, session, self._clock())
        first = self._reset(live, task_id, seed, state, record=False)
        result = self._step(live, action)
        after = session.state()["state"]
        session.close()
        return first.task.id, result, after

    def state(self, episode_id: str, owner: str) -> dict[str, JSON]:
        live = self.get(episode_id, owner)
        with live.lock:
            return live.session.state()

    def episode(self, episode_id: str, owner: str) -> Episode:
        """The session's episode so far (a copy: task, tools, steps with their states)."""
        live = self.get(episode_id, owner)
        with live.lock:
            return live.session.episode()

    def close(self, episode_id: str, owner: str) -> None:
        with self._lock:
            live = self._live.pop((owner, episode_id), None)
            self.metrics.sessions(len(self._live))
        if live is None:
            raise NotFound(f"no live episode {episode_id!r} (unknown, closed or expired)")
        self._end_record(live)
        live.session.close()

    def close_all(self) -> None:
        with self._lock:
            lives = list(self._live.values())
            self._live.clear()
            self.metrics.sessions(0)
        for live in lives:
            self._end_record(live)
            live.session.close()

    # -------------------------------------------------------------- internals

    def _capped(self, env: SimEnv) -> SimEnv:
        cap = self.limits.max_steps
        return env if cap is None or cap >= env.max_steps else replace(env, max_steps=cap)

    def _check_room(self) -> None:
        """LimitReached when no session may be added (the caller holds the lock)."""
        self._sweep()
        if len(self._live) >= self.limits.max_sessions:
            raise LimitReached(
                f"{len(self._live)} sessions are live, the limit is "
                f"{self.limits.max_sessions}: close finished ones (DELETE) and retry"
            )

    def _reset(
        self,
        live: Live,
        task_id: str | None,
        seed: int | None,
        initial_state: JSON,
        record: bool = True,
    ) -> Reset:
        try:
            task = live.session.env.task_for(task_id, seed)
        except UnknownTask as exc:
            raise NotFound(str(exc)) from exc
        _check_state_shape(initial_state, task.initial_state, live.env)
        try:
            first = live.session.reset(task_id=task.id, initial_state=initial_state, seed=seed)
        except SessionError as exc:
            raise Conflict(str(exc)) from exc
        live.client_state = initial_state is not None
        if record and self.recorder is not None:
            live.record_id = self.recorder.begin(live.session.episode())
        return first

    def _step(self, live: Live, action: Action) -> StepResult:
        """One step of `live` (the caller holds its lock): run, record, count."""
        started = time.perf_counter()
        try:
            result = live.session.step(action)
        except ActionError as exc:
            raise BadRequest(str(exc)) from exc
        except SessionError as exc:
            raise Conflict(str(exc)) from exc
        except BudgetError as exc:
            raise _budget_refusal(exc, live) from exc
        except HubError:
            raise
        # A state the client supplied may be one the env's code cannot read; that is the
        # client's mistake, not the server's (see the module docstring).
        except Exception as exc:
            if not live.client_state:
                raise
            raise BadRequest(
                f"initial_state: env {live.env!r} could not take a step from the state given "
                f"({type(exc).__name__}: {exc}); send a state shaped like the task's own"
            ) from exc
        seconds = time.perf_counter() - started
        index = result.info["step"]
        if self.recorder is not None and live.record_id is not None:
            assert isinstance(index, int)
            self.recorder.step(live.record_id, index, live.session.episode().steps[index])
        self.metrics.step(live.env, str(result.info["source"]), seconds)
        shadow = result.info.get("shadow")
        if isinstance(shadow, dict):
            self.metrics.shadow(live.env, bool(shadow["match"]))
        return result

    def _end_record(self, live: Live) -> None:
        if self.recorder is not None and live.record_id is not None:
            self.recorder.end(live.record_id)
            live.record_id = None

    def _sweep(self) -> None:
        """Drop sessions idle past the limit (the caller holds the lock)."""
        deadline = self._clock() - self.limits.idle_seconds
        for key in [k for k, live in self._live.items() if live.last_used < deadline]:
            live = self._live.pop(key)
            self._end_record(live)
            live.session.close()
        self.metrics.sessions(len(self._live))


def _tool_names(env: SimEnv) -> set[str]:
    return {tool.name for task in env.tasks.values() for tool in task.tools}


def _config_for(env: SimEnv, config: RouterConfig) -> RouterConfig:
    """The server's router config as it applies to `env`: its real-backend settings only
    where the env has a real backend, `real_tools` cut to the env's own tools."""
    if env.real is None:
        return replace(config, real_tools=frozenset(), max_real_cost=0.0, shadow=False)
    return replace(config, real_tools=config.real_tools & _tool_names(env))


def _check_state_shape(given: JSON, own: JSON, env: str) -> None:
    """BadRequest when a client's initial_state is not the same kind of JSON value as the
    task's own (an object for an object); None (the task's own state) always passes."""
    if given is None or own is None:
        return
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    want = kinds.get(type(own), "a number")
    got = kinds.get(type(given), "a number")
    if want != got:
        raise BadRequest(f"initial_state: env {env!r} keeps its state as {want}, got {got}")


TOO_LONG = "the step does not fit the world model's context"  # the 422 when the action is


def _budget_refusal(exc: BudgetError, live: Live) -> HubError:
    """A step whose context does not fit the model: the client's mistake when its own
    action (or the state it supplied) is what overflows, else this server's (the model was
    trained with a context too short for this env's tools or rules)."""
    if exc.block == "action" or live.client_state:
        return BadRequest(f"{TOO_LONG}: {exc}")
    return Unavailable(
        f"the world model cannot serve this {live.env!r} step: {exc} (serve a model trained "
        "with a longer context for this env)"
    )


__all__ = [
    "BadRequest",
    "Conflict",
    "Hub",
    "HubError",
    "LimitReached",
    "Limits",
    "Live",
    "NoModel",
    "NotFound",
    "Unavailable",
]
