"""The transformers engine on a tiny random Llama: the own decode path gives HF `generate`'s
greedy outputs, batching and prefix reuse change nothing, end tokens, stop strings and the
token bound are honoured, seeded sampling repeats; the factory's errors are clear."""

from __future__ import annotations

import copy
import importlib.util

import pytest
from engine_helpers import conversations, prompts, tiny_model, tiny_tokenizer

from simworld.worldmodel.engines import GenerationConfig, load_engine
from simworld.worldmodel.engines.hf import TransformersEngine

GREEDY = GenerationConfig(max_new_tokens=12)
SAMPLED = GenerationConfig(max_new_tokens=12, do_sample=True, temperature=0.9, top_p=0.9, seed=3)


def engine(decode: str = "own", batch_size: int = 4, **kw: object) -> TransformersEngine:
    return TransformersEngine(
        tiny_model(),
        tiny_tokenizer(),
        decode=decode,
        batch_size=batch_size,
        **kw,
    )


def mixed_prompts() -> list[str]:
    return prompts(3, context=40) + prompts(3, context=36, shared=20, seed=3)


def test_own_path_matches_generate_greedy() -> None:
    ps = mixed_prompts()
    assert engine("own").generate(ps, GREEDY) == engine("generate").generate(ps, GREEDY)


@pytest.mark.parametrize("decode", ["own", "generate"])
def test_batched_outputs_equal_single_outputs(decode: str) -> None:
    ps = mixed_prompts()
    single = engine(decode, batch_size=1)
    assert engine(decode, batch_size=8).generate(ps, GREEDY) == [
        single.generate([p], GREEDY)[0] for p in ps
    ]


def test_prefix_cache_reuse_changes_nothing() -> None:
    ps = prompts(6, context=80, shared=70, seed=5)
    cached = engine("own", batch_size=3, prefix_cache_size=4)
    first = cached.generate(ps[:3], GREEDY) + cached.generate(ps[3:], GREEDY)
    # matches are cut to whole PREFILL_BLOCKs (32 tokens): 70 shared tokens reuse 64
    assert cached.prefix_cache.hits >= 1 and cached.prefix_cache.reused_tokens >= 64
    assert first == engine("generate", batch_size=6).generate(ps, GREEDY)


@pytest.mark.parametrize("decode", ["own", "generate"])
def test_stops_at_end_token_and_token_bound(decode: str) -> None:
    tok = tiny_tokenizer()
    rows = tok(prompts(3))["input_ids"]
    free = engine(decode).generate_tokens(rows, GREEDY)
    assert all(len(r) == GREEDY.max_new_tokens for r in free)  # random weights: no eos
    end = free[0][4]  # make the 5th token of row 0 an end token
    model = copy.deepcopy(tiny_model())
    model.generation_config.eos_token_id = end
    stopped = TransformersEngine(model, tok, decode=decode).generate_tokens(rows, GREEDY)
    for full, cut in zip(free, stopped, strict=True):
        assert cut == (full[: full.index(end)] if end in full else full)
    assert stopped[0] == free[0][:4]
    short = engine(decode).generate_tokens(rows, GenerationConfig(max_new_tokens=3))
    assert short == [r[:3] for r in free]
    # ignore_eos (benchmarks: equal work on every path) runs every row to the bound
    ignoring = TransformersEngine(model, tok, decode=decode, ignore_eos=True)
    assert ignoring.generate_tokens(rows, GREEDY) == free


@pytest.mark.parametrize("decode", ["own", "generate"])
def test_stop_strings_cut_the_output(decode: str) -> None:
    ps = prompts(2)
    full = engine(decode).generate(ps, GREEDY)
    stop = full[0][3:5]
    cut = engine(decode).generate(ps, GenerationConfig(max_new_tokens=12, stop=(stop,)))
    assert cut[0] == full[0][: full[0].index(stop)]
    assert all(
        c == f[: f.index(stop)] if stop in f else c == f for c, f in zip(cut, full, strict=True)
    )


@pytest.mark.parametrize("decode", ["own", "generate"])
def test_seeded_sampling_repeats(decode: str) -> None:
    ps = mixed_prompts()
    first = engine(decode).generate(ps, SAMPLED)
    assert engine(decode).generate(ps, SAMPLED) == first
    other = GenerationConfig(**{**SAMPLED.__dict__, "seed": 4})
    assert engine(decode).generate(ps, other) != first


def test_own_path_sampling_ignores_batch_composition() -> None:
    ps = mixed_prompts()
    together = engine("own", batch_size=8).generate(ps, SAMPLED)
    rows = tiny_tokenizer()(ps)["input_ids"]
    alone = [
        engine("own").generate_tokens([row], SAMPLED, seed_offsets=[i])[0]
        for i, row in enumerate(rows)
    ]
    assert together == [tiny_tokenizer().decode(a) for a in alone]


def test_row_seeds_give_each_row_the_draw_it_gets_alone() -> None:
    ps = mixed_prompts()
    seeds = tuple(100 + 7 * i for i in range(len(ps)))
    merged = GenerationConfig(**{**SAMPLED.__dict__, "row_seeds": seeds})
    eng = engine("own", batch_size=8)
    assert eng.independent_rows and not engine("generate").independent_rows
    together = eng.generate(ps, merged)
    alone = [
        eng.generate([p], GenerationConfig(**{**SAMPLED.__dict__, "seed": s}))[0]
        for p, s in zip(ps, seeds, strict=True)
    ]
    assert together == alone
    assert [merged.row_seed(i) for i in range(len(ps))] == list(seeds)
    assert SAMPLED.row_seed(2) == SAMPLED.seed + 2  # without row seeds: seed + row
    with pytest.raises(ValueError, match="row 6 has no seed"):
        merged.row_seed(len(ps))


def test_chat_retries_are_bounded_and_reported() -> None:
    eng = engine("own", max_retries=2)
    convs = conversations(3)
    out = eng.generate_chat(convs, GREEDY, validate=lambda text: False)
    assert len(out) == 3
    assert eng.last_report.attempts == [3, 3, 3] and eng.last_report.invalid == [0, 1, 2]
    assert eng.generate_chat(convs, GREEDY, validate=lambda t: True) == eng.generate_chat(
        convs, GREEDY
    )
    assert eng.last_report.retries == 0


def test_generation_config_fails_fast() -> None:
    with pytest.raises(ValueError, match="max_new_tokens"):
        GenerationConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        GenerationConfig(do_sample=True, temperature=0)
    with pytest.raises(TypeError, match="tuple"):
        GenerationConfig(stop="\n")


def test_factory() -> None:
    eng = load_engine("transformers", model=tiny_model(), tokenizer=tiny_tokenizer())
    assert isinstance(eng, TransformersEngine) and eng.decode == "own"
    with pytest.raises(ValueError, match="unknown engine kind 'nope'; known kinds: openai"):
        load_engine("nope")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_factory_names_the_vllm_extra() -> None:
    with pytest.raises(ImportError, match=r"simworld\[vllm\]"):
        load_engine("vllm", model="some/checkpoint")


def test_rows_ending_early_leave_the_others_unchanged() -> None:
    tok = tiny_tokenizer()
    rows = tok(prompts(6))["input_ids"]
    free = engine("own", batch_size=8).generate_tokens(rows, GREEDY)
    model = copy.deepcopy(tiny_model())
    model.generation_config.eos_token_id = [free[0][1], free[1][2], free[2][3], free[3][5]]
    ends = set(model.generation_config.eos_token_id)
    got = TransformersEngine(model, tok, decode="own", batch_size=8).generate_tokens(rows, GREEDY)
    want = [next((r[:i] for i, t in enumerate(r) if t in ends), r) for r in free]
    assert got == want


def test_common_length_of_two_token_lists() -> None:
    from simworld.worldmodel.engines.decode import _common_length

    assert _common_length([1, 2, 3, 4], [1, 2, 3, 4]) == 4
    assert _common_length([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert _common_length([1, 2], [1, 2, 3]) == 2
    assert _common_length([], [1]) == 0
    assert _common_length([5, 2], [1, 2]) == 0
    assert _common_length((1, 2, 3), [1, 2, 7]) == 2  # a cached key (tuple) and a prompt
