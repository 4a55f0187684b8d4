"""The server's Prometheus metrics, rendered in the text exposition format 0.0.4 without a
client library: a handful of counters, two histograms and a gauge, guarded by one lock.

    metrics = Metrics()
    metrics.step("frozenlake", "model", 0.021)     # one served step, its source, its latency
    metrics.batch(8)                               # one model call over 8 contexts
    metrics.shadow("bfcl", match=False)            # a shadow-mode step that diverged
    metrics.error("validation")                    # a request refused, by kind
    metrics.sessions(3)                            # live sessions now
    body = metrics.render()                        # serve with media type CONTENT_TYPE

Families (every one with `# HELP` and `# TYPE`, series sorted by label values):

    simworld_steps_total{env,source}         counter    steps served, by who answered
    simworld_step_seconds{env}               histogram  step latency (_bucket{le}, _sum, _count)
    simworld_batch_size                      histogram  contexts per world-model call (rows
                                                        per decode step when batching is
                                                        continuous)
    simworld_shadow_steps_total{env}         counter    shadow-mode steps
    simworld_shadow_divergent_total{env}     counter    shadow-mode steps whose answers differ
    simworld_errors_total{kind}              counter    refused or failed requests, by kind
    simworld_sessions_live                   gauge      live sessions

Buckets are cumulative (`le` is inclusive) and end in `+Inf`, whose count equals `_count`.
Label values are escaped as the format asks (backslash, double quote, newline); a labelled
family with no series yet is rendered as its HELP and TYPE lines only. A shadow step
creates its env's divergent series at 0, so a divergence rate has a denominator and a
numerator from the first step on.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Prometheus' default latency buckets (seconds), and powers of two for batch sizes.
STEP_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
BATCH_SIZE_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)

Labels = tuple[tuple[str, str], ...]


class _Histogram:
    """One histogram series: a count per bucket (not yet cumulative), the sum, the count."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        # bisect_left finds the first bound >= value: `le` is inclusive.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: Labels) -> Iterable[str]:
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self.counts, strict=True):
            running += n
            yield _sample(f"{name}_bucket", (*labels, ("le", _number(bound))), running)
        yield _sample(f"{name}_sum", labels, self.sum)
        yield _sample(f"{name}_count", labels, self.count)


class Metrics:
    """The server's counters, histograms and gauge; every method is thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[str, str], int] = {}
        self._step_seconds: dict[str, _Histogram] = {}
        self._batch = _Histogram(BATCH_SIZE_BUCKETS)
        self._shadow_steps: dict[str, int] = {}
        self._shadow_divergent: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._live = 0

    def step(self, env: str, source: str, seconds: float) -> None:
        """One served step of `env`, answered by `source` (rules, cache, real, model,
        validation, ...), that took `seconds`."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"a step's latency must be a finite number >= 0, got {seconds}")
        with self._lock:
            key = (env, source)
            self._steps[key] = self._steps.get(key, 0) + 1
            hist = self._step_seconds.get(env)
            if hist is None:
                hist = self._step_seconds[env] = _Histogram(STEP_SECONDS_BUCKETS)
            hist.observe(seconds)

    def batch(self, size: int) -> None:
        """One world-model call over `size` contexts (fits `BatchingModel(on_batch=...)`)."""
        if size < 1:
            raise ValueError(f"a batch holds at least one context, got size {size}")
        with self._lock:
            self._batch.observe(float(size))

    def shadow(self, env: str, match: bool) -> None:
        """One shadow-mode step of `env`; `match`: the real and served answers agree."""
        with self._lock:
            self._shadow_steps[env] = self._shadow_steps.get(env, 0) + 1
            self._shadow_divergent[env] = self._shadow_divergent.get(env, 0) + (not match)

    def error(self, kind: str) -> None:
        """One refused or failed request of `kind` (validation, not_found, too_large,
        unauthorized, limit, internal, ...)."""
        if not kind:
            raise ValueError("an error kind must be a non-empty string, e.g. 'validation'")
        with self._lock:
            self._errors[kind] = self._errors.get(kind, 0) + 1

    def sessions(self, live: int) -> None:
        """Set the number of live sessions."""
        if live < 0:
            raise ValueError(f"the number of live sessions cannot be negative, got {live}")
        with self._lock:
            self._live = live

    def render(self) -> str:
        """Every family in the text exposition format 0.0.4, newline-terminated."""
        with self._lock:
            out: list[str] = []
            out += _family(
                "simworld_steps_total",
                "counter",
                "Steps served, by env and the source that answered.",
            )
            out += (
                _sample("simworld_steps_total", (("env", e), ("source", s)), n)
                for (e, s), n in sorted(self._steps.items())
            )
            out += _family("simworld_step_seconds", "histogram", "Time to serve one step, by env.")
            for env, hist in sorted(self._step_seconds.items()):
                out += hist.lines("simworld_step_seconds", (("env", env),))
            out += _family(
                "simworld_batch_size",
                "histogram",
                "Contexts per world-model call (continuous batching: rows per decode step).",
            )
            out += self._batch.lines("simworld_batch_size", ())
            out += _counter(
                "simworld_shadow_steps_total",
                "Shadow-mode steps, by env.",
                "env",
                self._shadow_steps,
            )
            out += _counter(
                "simworld_shadow_divergent_total",
                "Shadow-mode steps whose served answer differs from the real one.",
                "env",
                self._shadow_divergent,
            )
            out += _counter(
                "simworld_errors_total",
                "Refused or failed requests, by kind.",
                "kind",
                self._errors,
            )
            out += _family("simworld_sessions_live", "gauge", "Live sessions.")
            out.append(_sample("simworld_sessions_live", (), self._live))
        return "".join(line + "\n" for line in out)


def _family(name: str, kind: str, help_text: str) -> list[str]:
    escaped = help_text.replace("\\", "\\\\").replace("\n", "\\n")
    return [f"# HELP {name} {escaped}", f"# TYPE {name} {kind}"]


def _counter(name: str, help_text: str, label: str, values: dict[str, int]) -> list[str]:
    lines = _family(name, "counter", help_text)
    lines += (_sample(name, ((label, key),), n) for key, n in sorted(values.items()))
    return lines


def _sample(name: str, labels: Labels, value: float) -> str:
    if not labels:
        return f"{name} {_number(value)}"
    inner = ",".join(f'{key}="{_escape_label(val)}"' for key, val in labels)
    return f"{name}{{{inner}}} {_number(value)}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    """A sample value or `le` bound as the format writes it: +Inf, -Inf, NaN, or the
    shortest repr (integers without a fraction)."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


__all__ = ["BATCH_SIZE_BUCKETS", "CONTENT_TYPE", "STEP_SECONDS_BUCKETS", "Metrics"]
