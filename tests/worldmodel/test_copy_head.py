"""The copy (pointer) head: its logits are a normalized generate-or-copy mixture, it copies
only from positions the token may attend to, the own decode path gives the same tokens as
a full recompute, checkpoints round-trip, and it learns to copy strings it never saw; the
same for the head that copies the token after the attended one (`copy_next`)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from engine_helpers import copy_model, prompts, tiny_tokenizer

from simworld.training.batching import Example, collate, encode_example
from simworld.training.sft import SFTConfig, train_sft
from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from simworld.worldmodel.copy_head import (
    CopyLlamaForCausalLM,
    mixture_logprobs,
    next_token_mask,
    pointer_mask,
    without_copy_head,
)
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.engines.hf import TransformersEngine


@pytest.mark.parametrize("copy_next", [False, True])
def test_logits_are_a_normalized_mixture(copy_next: bool) -> None:
    model = copy_model(copy_next=copy_next)
    ids = torch.randint(1, 300, (2, 12))
    logp = model(input_ids=ids).logits  # (B, T, V)
    assert torch.allclose(logp.exp().sum(-1), torch.ones(2, 12), atol=1e-4)
    assert torch.isfinite(logp).all()  # position 0 has nothing before it to copy


def test_the_next_token_pointer_offers_what_followed_the_attended_position() -> None:
    # a model whose gate copies only (bias -50), its pointer on the last position it may use
    model = copy_model(copy_next=True)
    with torch.no_grad():
        model.copy_gate.weight.zero_()
        model.copy_gate.bias.fill_(-50.0)
    ids = torch.tensor([[11, 12, 13, 14]])
    with torch.no_grad():
        p = model(input_ids=ids).logits.exp()[0]  # (T, V)
        vocabulary = torch.softmax(model.lm_head(model.model(input_ids=ids)[0])[0, 0], -1)
    # position t may copy the tokens at 1..t (each followed a position j < t), never x_0
    for t in range(1, 4):
        assert float(p[t, ids[0, 1 : t + 1]].sum()) == pytest.approx(1.0, abs=1e-4)
        assert float(p[t, 11]) < 1e-6
    # nothing to copy at position 0: the vocabulary head's distribution, whatever the gate
    assert torch.allclose(p[0], vocabulary, atol=1e-6)
    # the mask: j allowed when j and j + 1 both are (one packed example, j + 1 <= t)
    packed = torch.tensor([[[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]]).bool()
    assert next_token_mask(packed).int().tolist() == [[[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1]]]


def test_the_pointer_copies_only_what_it_may_attend_to() -> None:
    # all weight on copying (gate -> 0): the mass is on tokens of allowed positions only
    B, T, S, V = 1, 3, 4, 10
    ids = torch.tensor([[5, 6, 7, 8]])
    allowed = torch.tensor([[[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1]]], dtype=torch.bool)
    logp = mixture_logprobs(
        torch.zeros(B, T, V), torch.randn(B, T, 8), torch.randn(B, S, 8),
        torch.full((B, T, 1), -50.0), ids, allowed,
    )  # fmt: skip
    p = logp.exp()[0]
    assert torch.allclose(p[0, 5], torch.tensor(1.0), atol=1e-5)  # only token 5 allowed
    assert float(p[1, 5] + p[1, 6]) == pytest.approx(1.0, abs=1e-5)
    assert float(p[2, 7] + p[2, 8]) == pytest.approx(1.0, abs=1e-5) and p[2, 5] < 1e-6


def test_pointer_masks_follow_the_attention_masks() -> None:
    causal = pointer_mask(None, 3, torch.device("cpu"))
    assert causal.tolist() == [[[True, False, False], [True, True, False], [True, True, True]]]
    padded = pointer_mask(torch.tensor([[0, 1, 1]]), 3, torch.device("cpu"))
    assert padded[0, 2].tolist() == [False, True, True] and padded[0, 0, 0]  # self always
    # packed rows: two examples in one row never copy from each other
    data = [encode_example(tiny_tokenizer(), Example("ab", "cd"), 32) for _ in range(2)]
    batch = collate([[0, 1]], data, 0)
    allowed = pointer_mask(
        batch["attention_mask"], batch["input_ids"].shape[1], torch.device("cpu")
    )
    n = len(data[0].ids)
    assert not allowed[0, n:, :n].any() and allowed[0, n:, n:].any()


@pytest.mark.parametrize(("shared", "copy_next"), [(0, False), (24, False), (24, True)])
def test_own_decode_path_matches_a_full_recompute(shared: int, copy_next: bool) -> None:
    model, tok = copy_model(copy_next=copy_next), tiny_tokenizer()
    ps = prompts(6, context=40, shared=shared)
    cfg = GenerationConfig(max_new_tokens=12)
    own = TransformersEngine(model, tok, decode="own", batch_size=4)
    full = TransformersEngine(model, tok, decode="generate", batch_size=4)  # no KV cache
    assert own.generate(ps, cfg) == full.generate(ps, cfg)
    assert own.generate(ps, cfg) == own.generate(ps, cfg)  # the prefix cache changes nothing
    sampled = GenerationConfig(max_new_tokens=12, do_sample=True, seed=3)
    alone = [own.generate([p], replace(sampled, seed=3 + i))[0] for i, p in enumerate(ps)]
    assert own.generate(ps, sampled) == alone  # row i samples with seed 3 + i


def test_incremental_hf_decoding_is_refused_and_the_plain_llama_shares_weights() -> None:
    model, tok = copy_model(), tiny_tokenizer()
    ids = tok(prompts(1)[0], return_tensors="pt")["input_ids"]
    with pytest.raises(NotImplementedError, match="own"):
        model.generate(input_ids=ids, max_new_tokens=3, pad_token_id=0)
    plain = without_copy_head(model)
    assert plain.model is model.model and plain.lm_head is model.lm_head
    plain.generate(input_ids=ids, max_new_tokens=3, pad_token_id=0)  # a KV cache works there


@pytest.mark.parametrize("copy_next", [False, True])
def test_a_copy_checkpoint_round_trips(tmp_path: Path, copy_next: bool) -> None:
    model, tok = copy_model(copy_next=copy_next), tiny_tokenizer()
    save_checkpoint(tmp_path, model, tok, CheckpointMeta(serialization_version="2"))
    loaded, _, _ = load_checkpoint(tmp_path)
    assert isinstance(loaded, CopyLlamaForCausalLM)
    assert loaded.config.copy_next is copy_next
    ids = torch.randint(1, 300, (1, 9))
    assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)


def _copy_pairs(n: int, seed: int) -> list[Example]:
    """'<name>:' -> '<name>' for random 6-letter names: nothing to memorize, only copying."""
    rng = random.Random(seed)
    names = ["".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(n)]
    return [Example(f"copy {name} :", f" {name}") for name in names]


def test_the_head_learns_to_copy_names_it_never_saw(tmp_path: Path) -> None:
    train, unseen = _copy_pairs(200, seed=1), _copy_pairs(32, seed=2)
    scores = {}
    for name, copy_dim, copy_next in (("none", 0, False), ("at", 16, False), ("next", 16, True)):
        cfg = SFTConfig.preset(
            "tiny",
            model=ARConfig.preset("tiny", copy_dim=copy_dim, copy_next=copy_next),
            epochs=80,
            eval_every=0,
            exact_samples=32,
            progress=False,
        )
        metrics = train_sft(cfg, train, unseen, tmp_path / name)
        scores[name] = metrics["val_exact"]
    assert scores["at"] >= 0.65 and scores["at"] > scores["none"] + 0.2, scores
    assert scores["next"] >= 0.65 and scores["next"] > scores["none"] + 0.2, scores


def test_the_default_recipe_trains_the_copy_head() -> None:
    for preset in ("default", "tiny"):
        model = build_model(SFTConfig.preset(preset).model, 512)
        assert isinstance(model, CopyLlamaForCausalLM), preset
