"""Continuous batching on the own decode path: rows that join and leave the running batch
from many threads get exactly the tokens they get alone (greedy and sampled, each with its
own token bound, end token and stop strings, with and without the copy head), across
relayouts of the cache; each row reuses its own cached prefix; failures reach the callers
and the loop survives them; close finishes what is queued."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest
from engine_helpers import copy_model, prompts, tiny_model, tiny_tokenizer
from threads import in_threads

from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine

GREEDY = GenerationConfig(max_new_tokens=12)


def sampled(seed: int, **kw: Any) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=kw.pop("max_new_tokens", 10),
        do_sample=True,
        temperature=kw.pop("temperature", 0.9),
        top_p=kw.pop("top_p", 0.9),
        seed=seed,
        **kw,
    )


def staggered(n: int, call: Callable[[int], Any], gap: float = 0.004) -> list[Any]:
    """call(0..n-1) in n threads started `gap` seconds apart (so rows join mid-batch)."""
    return in_threads(n, call, gap=gap)


def configs() -> list[GenerationConfig]:
    """Per caller: greedy and sampled, different bounds, temperatures and top-p."""
    return [
        GREEDY,
        sampled(3),
        GenerationConfig(max_new_tokens=5),
        sampled(8, temperature=1.3, top_p=1.0, max_new_tokens=16),
        GenerationConfig(max_new_tokens=20),
        sampled(5, max_new_tokens=3),
    ]


@pytest.mark.parametrize(
    ("model", "overlap"),
    [("llama", True), ("copy", True), ("copy-next", True), ("llama", False)],
)
def test_rows_joining_mid_batch_get_what_they_get_alone(model: str, overlap: bool) -> None:
    lm = tiny_model() if model == "llama" else copy_model(copy_next=model == "copy-next")
    ps = prompts(6, context=40) + prompts(6, context=30, shared=18, seed=3)
    cfgs = [configs()[i % 6] for i in range(len(ps))]
    solo = TransformersEngine(lm, tiny_tokenizer(), batch_size=1)
    want = [solo.generate([p], cfg)[0] for p, cfg in zip(ps, cfgs, strict=True)]
    engine = TransformersEngine(lm, tiny_tokenizer())
    steps: list[int] = []
    assert engine.start_continuous(max_rows=4, on_step=steps.append, overlap_prefill=overlap)
    assert engine.concurrent
    try:
        got = staggered(len(ps), lambda i: engine.generate([ps[i]], cfgs[i])[0])
        assert got == want
        decoder = engine.continuous
        assert decoder is not None and decoder.admitted == len(ps)
        assert decoder.steps == len(steps) and 1 <= min(steps) <= max(steps) <= 4
        # one caller's several rows come back in its order, each with its own seed; six
        # rows at once: never more than four (max_rows) in a step, the others join as rows
        # end; the loop that prefills itself admits four before its first step, while with
        # a prefill thread the first step runs with the rows prefilled by then
        steps.clear()
        assert engine.generate(ps[:6], sampled(3)) == [
            solo.generate([p], sampled(3 + j))[0] for j, p in enumerate(ps[:6])
        ]
        assert max(steps) == 4 and len(steps) < 6 * 10
        assert steps[0] == 4 if not overlap else steps[0] >= 1
    finally:
        engine.stop_continuous()
    assert not engine.concurrent and engine.generate(ps[:2], GREEDY) == [
        solo.generate([p], GREEDY)[0] for p in ps[:2]
    ]


def test_relayouts_keep_every_row_its_own_tokens() -> None:
    """Short prompts first, then longer ones (they need more slots before `w` than the live
    rows have used) and long outputs (past the capacity): the cache is moved, rows are not
    disturbed."""
    tok = tiny_tokenizer()
    short, long = prompts(3, context=12, seed=4), prompts(3, context=60, seed=6)
    cfg = GenerationConfig(max_new_tokens=40)
    solo = TransformersEngine(tiny_model(), tok, batch_size=1, ignore_eos=True)
    want = [solo.generate([p], cfg)[0] for p in short + long]
    engine = TransformersEngine(tiny_model(), tok, ignore_eos=True)
    lean = engine.lean
    assert lean is not None
    real = lean.new_cache

    def poisoned(batch: int, capacity: int) -> Any:
        """Fresh tensors full of NaN, as uninitialized memory may be: masked slots must
        never reach a row (0 × NaN is NaN)."""
        cache = real(batch, capacity)
        for t in cache.tensors():
            if t.is_floating_point():
                t.fill_(float("nan"))
        return cache

    lean.new_cache = poisoned  # type: ignore[method-assign]
    engine.start_continuous(max_rows=6)
    try:
        got = staggered(6, lambda i: engine.generate([(short + long)[i]], cfg)[0], gap=0.05)
        assert got == want
        assert engine.continuous is not None and engine.continuous.relayouts >= 2
    finally:
        engine.stop_continuous()
        lean.new_cache = real  # type: ignore[method-assign]


def test_a_prompt_is_prefilled_beside_the_rows_already_decoding() -> None:
    """With the prefill thread a slow prefill does not hold up the batch: a row already
    live decodes to its end while the next prompt's prefill is stuck, and once that
    prefill goes on its row gets the tokens it gets alone."""
    tok = tiny_tokenizer()
    first, second = prompts(2, context=40, seed=21)
    second_ids = tok(second)["input_ids"]
    engine = TransformersEngine(tiny_model(), tok)
    lean = engine.lean
    assert lean is not None
    real = lean.prefill
    stuck, release, decoding = threading.Event(), threading.Event(), threading.Event()
    where: list[str] = []

    def prefill(parts: Any) -> Any:
        if [p.ids for p in parts] == [second_ids[:-1]]:  # second's prefill
            where.append(threading.current_thread().name)
            stuck.set()
            assert release.wait(30)
        return real(parts)

    lean.prefill = prefill  # type: ignore[method-assign]
    cfg = GenerationConfig(max_new_tokens=30)
    engine.start_continuous(max_rows=4, on_step=lambda n: decoding.set())
    decoder = engine.continuous
    assert decoder is not None
    try:
        one = decoder.submit([tok(first)["input_ids"]], cfg, [0])
        assert decoding.wait(30)
        two = decoder.submit([second_ids], cfg, [0])
        assert stuck.wait(30)
        one.result(timeout=30)  # ends while the second prompt's prefill is stuck
        assert not two.done()
        release.set()
        got = two.result(timeout=30)
    finally:
        release.set()
        lean.prefill = real  # type: ignore[method-assign]
        engine.stop_continuous()
    alone = TransformersEngine(tiny_model(), tok, batch_size=1)
    assert got == alone.generate_tokens([second_ids], cfg)
    assert len(where) == 1 and "prefill" in where[0]


def test_end_tokens_and_stop_strings_end_each_row_on_its_own() -> None:
    tok = tiny_tokenizer()
    ps = prompts(4, context=30, seed=9)
    free = TransformersEngine(tiny_model(), tok).generate_tokens(tok(ps)["input_ids"], GREEDY)
    model = copy.deepcopy(tiny_model())
    model.generation_config.eos_token_id = free[0][4]  # row 0 ends after 4 tokens
    solo = TransformersEngine(model, tok, batch_size=1)
    text = solo.generate(ps[1:2], GREEDY)[0]
    stop = GenerationConfig(max_new_tokens=12, stop=(text[2:4],))
    cfgs = [GREEDY, stop, GREEDY, stop]
    want = [solo.generate([p], c)[0] for p, c in zip(ps, cfgs, strict=True)]
    engine = TransformersEngine(model, tok)
    engine.start_continuous(max_rows=4)
    try:
        got = staggered(4, lambda i: engine.generate([ps[i]], cfgs[i])[0])
    finally:
        engine.stop_continuous()
    assert got == want
    assert got[0] == tok.decode(free[0][: free[0].index(free[0][4])])  # the end token cut it
    assert text[2:4] not in got[1] and len(got[1]) < len(text)


def test_each_row_reuses_its_own_cached_prefix() -> None:
    """A session's next prompt shares its start with the previous one: admitted alone, the
    row prefills only what changed, and its tokens are what a fresh engine gives."""
    first, second = prompts(2, context=80, shared=70, seed=12)
    engine = TransformersEngine(tiny_model(), tiny_tokenizer(), prefix_cache_size=8)
    engine.start_continuous(max_rows=4)
    try:
        engine.generate([first], GREEDY)
        hits, reused = engine.prefix_cache.hits, engine.prefix_cache.reused_tokens
        got = engine.generate([second], GREEDY)
        assert engine.prefix_cache.hits == hits + 1
        assert engine.prefix_cache.reused_tokens - reused == 64  # whole blocks of 32
        retried = engine.generate([second], sampled(1))  # a retry: the whole prompt cached
        cached = len(tiny_tokenizer()(second)["input_ids"]) - 1  # all but the last token
        assert engine.prefix_cache.reused_tokens - reused == 64 + cached - cached % 32
    finally:
        engine.stop_continuous()
    fresh = TransformersEngine(tiny_model(), tiny_tokenizer(), prefix_cache_size=0)
    assert got == fresh.generate([second], GREEDY)
    assert retried == fresh.generate([second], sampled(1))


def test_a_failure_reaches_its_callers_and_the_loop_goes_on() -> None:
    engine = TransformersEngine(tiny_model(), tiny_tokenizer())
    engine.start_continuous(max_rows=4)
    decoder, lean = engine.continuous, engine.lean
    assert decoder is not None and lean is not None
    real = lean.forward
    broken = {"left": 1}

    def forward(*args: Any, **kw: Any) -> Any:
        if broken["left"]:
            broken["left"] -= 1
            raise RuntimeError("the forward pass broke")
        return real(*args, **kw)

    lean.forward = forward  # type: ignore[method-assign]
    ps = prompts(2, context=30, seed=2)
    try:
        with pytest.raises(RuntimeError, match="the forward pass broke"):
            engine.generate(ps[:1], GREEDY)
        alone = TransformersEngine(tiny_model(), tiny_tokenizer(), batch_size=1)
        assert engine.generate(ps, GREEDY) == [alone.generate([p], GREEDY)[0] for p in ps]
        with pytest.raises(ValueError, match="at least one token"):
            decoder.submit([[]], GREEDY, [0])
        with pytest.raises(ValueError, match="one seed per row"):
            decoder.submit([[1, 2]], GREEDY, [])
    finally:
        lean.forward = real  # type: ignore[method-assign]
        engine.stop_continuous()
    with pytest.raises(RuntimeError, match="after close"):
        decoder.submit([[1, 2]], GREEDY, [0])


@pytest.mark.parametrize("overlap", [True, False])
def test_a_failing_prompt_fails_only_its_own_request_among_those_prefilled_together(
    overlap: bool,
) -> None:
    """Rows queued together share a prefill pass; when it raises, each is prefilled again
    on its own, so the row that breaks it fails, and the other request and the row already
    decoding still get the tokens they get alone (prefill thread or inline in the loop)."""
    tok = tiny_tokenizer()
    first, good, bad = (tok(p)["input_ids"] for p in prompts(3, context=40, seed=23))
    engine = TransformersEngine(tiny_model(), tok)
    lean = engine.lean
    assert lean is not None
    real = lean.prefill
    held, release = threading.Event(), threading.Event()
    packs: list[int] = []

    def prefill(parts: Any) -> Any:
        ids = [p.ids for p in parts]
        packs.append(len(parts))
        if ids == [first[:-1]]:
            held.set()
            assert release.wait(30)
        if bad[:-1] in ids:
            raise RuntimeError("this prompt breaks the pass")
        return real(parts)

    lean.prefill = prefill  # type: ignore[method-assign]
    cfg = GenerationConfig(max_new_tokens=6)
    engine.start_continuous(max_rows=4, overlap_prefill=overlap)
    decoder = engine.continuous
    assert decoder is not None
    try:
        one = decoder.submit([first], cfg, [0])
        assert held.wait(30)  # the prefill thread is busy: the next two queue together
        two, three = decoder.submit([good], cfg, [0]), decoder.submit([bad], cfg, [0])
        release.set()
        with pytest.raises(RuntimeError, match="this prompt breaks the pass"):
            three.result(timeout=30)
        got, live = two.result(timeout=30), one.result(timeout=30)
    finally:
        release.set()
        lean.prefill = real  # type: ignore[method-assign]
        engine.stop_continuous()
    assert packs[:4] == [1, 2, 1, 1]  # first; good and bad together; then each alone
    alone = TransformersEngine(tiny_model(), tok, batch_size=1)
    assert got == alone.generate_tokens([good], cfg)
    assert live == alone.generate_tokens([first], cfg)


def test_close_finishes_what_is_queued() -> None:
    engine = TransformersEngine(tiny_model(), tiny_tokenizer())
    engine.start_continuous(max_rows=2)
    decoder = engine.continuous
    assert decoder is not None
    rows = tiny_tokenizer()(prompts(5, context=25, seed=7))["input_ids"]
    futures = [decoder.submit([r], GREEDY, [0]) for r in rows]
    decoder.close()
    assert all(f.done() for f in futures)
    alone = TransformersEngine(tiny_model(), tiny_tokenizer(), batch_size=1)
    assert [f.result()[0] for f in futures] == [alone.generate_tokens([r], GREEDY)[0] for r in rows]


def test_hf_generate_cannot_batch_continuously() -> None:
    engine = TransformersEngine(tiny_model(), tiny_tokenizer(), decode="generate")
    assert not engine.start_continuous(4) and not engine.concurrent
