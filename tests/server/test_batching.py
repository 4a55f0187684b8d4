"""Request batching on the tiny trained checkpoint: concurrent callers get exactly what they
would get alone, their calls really merge (within max_batch, configs equal but for seeds),
the inner model runs one call at a time, batching off passes through, an inner failure
reaches every caller of its batch and nothing else, and close stops the worker. Sampled
requests merge too, each row keeping its own seed, on engines whose rows are independent."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from threads import in_threads

from simworld.data.bundle import load_bundled
from simworld.server.app import build_hub
from simworld.server.batching import BatchingModel
from simworld.server.settings import Settings, serving_threads
from simworld.worldmodel import load_world_model
from simworld.worldmodel.context import Context
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.world_model import Prediction, TextWorldModel

SAMPLED = GenerationConfig(max_new_tokens=49, do_sample=True, temperature=1.5, seed=11)


@pytest.fixture(scope="module")
def wm(tiny_checkpoint: Path) -> TextWorldModel:
    return load_world_model(tiny_checkpoint, device="cpu")


@pytest.fixture(scope="module")
def contexts(wm: TextWorldModel) -> list[Context]:
    """16 FrozenLake contexts: the first steps of bundled val episodes (4x4 and 8x8 boards)."""
    episodes = load_bundled("val", env="frozenlake")
    out = [wm.context(ep, i) for ep in episodes for i in range(min(2, len(ep.steps)))]
    return out[:16]


@pytest.fixture(scope="module")
def alone(wm: TextWorldModel, contexts: list[Context]) -> list[Prediction]:
    """Each context's greedy prediction, asked one at a time."""
    return [wm.predict([ctx])[0] for ctx in contexts]


class Watched:
    """A world model in front of another: counts overlapping predict calls and the calls'
    sizes, sleeps a little in each (so overlaps would show) and fails when told to."""

    def __init__(self, inner: TextWorldModel) -> None:
        self.inner = inner
        self.budget = inner.budget
        self.generation = inner.generation
        self.independent_rows = inner.independent_rows
        self.sizes: list[int] = []
        self.fail_next = False
        self._lock = threading.Lock()
        self._active = 0
        self.max_active = 0

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        with self._lock:
            self._active += 1
            self.max_active = max(self.max_active, self._active)
            self.sizes.append(len(batch))
            fail, self.fail_next = self.fail_next, False
        try:
            time.sleep(0.01)
            if fail:
                raise RuntimeError("the inner model broke")
            return self.inner.predict(batch, cfg)
        finally:
            with self._lock:
                self._active -= 1


def concurrently(n: int, call: Callable[[int], Any]) -> list[Any]:
    """Run call(0..n-1) in n threads released together; each result, or the exception."""
    return in_threads(n, call)


def test_concurrent_callers_get_their_one_at_a_time_predictions(
    wm: TextWorldModel, contexts: list[Context], alone: list[Prediction]
) -> None:
    sizes: list[int] = []
    model = BatchingModel(wm, max_batch=8, max_wait_ms=100, on_batch=sizes.append)
    try:
        got = concurrently(len(contexts), lambda i: model.predict([contexts[i]]))
        assert [p for (p,) in got] == alone
        assert sum(sizes) == len(contexts) and max(sizes) > 1
        # a caller's several contexts come back in its order, beside other callers'
        got = concurrently(4, lambda i: model.predict(contexts[3 * i : 3 * i + 3]))
        assert [p for ps in got for p in ps] == alone[:12]
    finally:
        model.close()


def test_concurrent_calls_merge_and_the_inner_model_runs_one_call_at_a_time(
    wm: TextWorldModel, contexts: list[Context]
) -> None:
    inner = Watched(wm)
    sizes: list[int] = []
    model = BatchingModel(inner, max_batch=8, max_wait_ms=2000, on_batch=sizes.append)
    try:
        concurrently(8, lambda i: model.predict([contexts[i]]))
        assert max(sizes) > 1 and sum(sizes) == 8
        assert sizes == inner.sizes and inner.max_active == 1
    finally:
        model.close()


def test_max_batch_bounds_every_call(wm: TextWorldModel, contexts: list[Context]) -> None:
    sizes: list[int] = []
    model = BatchingModel(wm, max_batch=3, max_wait_ms=500, on_batch=sizes.append)
    try:
        concurrently(10, lambda i: model.predict([contexts[i]]))
        assert sum(sizes) == 10 and max(sizes) == 3
        # a request larger than max_batch is one call of its own
        sizes.clear()
        assert len(model.predict(contexts[:5])) == 5 and sizes == [5]
    finally:
        model.close()


@pytest.mark.parametrize(("max_batch", "max_wait_ms"), [(1, 50.0), (8, 0.0)])
def test_batching_off_passes_calls_through_one_at_a_time(
    wm: TextWorldModel,
    contexts: list[Context],
    alone: list[Prediction],
    max_batch: int,
    max_wait_ms: float,
) -> None:
    inner = Watched(wm)
    model = BatchingModel(inner, max_batch=max_batch, max_wait_ms=max_wait_ms)
    assert not model.batching
    got = concurrently(8, lambda i: model.predict([contexts[i]]))
    assert [p for (p,) in got] == alone[:8]
    assert inner.sizes == [1] * 8 and inner.max_active == 1
    model.close()
    with pytest.raises(RuntimeError, match="after close"):
        model.predict(contexts[:1])


def test_requests_share_a_call_only_with_their_like(
    wm: TextWorldModel, contexts: list[Context]
) -> None:
    short = GenerationConfig(max_new_tokens=6)
    other_seed = replace(SAMPLED, seed=12)
    cfgs: list[GenerationConfig | None] = [None, short, SAMPLED, wm.generation, other_seed] * 3
    # the premise: a sampled row merged behind another under the request's own seed would
    # be drawn differently; merged calls give each row its own seed (row_seeds) instead
    merged = wm.predict(contexts[:2], SAMPLED)[1]
    assert merged != wm.predict(contexts[1:2], SAMPLED)[0]
    expected = [wm.predict([contexts[i]], cfg)[0] for i, cfg in enumerate(cfgs)]
    inner = Watched(wm)
    model = BatchingModel(inner, max_batch=16, max_wait_ms=300)
    assert model.independent_rows  # the tiny Llama runs on the own decode path
    try:
        got = concurrently(len(cfgs), lambda i: model.predict([contexts[i]], cfgs[i]))
        # every caller draws exactly what it drew alone, merged or not
        assert [p for (p,) in got] == expected
        # None and the model's own config merge; the sampled ones (both seeds) merge;
        # `short` stays apart: three kinds of call, far fewer calls than requests
        assert sum(inner.sizes) == 15 and len(inner.sizes) < 15 and max(inner.sizes) > 3
    finally:
        model.close()


def test_sampled_requests_run_alone_when_rows_are_not_independent(
    tiny_checkpoint: Path, contexts: list[Context]
) -> None:
    hf = load_world_model(tiny_checkpoint, device="cpu", decode="generate")
    assert not hf.independent_rows  # HF generate seeds a whole batch at once
    inner = Watched(hf)
    model = BatchingModel(inner, max_batch=16, max_wait_ms=300)
    try:
        got = concurrently(6, lambda i: model.predict([contexts[i]], replace(SAMPLED, seed=i)))
        assert all(len(p) == 1 for p in got) and inner.sizes == [1] * 6
        # greedy requests still merge on that engine
        concurrently(6, lambda i: model.predict([contexts[i]]))
        assert max(inner.sizes[6:]) > 1
    finally:
        model.close()


def test_an_inner_failure_reaches_every_caller_of_that_batch_only(
    wm: TextWorldModel, contexts: list[Context], alone: list[Prediction]
) -> None:
    inner = Watched(wm)
    inner.fail_next = True
    model = BatchingModel(inner, max_batch=4, max_wait_ms=2000)
    try:
        got = concurrently(8, lambda i: model.predict([contexts[i]]))
        failed = [r for r in got if isinstance(r, Exception)]
        assert len(failed) == inner.sizes[0] > 1
        assert all(isinstance(r, RuntimeError) and "broke" in str(r) for r in failed)
        for i, r in enumerate(got):
            assert isinstance(r, Exception) or r == [alone[i]]
        assert model.predict(contexts[:4]) == alone[:4]  # the worker survived
    finally:
        model.close()


def test_close_answers_queued_requests_then_refuses(
    wm: TextWorldModel, contexts: list[Context], alone: list[Prediction]
) -> None:
    model = BatchingModel(wm, max_batch=8, max_wait_ms=60_000)
    worker_name = f"BatchingModel-{id(model):x}"
    assert any(t.name == worker_name for t in threading.enumerate())
    result: list[list[Prediction]] = []
    caller = threading.Thread(target=lambda: result.append(model.predict(contexts[:1])))
    caller.start()
    deadline = time.monotonic() + 10
    while model.queued == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert model.queued == 1
    started = time.monotonic()
    model.close()
    caller.join(timeout=10)
    assert result == [alone[:1]] and time.monotonic() - started < 10  # not the 60 s wait
    assert not any(t.name == worker_name for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="after close"):
        model.predict(contexts[:1])
    model.close()  # idempotent


def test_model_attributes_and_argument_errors(wm: TextWorldModel) -> None:
    model = BatchingModel(wm)
    try:
        assert model.budget is wm.budget and model.generation == wm.generation
        assert model.predict([]) == []
    finally:
        model.close()

    class NoGeneration:
        budget = wm.budget

        def predict(
            self, batch: Sequence[Context], cfg: GenerationConfig | None = None
        ) -> list[Prediction]:
            return []

    bare = BatchingModel(NoGeneration(), max_batch=1)
    assert bare.generation is None
    with pytest.raises(RuntimeError, match="returned 0 predictions for 1 contexts"):
        bare.predict([object()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="max_batch"):
        BatchingModel(wm, max_batch=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatchingModel(wm, max_wait_ms=-1)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatchingModel(wm, max_wait_ms=float("inf"))


def test_continuous_batching_shares_decode_steps_and_changes_no_prediction(
    wm: TextWorldModel, contexts: list[Context], alone: list[Prediction]
) -> None:
    """Greedy and sampled callers at once: each row joins the engine's running batch and
    gets what it gets alone; `on_batch` counts the rows of each decode step."""
    seeded = [replace(SAMPLED, seed=40 + i) for i in range(len(contexts))]
    sampled_alone = [wm.predict([c], cfg)[0] for c, cfg in zip(contexts, seeded, strict=True)]
    steps: list[int] = []
    model = BatchingModel(wm, max_batch=8, max_wait_ms=5, on_batch=steps.append, continuous=True)
    try:
        assert model.continuous and getattr(wm.engine, "concurrent", False)
        got = concurrently(
            2 * len(contexts),
            lambda i: model.predict([contexts[i // 2]], None if i % 2 == 0 else seeded[i // 2]),
        )
        assert [p for (p,) in got[0::2]] == alone
        assert [p for (p,) in got[1::2]] == sampled_alone
        assert 1 < max(steps) <= 8
    finally:
        model.close()
    assert not getattr(wm.engine, "concurrent", True)  # close switched the engine back


def test_continuous_falls_back_to_gathering_where_the_model_cannot(
    wm: TextWorldModel, contexts: list[Context]
) -> None:
    inner = Watched(wm)  # no continuous_batching: the gathering worker batches its calls
    sizes: list[int] = []
    model = BatchingModel(
        inner, max_batch=8, max_wait_ms=2000, on_batch=sizes.append, continuous=True
    )
    try:
        assert not model.continuous
        concurrently(8, lambda i: model.predict([contexts[i]]))
        assert max(sizes) > 1 and sizes == inner.sizes and inner.max_active == 1
    finally:
        model.close()


def test_the_server_takes_one_core_less_and_gives_torch_its_threads_back(
    tiny_checkpoint: Path,
) -> None:
    before = torch.get_num_threads()
    settings = Settings(model=str(tiny_checkpoint), envs=("frozenlake",), api_keys=())
    with ExitStack() as stack:
        hub = build_hub(settings, stack)
        assert (
            torch.get_num_threads() == serving_threads() == max(1, len(os.sched_getaffinity(0)) - 1)
        )
        assert isinstance(hub.model, BatchingModel) and hub.model.continuous
    assert torch.get_num_threads() == before
    with ExitStack() as stack:
        build_hub(replace(settings, torch_threads=1, batching_mode="gather"), stack)
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_server_loads_its_model_in_the_dtype_asked_for(tiny_checkpoint: Path) -> None:
    settings = Settings(model=str(tiny_checkpoint), envs=("frozenlake",), api_keys=())
    for dtype, want in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        with ExitStack() as stack:
            hub = build_hub(replace(settings, dtype=dtype), stack)
            assert isinstance(hub.model, BatchingModel)
            inner = hub.model.model
            assert isinstance(inner, TextWorldModel)
            assert {p.dtype for p in inner.engine.model.parameters()} == {want}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, bfloat16"):
        Settings(model=str(tiny_checkpoint), envs=("frozenlake",), api_keys=(), dtype="half")
