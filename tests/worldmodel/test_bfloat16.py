"""bfloat16 weights (`dtype=` of the transformers engine): the choice itself, and that a
row's numbers do not depend on what else is decoded or cached beside it. In bfloat16 the
attention kernels' blocking shows in the rounded output, so these compare bitwise."""

from __future__ import annotations

import copy

import pytest
import torch
from engine_helpers import copy_model, prompts, tiny_model, tiny_tokenizer
from threads import in_threads
from transformers import PreTrainedModel

from simworld.worldmodel.bench import random_llama
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.decode import PrefixCache, _prefill_prefix
from simworld.worldmodel.engines.hf import TransformersEngine, native_bfloat16, resolve_dtype
from simworld.worldmodel.engines.lean import KVCache, LeanLlama

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
    bit, where one masked attention call over the shared window would not be."""
    lean = LeanLlama(bf16(make()))  # type: ignore[operator]
    ns, nl = 200, 600
    alone = prefilled(lean, ids(ns, seed=1), capacity=ns + 1)
    want = lean.forward(torch.tensor([[5]]), torch.tensor([[ns]]), alone, ns, ones(1, ns + 1), [0])

    w = nl  # the shared write slot: both prompts end just before it
    both = lean.new_cache(2, w + 1)
    for t in both.tensors():
        t.zero_()
    other = prefilled(lean, ids(nl, seed=2), capacity=nl)
    for dst, a, b in zip(both.tensors(), alone.tensors(), other.tensors(), strict=True):
        dst[0, :, w - ns : w] = a[0, :, :ns]
        dst[1, :, :w] = b[0]
    key_valid = ones(2, w + 1)
    key_valid[0, : w - ns] = False
    got = lean.forward(
        torch.tensor([[5], [7]]), torch.tensor([[ns], [nl]]), both, w, key_valid, [w - ns, 0]
    )
    assert torch.equal(got[0], want[0])
    assert torch.equal(
        lean.logits(got, both, key_valid, w + 1)[0],
        lean.logits(want, alone, ones(1, ns + 1), ns + 1)[0],
    )


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
