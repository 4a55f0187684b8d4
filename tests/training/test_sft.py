"""SFT on tiny configs (seconds): loss falls, overfitting reaches exact match, runs are
seeded, resuming is bit-for-bit, packing is exact, bad configs say the fix."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from bundle_pairs import bundle_pairs

from simworld.training.batching import (
    IGNORE,
    Example,
    bucket_plan,
    collate,
    encode_example,
    pack_plan,
)
from simworld.training.sft import SFTConfig, lr_factor, train_sft
from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.checkpoint import load_checkpoint
from simworld.worldmodel.tokenizer import encode, train_tokenizer

PAIRS = [
    Example(prompt=f'{{"cmd":"ls","dir":"/d{i}"}}', target=f'{{"files":["f{i * 7 % 13}.txt"]}}')
    for i in range(20)
]


def test_lr_factor_warms_up_linearly_then_decays_by_cosine() -> None:
    assert lr_factor(0, warmup=4, total=14, min_ratio=0.1) == 0.25
    assert lr_factor(3, warmup=4, total=14, min_ratio=0.1) == 1.0
    assert lr_factor(4, warmup=4, total=14, min_ratio=0.1) == 1.0
    assert math.isclose(lr_factor(9, warmup=4, total=14, min_ratio=0.1), 0.55)  # half way
    assert math.isclose(lr_factor(14, warmup=4, total=14, min_ratio=0.1), 0.1)


def test_encoding_masks_the_prompt_and_cuts_its_start() -> None:
    tok = train_tokenizer([p.prompt + p.target for p in PAIRS], vocab_size=300)
    full = encode_example(tok, PAIRS[0], max_len=512)
    prompt, target = encode(tok, PAIRS[0].prompt), encode(tok, PAIRS[0].target)
    # room to spare keeps the whole prompt (a negative slice once cut its start silently)
    assert full.ids == [*prompt, *target, tok.eos_token_id]
    assert full.n_prompt == len(prompt)
    cut = encode_example(tok, PAIRS[0], max_len=len(full.ids) - 3)
    assert cut.ids == full.ids[3:] and cut.n_prompt == full.n_prompt - 3


def test_a_packed_example_computes_what_it_computes_alone() -> None:
    tok = train_tokenizer([p.prompt + p.target for p in PAIRS], vocab_size=300)
    data = [encode_example(tok, p, 64) for p in PAIRS[:3]]
    torch.manual_seed(0)
    model = build_model(ARConfig.preset("tiny"), len(tok)).eval()
    packed = collate([[0, 1], [2]], data, tok.pad_token_id)
    alone = collate([[1]], data, tok.pad_token_id)
    assert packed["attention_mask"].shape[:2] == (2, 1)  # 4-D block-diagonal mask
    start, n = len(data[0].ids), len(data[1].ids)
    with torch.no_grad():
        labels = packed.pop("labels")
        a = model(**packed).logits[0, start : start + n]  # (n, V)
        alone.pop("labels")
        b = model(**alone).logits[0]  # (n, V)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (labels[0, : data[0].n_prompt] == IGNORE).all()


def test_plans_cover_every_example_once() -> None:
    lengths = [random.Random(i).randint(5, 60) for i in range(200)]
    for plan in (
        pack_plan(lengths, 64, 256, random.Random(1)),
        bucket_plan(lengths, 256, random.Random(1)),
    ):
        seen = sorted(i for batch in plan for row in batch for i in row)
        assert seen == list(range(200))
    for batch in pack_plan(lengths, 64, 256, random.Random(1)):
        assert len(batch) <= 4 and all(sum(lengths[i] for i in row) <= 64 for row in batch)


def test_loss_falls_on_bundled_pairs(tmp_path: Path) -> None:
    pairs = bundle_pairs("train", limit=120)
    cfg = SFTConfig.preset("tiny", epochs=3, progress=False, exact_samples=2, max_new_tokens=16)
    metrics = train_sft(cfg, pairs, pairs[:16], tmp_path)
    losses = metrics["train_losses"]
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3
    assert load_checkpoint(tmp_path)[2].metrics["curve"]


def test_tiny_model_overfits_twenty_pairs_to_exact_match(tmp_path: Path) -> None:
    cfg = SFTConfig.preset("tiny", epochs=300, exact_samples=20, progress=False)
    metrics = train_sft(cfg, PAIRS, PAIRS, tmp_path)
    assert metrics["val_exact"] == 1.0


def test_same_seed_same_curve_and_resume_is_bit_for_bit(tmp_path: Path) -> None:
    cfg = SFTConfig.preset("tiny", epochs=12, progress=False, eval_every=5, exact_samples=2)
    full = train_sft(cfg, PAIRS, PAIRS, tmp_path / "a")
    again = train_sft(cfg, PAIRS, PAIRS, tmp_path / "b")
    assert again["train_losses"] == full["train_losses"]
    half = train_sft(
        SFTConfig.preset("tiny", **{**_fields(cfg), "stop_at_step": 5}),
        PAIRS,
        PAIRS,
        tmp_path / "c",
    )
    assert half["step"] == 5
    resumed = train_sft(cfg, PAIRS, PAIRS, tmp_path / "c", resume=True)
    assert resumed["train_losses"] == full["train_losses"]
    ours, theirs = load_checkpoint(tmp_path / "a")[0], load_checkpoint(tmp_path / "c")[0]
    for (name, p), q in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def _fields(cfg: SFTConfig) -> dict[str, object]:
    return {k: getattr(cfg, k) for k in ("epochs", "progress", "eval_every", "exact_samples")}


def test_resume_without_a_saved_state_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run with resume=False"):
        train_sft(SFTConfig.preset("tiny", progress=False), PAIRS, PAIRS, tmp_path, resume=True)


@pytest.mark.parametrize(
    ("fields", "fix"),
    [
        ({"batch_tokens": 100}, "raise batch_tokens to at least 256"),
        ({"max_new_tokens": 300}, "lower max_new_tokens or raise max_len"),
        ({"lora_r": 8}, "needs a pretrained base"),
        ({"max_len": 1024}, "raise model.max_positions or lower max_len"),
    ],
)
def test_a_bad_config_says_the_fix(fields: dict[str, int], fix: str) -> None:
    with pytest.raises(ValueError, match=fix):
        SFTConfig.preset("tiny", **fields)
