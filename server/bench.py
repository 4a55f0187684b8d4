"""The serving benchmark, `simworld bench serve`: steps/s and step latency of the real app
over real sockets, at several concurrent sessions, with request batching on and off, and
the steps/s of exact-cache hits.

    simworld bench serve                                    # default model, bfcl: ~7 min
    simworld bench serve --seconds 5 --sessions 1 8 --json serve.json
    result = bench_serve(ServeBenchConfig(model="out/tiny", env="frozenlake",
                                          sessions=(1, 4), seconds=1.0))
    print(format_result(result))

How it measures. Each server is `create_app(Settings(...))` under uvicorn on 127.0.0.1 (an
ephemeral port, in a thread of this process; the model loads in its lifespan as in
`simworld serve`). A session is one thread with its own httpx client: it opens an episode
(`POST /v1/episodes` on a task of a recorded episode from the bundled split), steps that
episode's recorded actions in order (OpenAI `tool_calls`, or `text` for a text env), closes
it (`DELETE`) when the actions run out or the episode ends, and goes on with the next
recorded episode. All sessions start together; after `warmup_seconds` a window of
`seconds` opens. A row counts the steps completed inside the window whose `info.source` is
the one the row measures; steps answered otherwise (a recorded call the schema check
refuses: "validation"; a step the model cannot serve, whose task every session then skips:
503 "unavailable" when its tool schemas alone pass the model's context budget, 422 when
the recorded action alone does; `over_budget` finds such tasks in the recorded episodes
before the first row) are reported as `other`, never counted. Steps/s is counted
/ window; p50 and p99 are the client-side latencies (request sent to response parsed) of
the counted steps; the mean batch is the growth of `/metrics` `simworld_batch_size` (_sum
/ _count) across the window: rows per decode step under continuous batching (the default,
`--batching continuous`), contexts per model call under `--batching gather` (none:
batching off, nothing is counted); retries is `info.retries` per counted step, the
router's sampled re-asks of a prediction with problems (one more model context each;
batched with other sessions' rows, each keeping its own seed).

Rows:
1. throughput, the exact cache off (every step is the model's): one server with batching
   on (`batching_mode`, `max_batch`, `max_wait_ms`), one with it off (`max_batch` 1), each
   at every count in `sessions`; both keep the server's default prefix cache (64
   prompts), so the ratio is what batching adds;
2. cache hits: a third server with the cache on; `cache_sessions` sessions each play one
   recorded episode once (the model's answers fill the cache), then replay it for the
   window: same task, same actions, so the same states, each step a hit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from simworld.server.bench_workload import Script, load_scripts, over_budget
from simworld.server.hub import TOO_LONG, Limits
from simworld.server.settings import BATCHING_MODES, WORKER_THREADS, Settings, serving_threads
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.engines.base import DTYPE_CHOICES

TARGET_RATIO = 5.0  # batched / unbatched steps/s at TARGET_SESSIONS (the target)
TARGET_SESSIONS = 32
START_TIMEOUT = 300.0  # seconds for a server to load its model and answer


@dataclass(frozen=True)
class ServeBenchConfig:
    """What one benchmark run measures (defaults: the full run, ~7 minutes on 2 cores)."""

    model: str = "default"  # "default" or a checkpoint directory
    env: str = "bfcl"
    sessions: tuple[int, ...] = (1, 8, 32, 64)
    seconds: float = 25.0  # the measured window of each row
    warmup_seconds: float = 5.0  # before each window: the first wave of steps, not counted
    cache_sessions: int = 8  # sessions of the cache-hit row (0: no cache row)
    max_batch: int = 32
    max_wait_ms: float = 5.0
    batching_mode: str = "continuous"  # the batched rows' mode: "continuous" or "gather"
    torch_threads: int | None = None  # None: the server's default (serving_threads())
    dtype: str = "float32"  # the model's weights (Settings.dtype), the same for every server
    split: str = "test"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sessions", tuple(self.sessions))
        if not self.sessions or min(self.sessions) < 1:
            raise ValueError(f"sessions must be counts >= 1, got {self.sessions}")
        if not (self.seconds > 0 and self.warmup_seconds >= 0):
            raise ValueError("seconds must be > 0 and warmup_seconds >= 0")
        if self.cache_sessions < 0:
            raise ValueError(f"cache_sessions must be >= 0 (0: none), got {self.cache_sessions}")
        if self.max_batch < 2:
            raise ValueError(f"max_batch must be >= 2 (the batched rows), got {self.max_batch}")


@dataclass(frozen=True)
class Row:
    """One measured row."""

    sessions: int
    batching: bool
    source: str  # who answered the counted steps: "model" or "cache"
    steps: int  # counted steps completed in the window
    seconds: float  # the window
    steps_per_s: float
    p50_ms: float
    p99_ms: float
    mean_batch: float | None  # rows per decode step (continuous) or contexts per call (gather)
    others: dict[str, int]  # steps in the window answered by other sources (not counted)
    retries: float  # sampled re-asks of the model per counted step (never batched)

    @property
    def other(self) -> int:
        return sum(self.others.values())


@dataclass(frozen=True)
class ServeBenchResult:
    config: ServeBenchConfig
    rows: list[Row]
    facts: dict[str, Any] = field(default_factory=dict)  # the machine and the server

    def ratio(self, sessions: int = TARGET_SESSIONS) -> float | None:
        """Batched over unbatched model steps/s at `sessions` (None: not measured)."""
        rate = {
            r.batching: r.steps_per_s
            for r in self.rows
            if r.source == "model" and r.sessions == sessions
        }
        if True not in rate or not rate.get(False):
            return None
        return rate[True] / rate[False]

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "facts": self.facts,
            "rows": [asdict(r) for r in self.rows],
            "ratio_at_32": self.ratio(),
            "target_ratio": TARGET_RATIO,
        }


# ---------------------------------------------------------------------------- the run


def bench_serve(
    cfg: ServeBenchConfig, progress: Callable[[str], None] | None = None
) -> ServeBenchResult:
    """Run every row of `cfg` (see the module docstring); `progress` gets a line per row."""
    say = progress or (lambda line: None)
    load_before = os.getloadavg()[0]  # other work on the machine skews every figure
    scripts = load_scripts(cfg.env, cfg.split)
    unservable = over_budget(cfg.model, cfg.env, cfg.split)  # the same workload for every row
    rows: list[Row] = []
    facts: dict[str, Any] = {}
    for batching in (True, False):
        with serving(_settings(cfg, batching=batching, cache=False)) as base:
            facts = facts or _facts(cfg)
            for n in cfg.sessions:
                mine = [_rotated(scripts, i) for i in range(n)]  # each its own start
                row = _measure(base, cfg, mine, unservable, batching=batching, source="model")
                rows.append(row)
                say(format_row(row))
    if cfg.cache_sessions:
        with serving(_settings(cfg, batching=True, cache=True)) as base:
            served = [s for s in scripts if s.task_id not in unservable] or scripts
            mine = [[served[i % len(served)]] for i in range(cfg.cache_sessions)]
            _run_sessions(base, cfg.env, mine, unservable, rounds=1)  # fills the cache
            rows.append(_measure(base, cfg, mine, unservable, batching=True, source="cache"))
            say(format_row(rows[-1]))
    tasks = {s.task_id for s in scripts}
    facts |= {"tasks": len(tasks), "unservable_tasks": sorted(unservable)}
    facts["load_before"] = load_before  # after it, the run's own threads dominate the load
    return ServeBenchResult(cfg, rows, facts)


def _rotated(scripts: list[Script], start: int) -> list[Script]:
    start %= len(scripts)
    return scripts[start:] + scripts[:start]


def _settings(cfg: ServeBenchConfig, *, batching: bool, cache: bool) -> Settings:
    return Settings(
        model=cfg.model,
        envs=(cfg.env,),
        port=0,
        api_keys=(),
        limits=Limits(max_sessions=max(1024, 4 * max(cfg.sessions))),
        max_batch=cfg.max_batch if batching else 1,
        max_wait_ms=cfg.max_wait_ms,
        batching_mode=cfg.batching_mode,
        router=RouterConfig(use_cache=cache),
        torch_threads=cfg.torch_threads,
        dtype=cfg.dtype,
    )


def _facts(cfg: ServeBenchConfig) -> dict[str, Any]:
    """The machine as the server runs on it (read once its lifespan has set torch up)."""
    import torch

    from simworld.worldmodel.engines.hf import resolve_dtype

    return {
        "dtype": str(resolve_dtype(cfg.dtype)).removeprefix("torch."),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "torch": torch.__version__,
        # what the lifespan set for the server's threads (this thread keeps its own count)
        "torch_threads": cfg.torch_threads or serving_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "worker_threads": WORKER_THREADS,
    }


@contextmanager
def serving(settings: Settings) -> Iterator[str]:
    """`create_app(settings)` under uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    from simworld.server.app import create_app

    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="on",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="bench-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the benchmark server did not start (see the log above)")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=60)


# ---------------------------------------------------------------------------- sessions

# (perf_counter at the response, latency s, info.source, info.retries)
Timing = tuple[float, float, str, int]
UNAVAILABLE = "unavailable"  # the source noted for a step the model cannot serve (503)


class _Session(threading.Thread):
    """One client session: replays its scripts in turn, `rounds` times over (None: until
    `stop` is set), noting every step's timing. A step answered 503 "unavailable" (the
    task's inputs do not fit the model's context budget) ends its episode and puts the
    task in `unservable`, which every session then skips."""

    def __init__(
        self,
        base: str,
        env: str,
        scripts: list[Script],
        start: threading.Barrier,
        stop: threading.Event,
        rounds: int | None,
        unservable: set[str],
    ) -> None:
        super().__init__(name="bench-session", daemon=True)
        self.base, self.env, self.scripts = base, env, scripts
        self.start_barrier, self.stop, self.rounds = start, stop, rounds
        self.unservable = unservable
        self.timings: list[Timing] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(base_url=self.base, timeout=600.0) as client:
                self.start_barrier.wait()
                plays = len(self.scripts) * self.rounds if self.rounds is not None else math.inf
                k = 0
                while k < plays and not self.stop.is_set():
                    script = self.scripts[k % len(self.scripts)]
                    k += 1
                    if script.task_id not in self.unservable:
                        self._play(client, script)
                    elif all(s.task_id in self.unservable for s in self.scripts):
                        raise RuntimeError("the model can serve none of this session's tasks")
        # The main thread reports it: a benchmark with a failing session is no benchmark.
        except BaseException as exc:
            self.error = exc
            self.start_barrier.abort()

    def _play(self, client: httpx.Client, script: Script) -> None:
        opened = client.post("/v1/episodes", json={"env": self.env, "task_id": script.task_id})
        _check(opened, 201)
        episode = f"/v1/episodes/{opened.json()['episode_id']}"
        try:
            for body in script.steps:
                if self.stop.is_set():
                    return
                sent = time.perf_counter()
                response = client.post(f"{episode}/step", json=body)
                if _unavailable(response):
                    self.timings.append((time.perf_counter(), 0.0, UNAVAILABLE, 0))
                    self.unservable.add(script.task_id)
                    return
                _check(response, 200)
                out = response.json()
                done = time.perf_counter()
                info = out["info"]
                self.timings.append((done, done - sent, info["source"], info.get("retries", 0)))
                if out["terminated"] or out["truncated"]:
                    return
        finally:
            _check(client.delete(episode), 200)


def _unavailable(response: httpx.Response) -> bool:
    """A step this model cannot take: 503 "unavailable" (the task's tools or rules pass its
    context budget), or 422 for a recorded action that alone passes it."""
    if response.status_code not in (422, 503):
        return False
    body: dict[str, Any] = response.json()
    if response.status_code == 422:
        return str(body.get("detail", "")).startswith(TOO_LONG)
    error: dict[str, Any] = body.get("error") or {}
    return error.get("kind") == "unavailable"


def _check(response: httpx.Response, status: int) -> None:
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path} answered "
            f"{response.status_code}, not {status}: {response.text[:300]}"
        )


def _run_sessions(
    base: str,
    env: str,
    scripts: Sequence[list[Script]],
    unservable: set[str],
    *,
    rounds: int | None = None,
    during: Callable[[], None] | None = None,
) -> list[_Session]:
    """Start one session per script list together; then either run `during` and stop
    them, or (no `during`) wait until each has played its scripts `rounds` times."""
    if (during is None) == (rounds is None):
        raise ValueError("give either rounds or during")
    start, stop = threading.Barrier(len(scripts) + 1), threading.Event()
    sessions = [_Session(base, env, list(s), start, stop, rounds, unservable) for s in scripts]
    for session in sessions:
        session.start()
    try:
        start.wait()
        if during is not None:
            during()
        else:
            for session in sessions:
                session.join()
    except threading.BrokenBarrierError:
        pass  # a session failed before the start; its error is raised below
    finally:
        stop.set()
        for session in sessions:
            session.join()
    failed = [s.error for s in sessions if s.error is not None]
    # The other sessions of one that failed before the start see a broken barrier.
    first = [e for e in failed if not isinstance(e, threading.BrokenBarrierError)] + failed
    if first:
        raise RuntimeError(f"a benchmark session failed: {first[0]!r}") from first[0]
    return sessions


def _measure(
    base: str,
    cfg: ServeBenchConfig,
    scripts: list[list[Script]],
    unservable: set[str],
    *,
    batching: bool,
    source: str,
) -> Row:
    """One row: len(scripts) sessions stepping through warm-up and the window."""
    window: list[float] = []
    batches: list[tuple[float, float]] = []

    def during() -> None:
        with httpx.Client(base_url=base, timeout=60.0) as client:
            time.sleep(cfg.warmup_seconds)
            window.append(time.perf_counter())
            batches.append(batch_totals(client.get("/metrics").text))
            time.sleep(cfg.seconds)
            window.append(time.perf_counter())
            batches.append(batch_totals(client.get("/metrics").text))

    sessions = _run_sessions(base, cfg.env, scripts, unservable, during=during)
    lo, hi = window
    inside = [t for s in sessions for t in s.timings if lo <= t[0] <= hi]
    counted = [t for t in inside if t[2] == source]
    latencies = sorted(t[1] for t in counted)
    calls = batches[1][1] - batches[0][1]
    return Row(
        sessions=len(scripts),
        batching=batching,
        source=source,
        steps=len(latencies),
        seconds=hi - lo,
        steps_per_s=len(latencies) / (hi - lo),
        p50_ms=1000 * percentile(latencies, 0.50),
        p99_ms=1000 * percentile(latencies, 0.99),
        mean_batch=(batches[1][0] - batches[0][0]) / calls if calls else None,
        others=dict(Counter(t[2] for t in inside if t[2] != source)),
        retries=sum(t[3] for t in counted) / len(counted) if counted else 0.0,
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile of sorted `values` (NaN when there are none)."""
    if not values:
        return math.nan
    return values[max(0, math.ceil(q * len(values)) - 1)]


def batch_totals(metrics_text: str) -> tuple[float, float]:
    """(_sum, _count) of `simworld_batch_size` in a /metrics page."""
    found = {}
    for line in metrics_text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("simworld_batch_size_sum", "simworld_batch_size_count"):
            found[name] = float(value)
    return found["simworld_batch_size_sum"], found["simworld_batch_size_count"]


# ---------------------------------------------------------------------------- printing

HEADER = (
    f"{'sessions':>8}  {'batching':<8}  {'answered':<8}  {'steps':>6}  {'steps/s':>8}  "
    f"{'p50 ms':>8}  {'p99 ms':>8}  {'mean batch':>10}  {'retries':>7}  {'other':>5}"
)


def format_row(row: Row) -> str:
    batch = "-" if row.mean_batch is None else f"{row.mean_batch:.1f}"
    return (
        f"{row.sessions:>8}  {'on' if row.batching else 'off':<8}  {row.source:<8}  "
        f"{row.steps:>6}  {row.steps_per_s:>8.2f}  {row.p50_ms:>8.0f}  {row.p99_ms:>8.0f}  "
        f"{batch:>10}  {row.retries:>7.2f}  {row.other:>5}"
    )


def format_result(result: ServeBenchResult) -> str:
    """The printed figures: the setting, the machine, the table and the 5x target."""
    cfg, facts = result.config, result.facts
    skipped = list(facts.get("unservable_tasks", []))
    lines = [
        f"simworld bench serve: model {cfg.model} on {cfg.env} ({cfg.split} split episodes), "
        f"{cfg.seconds:g} s per row after {cfg.warmup_seconds:g} s warm-up; batching: "
        f"{cfg.batching_mode}, max_batch {cfg.max_batch}, max_wait_ms {cfg.max_wait_ms:g}",
        f"machine: {facts.get('cores')} cores ({facts.get('cores_usable')} usable), torch "
        f"{facts.get('torch')} with {facts.get('torch_threads')} intra-op threads, weights in "
        f"{facts.get('dtype')}; "
        f"{facts.get('worker_threads')} request threads; prefix cache "
        f"{Settings.prefix_cache} prompts (on and off); server and clients in one process "
        f"over 127.0.0.1; 1-minute load average before the run "
        f"{facts.get('load_before', 0):.1f}",
        f"workload: {facts.get('tasks')} tasks; skipped, past the model's context budget: "
        f"{len(skipped)} {skipped}",
        HEADER,
        *(format_row(row) for row in result.rows),
    ]
    ratio = result.ratio()
    if ratio is None:
        lines.append(f"batched / unbatched at {TARGET_SESSIONS} sessions: not measured")
    else:
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        lines.append(
            f"batched / unbatched steps/s at {TARGET_SESSIONS} sessions: {ratio:.2f}x "
            f"(target {TARGET_RATIO:g}x: {verdict})"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the command

Handler = Callable[[argparse.Namespace], int]


def configure(command: str, parser: argparse.ArgumentParser) -> Handler:
    """`simworld bench serve`'s arguments (see the module docstring) and its handler."""
    if command != "bench serve":
        raise ValueError(f"unknown server benchmark command {command!r}")
    parser.description = "Steps/s and step latency of the server under concurrent sessions."
    add, defaults = parser.add_argument, ServeBenchConfig()
    add("--model", default=defaults.model, help='"default" or a checkpoint directory')
    add("--env", default=defaults.env, help="the env to serve and replay (bundled episodes)")
    add("--seconds", type=float, default=defaults.seconds, help="measured window per row")
    add("--warmup-seconds", type=float, default=defaults.warmup_seconds)
    add("--sessions", type=int, nargs="+", default=list(defaults.sessions))
    add("--cache-sessions", type=int, default=defaults.cache_sessions, help="0: no cache row")
    add("--max-batch", type=int, default=defaults.max_batch)
    add("--max-wait-ms", type=float, default=defaults.max_wait_ms)
    add("--batching", dest="batching_mode", choices=BATCHING_MODES,
        default=defaults.batching_mode, help="the batched rows' batching mode")  # fmt: skip
    add("--torch-threads", type=int,
        help="torch intra-op threads (default: the server's, cores - 1)")  # fmt: skip
    add("--dtype", choices=DTYPE_CHOICES, default=defaults.dtype,
        help="the model's weights (as simworld serve --dtype)")  # fmt: skip
    add("--json", type=Path, metavar="FILE", help="also write the figures here")
    return _bench


def _bench(args: argparse.Namespace) -> int:
    try:
        cfg = ServeBenchConfig(
            model=args.model,
            env=args.env,
            sessions=tuple(args.sessions),
            seconds=args.seconds,
            warmup_seconds=args.warmup_seconds,
            cache_sessions=args.cache_sessions,
            max_batch=args.max_batch,
            max_wait_ms=args.max_wait_ms,
            batching_mode=args.batching_mode,
            torch_threads=args.torch_threads,
            dtype=args.dtype,
        )
        Settings(model=cfg.model, envs=(cfg.env,), api_keys=(), torch_threads=cfg.torch_threads)
    except ValueError as exc:
        print(f"simworld bench serve: {exc}", file=sys.stderr)
        return 2
    print("simworld bench serve: rows as they finish", file=sys.stderr)
    print(HEADER, file=sys.stderr)
    result = bench_serve(cfg, progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_result(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    return 0


__all__ = [
    "Row",
    "ServeBenchConfig",
    "ServeBenchResult",
    "bench_serve",
    "configure",
    "format_result",
    "serving",
]
