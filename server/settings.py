"""What one `simworld serve` runs: the model, the envs, the address, the API keys, the
limits, batching, recording and routing. A small dataclass; `simworld serve` fills it from
its flags, tests build it directly.

    settings = Settings(model="default", envs=("bfcl",), port=8000)
    Settings(model=None, envs=("mock",))         # no world model: rules, real and cache only
    app = create_app(settings)                    # simworld.server.app

Decisions:
- `model`: "default" (the small model shipped in the package), a checkpoint directory, or
  None for a server without a world model: steps that no rule, real backend or cached
  answer covers are then answered 503 (see hub.py), never guessed.
- `api_keys`: read from the environment variable SIMWORLD_API_KEY when not given (several
  keys separated by commas; each key is its own owner namespace, see auth.py). Empty: the
  server runs without a token. Keys travel in URLs (`/k/<key>/...`), so only URL-safe
  characters are allowed, and at least 16 of them.
- `max_batch` 1 or `max_wait_ms` 0 turns request batching off (the model is called as is).
- `batching_mode`: "continuous" (default) lets rows join and leave the running batch step
  by step where the model can (the transformers engine's own decode path), gathering
  elsewhere; "gather" always gathers whole calls (server/batching.py).
- `prefix_cache` (64): how many prompts the own decode path keeps the keys and values of
  (PrefixCache, LRU), batching on or off; a step reuses the longest cached start of its
  prompt (its session's previous step shares its opening, a retry all of it). About
  2.5 MB a prompt for the default model; None leaves the engine's own size (8).
- `dtype` ("float32"): "bfloat16" casts the model's weights and KV cache to bfloat16
  ("auto": bfloat16 where the hardware multiplies it natively, a CPU with AMX or
  AVX512-BF16 or a GPU that supports it; float32 elsewhere). Same accuracy on the bundled
  test split (BFCL JSON-canonical 0.405 against 0.404), more steps/s from 8 sessions up and
  fewer at one session (see the README's serving figures), and a session's answers still
  do not depend on the other sessions in its batch (engines/hf.py). float32 stays the
  default: it answers exactly what `simworld eval` measures, it is the faster choice with
  few sessions or batching off, and its independence of the batch does not rest on the
  CPU's bfloat16 kernels. MDLM checkpoints run in float32 whatever this says.
- `worker_threads` (256): how many requests the sync routes run at once (app.py raises
  anyio's worker-thread limit to it; anyio's own default of 40 let only 40 of 64
  concurrent sessions reach the batching model). A session steps one request at a time,
  so this bounds the sessions whose steps are in flight together; 256 leaves room past a
  full batch of every benchmarked concurrency and for the other routes, while keeping the
  thread count far below `max_sessions` (threads are started on demand).
- `torch_threads`: torch's intra-op threads while the server runs (restored when it
  stops). None: one less than the usable cores, at least one (`serving_threads()`), which
  leaves a core to the request threads: measured on 2 cores with `simworld bench serve`,
  one thread served one session 3.92 steps/s against 1.68 with torch's default two (p50
  166 ms against 290), and 32 sessions as much (12.44 against 12.40, batched).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from simworld.server.hub import Limits
from simworld.simulators.envs import SIM_ENVS, sim_env_name
from simworld.simulators.envs.captured import find_captured_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.engines.base import DTYPE_CHOICES

API_KEY_VARIABLE = "SIMWORLD_API_KEY"
MIN_KEY_LENGTH = 16
WORKER_THREADS = 256
BATCHING_MODES = ("continuous", "gather")


def serving_threads() -> int:
    """torch intra-op threads for a server when none are asked for: one less than the
    cores this process may use (at least one), so the request threads keep a core."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


_KEY_CHARS = re.compile(r"[A-Za-z0-9._~-]+")


def keys_from_environment() -> tuple[str, ...]:
    """The API keys in SIMWORLD_API_KEY (comma-separated; unset or empty: none)."""
    raw = os.environ.get(API_KEY_VARIABLE, "")
    return tuple(key.strip() for key in raw.split(",") if key.strip())


@dataclass(frozen=True)
class Settings:
    """One server's configuration (see the module docstring)."""

    model: str | None = "default"
    envs: tuple[str, ...] = ("bfcl",)
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = field(default_factory=keys_from_environment)
    limits: Limits = field(default_factory=Limits)
    max_batch: int = 32
    max_wait_ms: float = 5.0
    batching_mode: str = "continuous"  # or "gather"
    prefix_cache: int | None = 64  # prompts kept by the own decode path; None: its default
    record: Path | None = None
    router: RouterConfig = field(default_factory=RouterConfig)
    device: str | None = None  # the model's torch device; None: the engine's choice
    dtype: str = "float32"  # the model's weights: "float32", "bfloat16" or "auto"
    worker_threads: int = WORKER_THREADS
    torch_threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "envs", tuple(self.envs))
        object.__setattr__(self, "api_keys", tuple(self.api_keys))
        self._check_envs()
        self._check_model()
        self._check_keys()
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be 0..65535 (0: any free port), got {self.port}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be at least 1 (1: no batching), got {self.max_batch}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0 (0: no batching), got {self.max_wait_ms}")
        if self.batching_mode not in BATCHING_MODES:
            raise ValueError(
                f"batching_mode must be one of {', '.join(BATCHING_MODES)}, "
                f"got {self.batching_mode!r}"
            )
        if self.prefix_cache is not None and self.prefix_cache < 0:
            raise ValueError(f"prefix_cache must be >= 0 (0: none), got {self.prefix_cache}")
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {self.dtype!r}")
        if self.worker_threads < 1:
            raise ValueError(f"worker_threads must be at least 1, got {self.worker_threads}")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError(
                f"torch_threads must be at least 1 (or None), got {self.torch_threads}"
            )
        if self.record is not None:
            record = Path(self.record)
            object.__setattr__(self, "record", record)
            if not record.parent.is_dir():
                raise ValueError(
                    f"record: the folder {record.parent} does not exist; create it or "
                    "record somewhere else"
                )

    @property
    def batching(self) -> bool:
        """Whether concurrent model calls are gathered into batches."""
        return self.max_batch > 1 and self.max_wait_ms > 0

    def _check_envs(self) -> None:
        if not self.envs:
            raise ValueError(f"envs: name at least one env to serve, from {', '.join(SIM_ENVS)}")
        unknown = [n for n in self.envs if n not in SIM_ENVS and find_captured_env(n) is None]
        if unknown:
            raise ValueError(
                f"envs: unknown env {unknown[0]!r}; choose from {', '.join(SIM_ENVS)} or give "
                "a captured env's directory"
            )
        try:  # a captured env's directory is served under its env's name
            object.__setattr__(self, "envs", tuple(sim_env_name(n) for n in self.envs))
        except ValueError as exc:
            raise ValueError(f"envs: {exc}") from exc
        twice = sorted({name for name in self.envs if self.envs.count(name) > 1})
        if twice:
            raise ValueError(f"envs: {twice[0]!r} is named twice; name each env once")

    def _check_model(self) -> None:
        if self.model is None or self.model == "default":
            return
        if not Path(self.model).is_dir():
            raise ValueError(
                f"model: {self.model!r} is not a checkpoint directory; pass a directory "
                'that `simworld train` wrote, "default", or none (no world model)'
            )

    def _check_keys(self) -> None:
        for key in self.api_keys:
            where = f"api key #{self.api_keys.index(key) + 1}"  # never the key itself
            if len(key) < MIN_KEY_LENGTH or not _KEY_CHARS.fullmatch(key):
                raise ValueError(
                    f"{where} must be at least {MIN_KEY_LENGTH} URL-safe characters "
                    "(A-Z a-z 0-9 . _ ~ -); make one with "
                    "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
                )
        if len(set(self.api_keys)) != len(self.api_keys):
            raise ValueError("api keys: the same key is given twice; give each key once")


__all__ = [
    "API_KEY_VARIABLE",
    "MIN_KEY_LENGTH",
    "WORKER_THREADS",
    "Settings",
    "keys_from_environment",
]
