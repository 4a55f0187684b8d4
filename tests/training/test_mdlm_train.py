"""MDLM training: a tiny model overfits a few real transitions and serves them through the
world model; the token budget cuts the schedule; the recipe and the command write a
checkpoint that `load_world_model` serves, recording how it was made."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from simworld.data.bundle import load_bundled
from simworld.training.batching import Example
from simworld.training.data import to_examples
from simworld.training.mdlm import MDLMTrainConfig, encode_pair, plan_batches, train_mdlm
from simworld.training.mdlm_run import MDLMRun, run_mdlm
from simworld.worldmodel import load_world_model
from simworld.worldmodel.context import Budget
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.mdlm import MDLMConfig, load_mdlm
from simworld.worldmodel.mdlm_sample import MDLMEngine
from simworld.worldmodel.render import render_prompt, render_target
from simworld.worldmodel.tokenizer import token_counter, train_tokenizer
from simworld.worldmodel.world_model import TextWorldModel

SCRIPT = Path(sys.executable).parent / "simworld"


def _lake_examples(n: int) -> tuple[list[Example], Budget, object]:
    episodes = [
        ep
        for ep in load_bundled("train", env="frozenlake")
        if ep.task.id.startswith("frozenlake-4x4")
    ][:6]
    rough, _ = to_examples(episodes, Budget(total=160), max_target_tokens=48)
    tok = train_tokenizer((t for ex in rough for t in (ex.prompt, ex.target)), 384)
    budget = Budget(total=160, count=token_counter(tok))
    # distinct prompts only: a slippery lake gives one context several outcomes
    distinct = {ex.prompt: ex for ex in to_examples(episodes, budget, max_target_tokens=48)[0]}
    return list(distinct.values())[:n], budget, tok


@pytest.mark.slow
def test_a_tiny_model_overfits_a_few_transitions(tmp_path: Path) -> None:
    """Eight real FrozenLake transitions learned to exact observations, then served by the
    world model (greedy, K = target length: 49). 800 epochs: at 400 a fresh install
    reached val_exact 0.5 / 0.875 / 0.75 at seeds 0 / 1 / 2, at 800 it reaches 1.0 at all
    three (val loss about 1e-5), so the test does not rest on a lucky seed."""
    examples, budget, tok = _lake_examples(8)
    assert len(examples) == 8
    model = MDLMConfig.preset("tiny", hidden_size=128, intermediate_size=256, target_len=49)
    cfg = MDLMTrainConfig.preset(
        "tiny", model=model, epochs=800, lr=3e-3, exact_samples=8, sample_steps=49, progress=False
    )
    metrics = train_mdlm(cfg, examples, examples, tmp_path, tokenizer=tok)  # type: ignore[arg-type]
    assert metrics["val_exact"] >= 7 / 8
    mdlm, tok2, _ = load_mdlm(tmp_path)
    wm = TextWorldModel(MDLMEngine(mdlm, tok2, steps=49), budget, GenerationConfig(49))
    texts = wm.engine.generate([ex.prompt for ex in examples], wm.generation)  # type: ignore[union-attr]
    assert sum(t == ex.target for t, ex in zip(texts, examples, strict=True)) >= 7


def test_the_token_budget_ends_the_schedule() -> None:
    tok = train_tokenizer(["abc def ghi"] * 10, 300)
    pairs = [Example(f"prompt {i}", f"target {i}") for i in range(30)]
    cfg = MDLMTrainConfig.preset("tiny", epochs=5, batch_tokens=512)
    data = [encode_pair(tok, ex, cfg.model) for ex in pairs]  # type: ignore[arg-type]
    whole = plan_batches(cfg, data)
    budget = sum(p.real for p in data)  # one epoch of real tokens
    cut = plan_batches(replace(cfg, max_tokens=budget), data)
    seen = [sum(data[i].real for row in rows for i in row) for rows in cut]
    assert len(cut) < len(whole) and sum(seen) >= budget > sum(seen[:-1])


def test_a_pair_is_prefix_target_eos_and_pads() -> None:
    tok = train_tokenizer(["abc def ghi"] * 10, 300)
    cfg = MDLMConfig.preset("tiny", target_len=10)
    pair = encode_pair(tok, Example("abc", "def"), cfg)  # type: ignore[arg-type]
    n = len(tok("def")["input_ids"])
    assert len(pair.target) == 10 and pair.target[n] == tok.eos_token_id
    assert set(pair.target[n + 1 :]) == {tok.pad_token_id}
    assert pair.real == len(pair.prefix) + n + 1


@pytest.fixture(scope="module")
def tiny_mdlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mdlm")
    run_mdlm(MDLMRun(out=out, preset="tiny", envs=("frozenlake",), limit=40, tokens=50_000))
    return out


@pytest.mark.slow
def test_the_recipe_writes_a_served_checkpoint(tiny_mdlm: Path) -> None:
    _, _, meta = load_mdlm(tiny_mdlm)
    assert meta.kind == "mdlm" and meta.training_args["budget_count"] == "tokenizer"
    assert meta.training_args["max_new_tokens"] == 49 and meta.training_args["sample_steps"] == 4
    assert meta.training_args["state_focus"] is False  # MDLM_STATE_FOCUS, its figures' view
    assert 50_000 <= meta.metrics["tokens_seen"] < 60_000
    assert {"val_loss", "val_exact", "curve", "train_losses"} <= set(meta.metrics)
    wm = load_world_model(tiny_mdlm)
    episode = load_bundled("val", env="frozenlake")[0]
    ctx = wm.context(episode, 0)
    (prediction,) = wm.predict([ctx])
    assert isinstance(prediction.text, str) and len(render_prompt(ctx)) > 0
    assert render_target(ctx)  # the context has a target to compare against


@pytest.mark.slow
def test_train_mdlm_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "train", "mdlm", "--preset", "tiny", "--env", "frozenlake", "--limit", "20",
         "--tokens", "20000", "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"tokens_seen"' in done.stdout
    bad = subprocess.run(
        [str(SCRIPT), "train", "mdlm", "--preset", "huge", "--out", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "huge" in bad.stderr


def test_target_copies_share_one_prefix_encoding() -> None:
    """C copies of a row's target against one encoded prefix: the copies see exactly the
    keys a separately encoded repeated batch gives, the loss is an average over them, and
    its gradient reaches the prefix positions through the one encoding."""
    import torch

    from simworld.training.mdlm import collate_pairs, repeat_prefix, step_loss
    from simworld.worldmodel.mdlm import MDLM

    tok = train_tokenizer(["abc def ghi jkl"] * 10, 300)
    cfg = MDLMConfig.preset("tiny", target_len=8)
    torch.manual_seed(0)
    model = MDLM(cfg, len(tok))
    pairs = [encode_pair(tok, Example(p, t), cfg) for p, t in [("abc def", "ghi"), ("jkl", "abc")]]  # type: ignore[arg-type]
    ids, valid, _ = collate_pairs(pairs, tok.pad_token_id)
    once = repeat_prefix(model.encode_prefix(ids, valid), 3)
    twice = model.encode_prefix(ids.repeat_interleave(3, 0), valid.repeat_interleave(3, 0))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(once.k, twice.k, strict=True))
    noisy = torch.full((6, 8), model.mask_id)
    assert torch.allclose(model.denoise(noisy, once), model.denoise(noisy, twice), atol=1e-5)
    # the same noise draws, with and without copies: the loss with copies is the loss of
    # the repeated batch (mean over B * C * L positions)
    loss = step_loss(model, pairs, tok.pad_token_id, torch.Generator().manual_seed(1), copies=3)
    repeated = [p for p in pairs for _ in range(3)]
    plain = step_loss(model, repeated, tok.pad_token_id, torch.Generator().manual_seed(1))
    assert torch.allclose(loss, plain, atol=1e-5)
    enc = model.encode_prefix(ids, valid)
    enc.k[0].retain_grad()
    model.denoise(noisy, repeat_prefix(enc, 3)).sum().backward()  # type: ignore[no-untyped-call]
    grad = enc.k[0].grad
    assert grad is not None and float(grad[:, :, : len(pairs[1].prefix)].abs().min()) > 0


def test_a_row_costs_its_prefix_and_each_target_copy() -> None:
    tok = train_tokenizer(["abc def ghi"] * 10, 300)
    pairs = [Example(f"prompt {i}", f"target {i}") for i in range(30)]
    one = MDLMTrainConfig.preset("tiny", epochs=1, batch_tokens=512)
    four = replace(one, target_copies=4)
    data = [encode_pair(tok, ex, one.model) for ex in pairs]  # type: ignore[arg-type]
    rows = [sum(len(r) for r in b) for b in plan_batches(one, data)]
    rows4 = [sum(len(r) for r in b) for b in plan_batches(four, data)]
    assert sum(rows) == sum(rows4) == 30 and max(rows4) < max(rows)
    with pytest.raises(ValueError, match="target_copies"):
        replace(one, target_copies=0)
