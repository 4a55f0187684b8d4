"""The Prometheus exposition: a small parser in this file reads the rendered text back and
checks HELP/TYPE lines, counter values, cumulative histogram buckets ending in +Inf with
their sum and count, label escaping, bad inputs, and that concurrent updates all count."""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass, field

import pytest

from simworld.server.metrics import (
    BATCH_SIZE_BUCKETS,
    CONTENT_TYPE,
    STEP_SECONDS_BUCKETS,
    Metrics,
)

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')
UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Exposition:
    """What a text exposition holds: HELP and TYPE per family, samples in order."""

    help: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def value(self, name: str, **labels: str) -> float:
        found = [v for n, ls, v in self.samples if n == name and ls == labels]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(ls, v) for n, ls, v in self.samples if n == name]


def parse(text: str) -> Exposition:
    """Parse the text format 0.0.4 strictly enough to catch malformed output."""
    assert text.endswith("\n")
    out = Exposition()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, doc = line[len("# HELP ") :].partition(" ")
            out.help[name] = doc
        elif line.startswith("# TYPE "):
            name, kind = line[len("# TYPE ") :].split(" ")
            assert name in out.help, f"TYPE before HELP for {name}"
            out.types[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, raw_labels, raw_value = match.groups()
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in out.types or family in out.types, f"{name} before its TYPE"
            out.samples.append((name, _labels(raw_labels or ""), _value(raw_value)))
    return out


def _labels(raw: str) -> dict[str, str]:
    labels, pos = {}, 0
    while pos < len(raw):
        match = LABEL.match(raw, pos)
        assert match, f"bad labels at {raw[pos:]!r}"
        key, escaped, _ = match.groups()
        labels[key] = re.sub(r"\\.", lambda m: UNESCAPE[m.group(0)], escaped)
        pos = match.end()
    return labels


def _value(raw: str) -> float:
    return {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}.get(raw) or float(raw)


def check_histogram(exp: Exposition, name: str, bounds: tuple[float, ...], **labels: str) -> None:
    """Buckets in order, cumulative, `le` as given and ending in +Inf == _count."""
    buckets = [(ls, v) for ls, v in exp.series(f"{name}_bucket") if ls.items() > labels.items()]
    assert [_value(ls["le"]) for ls, _ in buckets] == [*bounds, math.inf]
    counts = [v for _, v in buckets]
    assert counts == sorted(counts)
    assert counts[-1] == exp.value(f"{name}_count", **labels)


def test_steps_and_latency_histogram() -> None:
    m = Metrics()
    for seconds in (0.003, 0.005, 0.2, 20.0):
        m.step("frozenlake", "model", seconds)
    m.step("frozenlake", "rules", 0.001)
    m.step("bfcl", "cache", 0.0)
    exp = parse(m.render())
    assert exp.types["simworld_steps_total"] == "counter"
    assert exp.types["simworld_step_seconds"] == "histogram"
    assert exp.value("simworld_steps_total", env="frozenlake", source="model") == 4
    assert exp.value("simworld_steps_total", env="frozenlake", source="rules") == 1
    assert exp.value("simworld_steps_total", env="bfcl", source="cache") == 1
    check_histogram(exp, "simworld_step_seconds", STEP_SECONDS_BUCKETS, env="frozenlake")
    check_histogram(exp, "simworld_step_seconds", STEP_SECONDS_BUCKETS, env="bfcl")
    bucket = "simworld_step_seconds_bucket"
    # `le` is inclusive: 0.001, 0.003 and 0.005 are all in le=0.005
    assert exp.value(bucket, env="frozenlake", le="0.005") == 3
    assert exp.value(bucket, env="frozenlake", le="0.1") == 3
    assert exp.value(bucket, env="frozenlake", le="0.25") == 4
    assert exp.value(bucket, env="frozenlake", le="10.0") == 4
    assert exp.value(bucket, env="frozenlake", le="+Inf") == 5
    assert exp.value("simworld_step_seconds_count", env="frozenlake") == 5
    assert exp.value("simworld_step_seconds_sum", env="frozenlake") == pytest.approx(20.209)
    assert exp.value(bucket, env="bfcl", le="0.005") == 1


def test_batch_shadow_errors_and_sessions() -> None:
    m = Metrics()
    for size in (1, 3, 8, 8, 300):
        m.batch(size)
    m.shadow("bfcl", match=True)
    m.shadow("bfcl", match=False)
    m.shadow("frozenlake", match=True)
    m.error("validation")
    m.error("validation")
    m.error("not_found")
    m.sessions(4)
    m.sessions(2)
    exp = parse(m.render())
    check_histogram(exp, "simworld_batch_size", BATCH_SIZE_BUCKETS)
    assert exp.value("simworld_batch_size_bucket", le="1.0") == 1
    assert exp.value("simworld_batch_size_bucket", le="4.0") == 2
    assert exp.value("simworld_batch_size_bucket", le="8.0") == 4
    assert exp.value("simworld_batch_size_bucket", le="256.0") == 4
    assert exp.value("simworld_batch_size_bucket", le="+Inf") == 5
    assert exp.value("simworld_batch_size_sum") == 320
    assert exp.value("simworld_shadow_steps_total", env="bfcl") == 2
    assert exp.value("simworld_shadow_divergent_total", env="bfcl") == 1
    assert exp.value("simworld_shadow_steps_total", env="frozenlake") == 1
    assert exp.value("simworld_shadow_divergent_total", env="frozenlake") == 0
    assert exp.value("simworld_errors_total", kind="validation") == 2
    assert exp.value("simworld_errors_total", kind="not_found") == 1
    assert exp.types["simworld_sessions_live"] == "gauge"
    assert exp.value("simworld_sessions_live") == 2


def test_a_fresh_registry_renders_every_family() -> None:
    exp = parse(Metrics().render())
    families = {
        "simworld_steps_total": "counter",
        "simworld_step_seconds": "histogram",
        "simworld_batch_size": "histogram",
        "simworld_shadow_steps_total": "counter",
        "simworld_shadow_divergent_total": "counter",
        "simworld_errors_total": "counter",
        "simworld_sessions_live": "gauge",
    }
    assert exp.types == families and all(exp.help[name] for name in families)
    assert exp.series("simworld_steps_total") == []
    assert exp.value("simworld_batch_size_count") == 0
    assert exp.value("simworld_sessions_live") == 0
    assert CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_label_values_are_escaped() -> None:
    m = Metrics()
    nasty = 'a"b\\c\nd'
    m.step(nasty, "model", 0.01)
    m.error(nasty)
    text = m.render()
    assert 'env="a\\"b\\\\c\\nd"' in text  # the escaped form on the wire
    assert len(text.splitlines()) == text.count("\n")  # the newline did not split a line
    exp = parse(text)
    assert exp.value("simworld_steps_total", env=nasty, source="model") == 1
    assert exp.value("simworld_errors_total", kind=nasty) == 1
    check_histogram(exp, "simworld_step_seconds", STEP_SECONDS_BUCKETS, env=nasty)


def test_concurrent_updates_are_all_counted() -> None:
    m = Metrics()
    n_threads, n = 8, 500
    barrier = threading.Barrier(n_threads)

    def work(t: int) -> None:
        barrier.wait()
        for _ in range(n):
            m.step("lake", "model", 0.25)
            m.batch(2)
            m.shadow("lake", match=t % 2 == 0)
            m.error("limit")
            m.render()  # readers meet writers

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    exp = parse(m.render())
    total = n_threads * n
    assert exp.value("simworld_steps_total", env="lake", source="model") == total
    assert exp.value("simworld_step_seconds_count", env="lake") == total
    assert exp.value("simworld_step_seconds_sum", env="lake") == total * 0.25
    assert exp.value("simworld_batch_size_sum") == 2 * total
    assert exp.value("simworld_shadow_steps_total", env="lake") == total
    assert exp.value("simworld_shadow_divergent_total", env="lake") == total / 2
    assert exp.value("simworld_errors_total", kind="limit") == total


def test_bad_inputs_are_refused() -> None:
    m = Metrics()
    with pytest.raises(ValueError, match="latency"):
        m.step("lake", "model", -0.1)
    with pytest.raises(ValueError, match="latency"):
        m.step("lake", "model", math.nan)
    with pytest.raises(ValueError, match="at least one context"):
        m.batch(0)
    with pytest.raises(ValueError, match="negative"):
        m.sessions(-1)
    with pytest.raises(ValueError, match="error kind"):
        m.error("")
    assert parse(m.render()).series("simworld_steps_total") == []
