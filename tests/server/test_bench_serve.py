"""The serving benchmark (`simworld bench serve`): a tiny run over real sockets counts
model-answered steps with batching on and off and cache hits from a warmed cache; the
workload replays the bundled episodes as OpenAI tool calls; 64 concurrent steps all reach
the world model (the worker-thread limit); the command parses, refuses bad flags and
keeps `simworld bench decode` reachable.

    python -m pytest -q tests/server/test_bench_serve.py
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest

from simworld.cli import main
from simworld.data.records import (
    TextAction,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.server.app import create_app
from simworld.server.bench import (
    Row,
    ServeBenchConfig,
    ServeBenchResult,
    _unavailable,
    batch_totals,
    bench_serve,
    format_result,
    percentile,
)
from simworld.server.bench_workload import load_scripts, over_budget, step_body
from simworld.server.hub import TOO_LONG, Hub
from simworld.simulators.envs import load_sim_env
from simworld.simulators.router import RouterConfig
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction


@pytest.fixture(scope="module")
def tiny_result(tiny_checkpoint: Path) -> ServeBenchResult:
    cfg = ServeBenchConfig(
        model=str(tiny_checkpoint),
        env="frozenlake",
        sessions=(1, 4),
        seconds=1.5,
        warmup_seconds=0.5,
        cache_sessions=2,
    )
    return bench_serve(cfg)


def test_tiny_run_measures_every_row(tiny_result: ServeBenchResult) -> None:
    rows = tiny_result.rows
    kinds = [(r.sessions, r.batching, r.source) for r in rows]
    assert kinds == [
        (1, True, "model"),
        (4, True, "model"),
        (1, False, "model"),
        (4, False, "model"),
        (2, True, "cache"),
    ]
    for row in rows:
        assert row.steps > 0, row
        assert row.seconds >= 1.5
        assert row.steps_per_s == pytest.approx(row.steps / row.seconds)
        assert 0 < row.p50_ms <= row.p99_ms
        assert row.source not in row.others and all(n > 0 for n in row.others.values())
    batched = [r for r in rows if r.batching and r.source == "model"]
    assert all(r.mean_batch is not None and 1 <= r.mean_batch <= r.sessions for r in batched)
    assert all(r.mean_batch is None for r in rows if not r.batching)
    facts = tiny_result.facts
    assert facts["cores"] >= 1 and facts["torch_threads"] >= 1


def test_tiny_run_prints_and_saves(tiny_result: ServeBenchResult) -> None:
    text = format_result(tiny_result)
    assert "steps/s" in text and "p99 ms" in text and "mean batch" in text
    assert "intra-op threads" in text
    assert "at 32 sessions: not measured" in text
    assert len([line for line in text.splitlines() if "  model  " in line]) == 4
    saved = json.loads(json.dumps(tiny_result.to_json()))
    assert saved["config"]["sessions"] == [1, 4]
    assert [r["source"] for r in saved["rows"]] == ["model"] * 4 + ["cache"]
    assert saved["ratio_at_32"] is None and saved["target_ratio"] == 5.0


def _row(sessions: int, batching: bool, steps_per_s: float) -> Row:
    return Row(sessions, batching, "model", 10, 1.0, steps_per_s, 1.0, 2.0, None, {}, 0.0)


def test_ratio_at_32_sessions_against_the_target() -> None:
    cfg = ServeBenchConfig()
    rows = [_row(1, True, 9.0), _row(32, True, 30.0), _row(1, False, 9.0), _row(32, False, 10.0)]
    result = ServeBenchResult(cfg, rows, {})
    assert result.ratio() == pytest.approx(3.0)
    assert "3.00x (target 5x: NOT met)" in format_result(result)
    rows[1] = _row(32, True, 60.0)
    assert "6.00x (target 5x: met)" in format_result(ServeBenchResult(cfg, rows, {}))


def test_bfcl_workload_replays_the_test_split_as_openai_tool_calls() -> None:
    scripts = load_scripts("bfcl")
    tasks = load_sim_env("bfcl").tasks
    assert len(scripts) == 80  # every bfcl episode of the bundled test split
    assert all(s.task_id in tasks and s.steps for s in scripts)
    first = scripts[0].steps[0]
    call = first["tool_calls"][0]
    assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"folder": "document"}


def test_step_body_keeps_the_raw_arguments() -> None:
    action = ToolCallsAction([ToolCall("c1", "cd", None, '{"folder": ')])
    body = step_body(action)
    assert body == {
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "cd", "arguments": '{"folder": '}}
        ]
    }
    assert step_body(TextAction("LEFT")) == {"text": "LEFT"}


def test_steps_the_model_cannot_take_skip_their_task() -> None:
    """503 "unavailable" (the task's inputs pass the budget) and the 422 of a recorded action
    that alone passes it mark the task unservable; other refusals are the bench's error."""

    def answer(status: int, body: dict[str, object]) -> httpx.Response:
        return httpx.Response(status, json=body)

    assert _unavailable(answer(503, {"error": {"kind": "unavailable", "message": "tools"}}))
    assert _unavailable(answer(422, {"detail": f"{TOO_LONG}: the action block needs 1274"}))
    assert not _unavailable(answer(422, {"detail": "arguments.path: 'x' is not a string"}))
    assert not _unavailable(answer(503, {"error": {"kind": "overloaded"}}))
    assert not _unavailable(answer(200, {"detail": TOO_LONG}))


def test_tasks_past_the_budget_are_found_before_the_run() -> None:
    """bfcl-29 has an `echo` whose action alone (3,400 characters) passes the default
    model's budget (the server answers 422): it is skipped from the first row on. The
    tasks whose tool schemas fit only without their descriptions (bfcl-55, bfcl-59,
    bfcl-172) are served."""
    skipped = over_budget("default", "bfcl")
    assert skipped == {"bfcl-29"}
    assert len(skipped) < len({s.task_id for s in load_scripts("bfcl")})


def test_percentile_and_metrics_parsing() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0], 0.99) == 7.0
    page = "# TYPE simworld_batch_size histogram\nsimworld_batch_size_sum 12\n"
    page += 'simworld_batch_size_count 5\nsimworld_batch_size_bucket{le="1"} 2\n'
    assert batch_totals(page) == (12.0, 5.0)


class Gathering:
    """A mock-env world model whose calls wait until `n` of them run at once (a barrier):
    it answers only if `n` concurrent requests reach it together."""

    def __init__(self, n: int) -> None:
        self.budget = Budget(total=2048)
        self.barrier = threading.Barrier(n, timeout=30)
        self.peak = 0
        self._active = 0
        self._lock = threading.Lock()

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        with self._lock:
            self._active += 1
            self.peak = max(self.peak, self._active)
        try:
            self.barrier.wait()
        finally:
            with self._lock:
                self._active -= 1
        out = []
        for ctx in batch:
            assert isinstance(ctx.action_record, ToolCallsAction)
            call = ctx.action_record.calls[0]
            result = ToolResult(call.id, '{"total": 1}', {"total": 1})
            out.append(Prediction(ToolResultsObservation([result]), [], result.text))
        return out


def test_64_concurrent_steps_reach_the_model_together(
    serve: Callable[..., str], make_hub: Callable[..., Hub]
) -> None:
    """anyio's default of 40 worker threads would hold 24 of these back (and the barrier
    would break); the app raises the limit to settings.worker_threads."""
    n = 64
    model = Gathering(n)
    hub = make_hub(("mock",), model=model, router=RouterConfig(use_cache=False))
    base = serve(create_app(hub=hub))
    body = step_body(ToolCallsAction([ToolCall("a", "add", {"n": 1}, '{"n": 1}')]))
    with httpx.Client(base_url=base) as client:
        opened = [client.post("/v1/episodes", json={"env": "mock"}) for _ in range(n)]
    ids = [response.json()["episode_id"] for response in opened]
    sources: list[str] = []

    def step(episode_id: str) -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            response = client.post(f"/v1/episodes/{episode_id}/step", json=body)
            sources.append(response.json()["info"]["source"])

    threads = [threading.Thread(target=step, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sources == ["model"] * n
    assert model.peak == n


def test_bench_command_parses_and_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "serve", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--seconds" in out and "--sessions" in out and "--json" in out
    assert "--batching" in out and "continuous" in out
    assert main(["bench", "serve", "--seconds", "0"]) == 2
    assert "seconds must be > 0" in capsys.readouterr().err
    assert main(["bench", "serve", "--model", "/no/such/dir"]) == 2
    with pytest.raises(SystemExit):
        main(["bench", "decode", "--help"])
    assert "--batch-sizes" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "nothing"])
    assert exit_.value.code == 2
