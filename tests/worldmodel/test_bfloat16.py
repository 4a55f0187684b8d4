"""bfloat16 weights (`dtype=` of the transformers engine): the choice itself, and that a
row's numbers do not depend on what else is decoded or cached beside it. In bfloat16 the
attention kernels' blocking shows in the rounded output, so these compare bitwise."""

from __future__ import annotations

import copy

import pytest
import torch
from engine_helpers import copy_model, prompts, tiny_model, tiny_tokenizer
from threads import in_threads
from torch import Tensor
from transformers import PreTrainedModel

from simworld.worldmodel.bench import random_llama
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.decode import PrefixCache, _prefill_many, _prefill_prefix
from simworld.worldmodel.engines.hf import TransformersEngine, native_bfloat16, resolve_dtype
from simworld.worldmodel.engines.lean import DECODE_BLOCK, KVCache, LeanLlama

GREEDY = GenerationConfig(max_new_tokens=12)


def bf16(model: PreTrainedModel) -> PreTrainedModel:
    return copy.deepcopy(model).to(torch.bfloat16)  # the helpers' models are shared


def attention_model() -> PreTrainedModel:
    """The default model's attention shape (8 heads of 32, 4 key/value heads), two layers:
    at the tiny models' head size 16 the kernels happen to round alike more often."""
    return random_llama(
        len(tiny_tokenizer()), hidden=256, layers=2, heads=8, kv_heads=4, intermediate=128,
        init_range=0.2,
    )  # fmt: skip


def ids(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, len(tiny_tokenizer()), (n,), generator=g).tolist()


def ones(*shape: int) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bool)


def prefilled(lean: LeanLlama, tokens: list[int], capacity: int) -> KVCache:
    """A batch-1 cache of `capacity` slots holding `tokens`' keys and values."""
    cache = lean.new_cache(1, capacity)
    n = len(tokens)
    lean.forward(torch.tensor([tokens]), torch.arange(n)[None], cache, 0, ones(1, capacity))
    return cache


def test_resolve_dtype() -> None:
    assert resolve_dtype("float32") is torch.float32
    assert resolve_dtype("bfloat16") is torch.bfloat16
    assert resolve_dtype(torch.bfloat16) is torch.bfloat16
    want = torch.bfloat16 if native_bfloat16("cpu") else torch.float32
    assert resolve_dtype("auto", "cpu") is want
    with pytest.raises(ValueError, match="choose one of auto, float32, bfloat16"):
        resolve_dtype("float16")


def test_engine_casts_the_weights() -> None:
    model = copy.deepcopy(tiny_model())
    engine = TransformersEngine(model, tiny_tokenizer(), dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    out = engine.generate(prompts(2), GREEDY)
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
    with pytest.raises(ValueError, match="dtype 'half' is not supported"):
        TransformersEngine(copy.deepcopy(tiny_model()), tiny_tokenizer(), dtype="half")


@pytest.mark.parametrize(
    "make", [tiny_model, copy_model, attention_model], ids=["llama", "copy-head", "heads-of-32"]
)
def test_decode_step_of_a_row_ignores_the_other_rows(make: object) -> None:
    """One decode step of a 200-token row beside a 600-token row (the batch's window then
    starts 400 slots before the short row's first) equals the step decoded alone, bit for
    bit, where one masked attention call over the shared window would not be. Each row
    has DECODE_BLOCK - 1 free slots before it, for its decode window."""
    lean = LeanLlama(bf16(make()))  # type: ignore[operator]
    ns, nl, m = 200, 600, DECODE_BLOCK - 1
    short, long_ = prefilled(lean, ids(ns, seed=1), ns), prefilled(lean, ids(nl, seed=2), nl)

    def step(rows: list[tuple[KVCache, int]], tokens: list[int]) -> tuple[Tensor, Tensor]:
        """One decode step of `rows` (a prefilled cache and its length each), right-aligned
        to end at one write slot, from a cache whose free slots hold zeros."""
        w = m + max(n for _, n in rows)
        cache = lean.new_cache(len(rows), w + 1)
        for t in cache.tensors():
            t.zero_()
        key_valid = ones(len(rows), w + 1)
        for b, (src, n) in enumerate(rows):
            for dst, s in zip(cache.tensors(), src.tensors(), strict=True):
                dst[b, :, w - n : w] = s[0, :, :n]
            key_valid[b, : w - n] = False
        firsts = [w - n for _, n in rows]
        pos = torch.tensor([[n] for _, n in rows])
        hidden = lean.forward(torch.tensor([[t] for t in tokens]), pos, cache, w, key_valid, firsts)
        return hidden, lean.logits(hidden, cache, key_valid, w + 1)

    want_h, want_logits = step([(short, ns)], [5])
    got_h, got_logits = step([(short, ns), (long_, nl)], [5, 7])
    assert torch.equal(got_h[0], want_h[0])
    assert torch.equal(got_logits[0], want_logits[0])
    flipped_h, _ = step([(long_, nl), (short, ns)], [7, 5])  # the other row first
    assert torch.equal(flipped_h[1], want_h[0])


def test_a_decode_row_without_room_for_its_window_is_refused() -> None:
    lean = LeanLlama(bf16(attention_model()))
    cache = prefilled(lean, ids(10, seed=1), 11)
    with pytest.raises(ValueError, match="needs 53 free slots before its first"):
        lean.forward(torch.tensor([[5]]), torch.tensor([[10]]), cache, 10, ones(1, 11), [0])


def test_prefill_from_a_cached_prefix_equals_prefill_from_scratch() -> None:
    """A prompt continued from a cached prefix (cut at a 32-token block) gets the keys,
    values and hidden state it gets prefilled from slot 0, bit for bit."""
    lean = LeanLlama(bf16(attention_model()))
    prompt = ids(600, seed=3)
    cold = _prefill_prefix(lean, prompt, PrefixCache(0))
    for cut in (45, 200, 500, 599):
        cache = PrefixCache(4)
        _prefill_prefix(lean, prompt[:cut], cache)
        warm = _prefill_prefix(lean, prompt, cache)
        assert cache.hits == 1 and cache.reused_tokens == cut - cut % 32
        for a, b in zip(warm.tensors(), cold.tensors(), strict=True):
            assert torch.equal(a, b), f"cut at {cut}"


@pytest.mark.parametrize("make", [copy_model, attention_model], ids=["copy-head", "heads-of-32"])
def test_prompts_prefilled_in_one_pass_equal_each_prefilled_alone(make: object) -> None:
    """`_prefill_many` runs every prompt's new tokens through the matmuls at once, each
    starting from what a cached prompt or an earlier prompt of the same call already holds
    (copied layer by layer as the pass computes it, chains included): every prompt's keys,
    values and copy-head slots equal its prefill alone from slot 0, bit for bit."""
    lean = LeanLlama(bf16(make()))  # type: ignore[operator]
    base = ids(300, seed=6)
    cached = base[:150] + ids(40, seed=7)  # shares 4 whole blocks with `base`
    batch = [
        base,  # the cached prompt holds 4 blocks
        base[:200] + ids(90, seed=8),  # an earlier prompt of the call holds 6 blocks
        base[:200] + ids(90, seed=8)[:50] + ids(30, seed=9),  # ... and then 7: a chain
        base[:64],  # wholly held by `base`: nothing of its own to compute
        ids(33, seed=10),  # shares nothing
        cached[:170] + ids(20, seed=11),  # the cached prompt holds more than the call
    ]
    alone = [_prefill_prefix(lean, p, PrefixCache(0)) for p in batch]
    cache = PrefixCache(4)
    _prefill_prefix(lean, cached, cache)
    hits = cache.hits
    got = _prefill_many(lean, batch, cache)
    assert cache.hits - hits == 5  # rows 0 and 5 from the cached prompt, 1, 2, 3 from the call
    for i, (a, b) in enumerate(zip(got, alone, strict=True)):
        for x, y in zip(a.tensors(), b.tensors(), strict=True):
            assert torch.equal(x, y), f"prompt {i}"


def test_continuous_rows_equal_their_solo_decode_in_bfloat16() -> None:
    """End to end: rows joining a running bfloat16 batch through a warm prefix cache get
    the tokens they get decoded alone on a fresh engine."""
    model = bf16(copy_model())
    ps = prompts(6, context=80, shared=40, seed=9)
    solo = [
        TransformersEngine(model, tiny_tokenizer(), prefix_cache_size=0).generate([p], GREEDY)[0]
        for p in ps
    ]
    engine = TransformersEngine(model, tiny_tokenizer(), prefix_cache_size=8)
    engine.start_continuous(max_rows=4)
    try:
        got = in_threads(len(ps), lambda i: engine.generate([ps[i]], GREEDY)[0])
    finally:
        engine.stop_continuous()
    assert got == solo


@pytest.mark.parametrize("make", [copy_model, attention_model], ids=["copy-head", "heads-of-32"])
def test_batched_generate_equals_each_prompt_alone_in_bfloat16(make: object) -> None:
    """One `generate` call over prompts of different lengths, some sharing a start, gives
    each prompt the tokens it gets alone on a fresh engine: no padding or shared prefill
    changes a row's rounding."""
    model = bf16(make())  # type: ignore[operator]
    ps = prompts(3, context=120, shared=60, seed=4) + prompts(3, context=50, shared=0, seed=5)
    solo = [
        TransformersEngine(model, tiny_tokenizer(), prefix_cache_size=0).generate([p], GREEDY)[0]
        for p in ps
    ]
    engine = TransformersEngine(model, tiny_tokenizer(), prefix_cache_size=8)
    assert engine.generate(ps, GREEDY) == solo
    assert engine.generate(ps[::-1], GREEDY) == solo[::-1]


def test_copy_head_mixture_stays_float32_under_autocast() -> None:
    """Under bfloat16 autocast (mixed-precision training) the copy head's pointer and
    mixture run in float32: log-probabilities in float32 that still normalise."""
    model = copy.deepcopy(copy_model())
    ids = torch.tensor([tiny_tokenizer()(prompts(1)[0])["input_ids"][:40]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp = model(input_ids=ids).logits  # (1, T, V)
    assert logp.dtype == torch.float32
    assert torch.allclose(logp.exp().sum(-1), torch.ones(1, ids.shape[1]), atol=1e-3)
