"""GRPO: the maths against hand-computed values, the shared-prompt packing against separate
rows, the curriculum's filter, and tiny runs (seconds) on a random-init checkpoint: a step
changes the parameters, the checkpoint loads like an SFT one, resuming continues the run,
and the CLI writes it."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch
from numpy.typing import NDArray

from simworld.cli import main
from simworld.data.bundle import load_bundled
from simworld.data.formats import write_episodes
from simworld.training.data import to_examples
from simworld.training.grpo import (
    Curriculum,
    GRPOConfig,
    GRPOData,
    group_logprobs,
    train_grpo,
)
from simworld.training.grpo_maths import (
    chosen_logprobs,
    group_advantages,
    informative_groups,
    kl_to_reference,
    masked_mean,
    pack_group,
    policy_loss,
    weighted_sample,
)
from simworld.training.grpo_run import load_start, make_items
from simworld.worldmodel import load_world_model
from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.checkpoint import CheckpointMeta, save_checkpoint
from simworld.worldmodel.context import Budget
from simworld.worldmodel.render import SERIALIZATION_VERSION
from simworld.worldmodel.tokenizer import train_tokenizer

# ---------------------------------------------------------------------------- the maths


def test_group_advantages_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 3.0, 3.0, 3.0], [0.0, 1.0, 2.0, 3.0]])
    adv = group_advantages(rewards, eps=0.0)
    assert adv[0].tolist() == [1.0, -1.0, -1.0, 1.0]  # mean 0.5, population std 0.5
    assert adv[1].tolist() == [0.0, 0.0, 0.0, 0.0]
    s = math.sqrt(1.25)  # mean 1.5; deviations ±0.5, ±1.5
    assert adv[2].tolist() == pytest.approx([-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s])
    centred = group_advantages(rewards, scale=False)
    assert centred[2].tolist() == [-1.5, -0.5, 0.5, 1.5]
    assert informative_groups(rewards).tolist() == [True, False, True]


def test_masked_mean_and_kl_by_hand() -> None:
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert masked_mean(x, mask).item() == pytest.approx(7 / 3)
    assert masked_mean(x, mask, denominator=7.0).item() == pytest.approx(1.0)
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0
    logp = torch.log(torch.tensor([0.5, 0.25, 0.5]))
    ref = torch.log(torch.tensor([0.25, 0.5, 0.5]))
    # exp(d) - d - 1, d = ref - logp: d = -ln 2 -> 0.5 + ln 2 - 1; d = ln 2 -> 2 - ln 2 - 1
    expected = [0.5 + math.log(2) - 1, 1 - math.log(2), 0.0]
    assert kl_to_reference(logp, ref).tolist() == pytest.approx(expected, abs=1e-6)


def test_policy_loss_clips_the_ratio_and_is_the_policy_gradient_on_policy() -> None:
    logp = torch.log(torch.tensor([[1.5], [1.5]]))  # ratio 1.5 against old logp 0
    old = torch.zeros(2, 1)
    adv = torch.tensor([1.0, -1.0])
    loss = policy_loss(logp, old, logp, adv, beta=0.0, clip=0.2)
    # min(1.5 * 1, 1.2 * 1) = 1.2;  min(1.5 * -1, 1.2 * -1) = -1.5
    assert loss.squeeze(1).tolist() == pytest.approx([-1.2, 1.5])
    # on policy (old = logp detached): d loss / d logp = -advantage, plus beta * d KL
    lp = torch.tensor([[-0.7, -1.2]], requires_grad=True)
    policy_loss(lp, lp.detach(), lp.detach(), torch.tensor([2.0]), 0.0, 0.2).sum().backward()
    assert lp.grad is not None and lp.grad.tolist() == [[-2.0, -2.0]]


def test_chosen_logprobs_by_hand() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])  # (T=2, V=2)
    got = chosen_logprobs(logits, torch.tensor([1, 1, 0]), torch.tensor([0, 1, 1]))
    assert got.tolist() == pytest.approx([math.log(0.75), math.log(0.25), math.log(0.5)])
    hot = chosen_logprobs(logits, torch.tensor([1]), torch.tensor([0]), temperature=0.5)
    assert hot.tolist() == pytest.approx([math.log(0.9)])  # softmax([2 ln 3, 0]) = [9, 1] / 10


def test_weighted_sample_favours_weight_and_never_draws_zero() -> None:
    rng = random.Random(0)
    firsts = [weighted_sample([9.0, 1.0, 0.0], 1, rng)[0] for _ in range(2000)]
    assert 0.87 < firsts.count(0) / 2000 < 0.93
    assert 2 not in firsts
    assert sorted(weighted_sample([1.0, 0.0, 2.0, 3.0], 10, rng)) == [0, 2, 3]


def test_the_filter_retires_a_context_right_in_every_sample() -> None:
    cur = Curriculum(size=3, boost=2.0)
    assert cur.weights() == [3.0, 3.0, 3.0]  # unseen: counted as wrong
    cur.record(0, [True, True, True, True], [None] * 4, retire=True)
    cur.record(1, [True, False, False, True], [None, "content", "state", None], retire=True)
    assert cur.retired == {0}
    assert cur.weights() == [0.0, 2.0, 3.0]
    assert cur.kinds == {"content": 1, "state": 1}
    assert 0 not in {
        i for _ in range(50) for i in weighted_sample(cur.weights(), 2, random.Random())
    }
    kept = Curriculum(size=1, boost=2.0)
    kept.record(0, [True, True], [None, None], retire=False)
    assert kept.retired == set()


def test_a_packed_group_computes_what_each_completion_computes_alone() -> None:
    torch.manual_seed(0)
    model = build_model(ARConfig.preset("tiny"), vocab_size=40).eval()
    prompt = [5, 6, 7, 8, 9]
    completions = [[10, 11, 2], [12, 2], [13, 14, 15, 16, 2]]
    with torch.no_grad():
        rows, mask = group_logprobs(model, pack_group(prompt, completions), temperature=0.7)
        for j, comp in enumerate(completions):
            logits = model(input_ids=torch.tensor([prompt + comp])).logits[0]  # (T, V)
            at = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(comp))
            alone = chosen_logprobs(logits, at, torch.tensor(comp), temperature=0.7)
            assert rows[j, : len(comp)].tolist() == pytest.approx(alone.tolist(), abs=1e-5)
            assert mask[j].tolist() == [1.0] * len(comp) + [0.0] * (5 - len(comp))


# ---------------------------------------------------------------------------- tiny runs


class CharEncoder:
    """Character-bigram counts hashed into 64 dimensions, L2-normalised: texts that share
    more bigrams are closer. A stand-in for MiniLM (not what these tests test)."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        out = np.full((len(texts), 64), 1e-3, dtype=np.float32)
        for i, text in enumerate(texts):
            for a, b in pairwise(text):
                out[i, (ord(a) * 31 + ord(b)) % 64] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def start_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-init tiny checkpoint over FrozenLake prompts (its samples differ, so the
    continuous cosine reward differs within a group)."""
    episodes = [e for e in load_bundled("val", env="frozenlake") if "4x4" in e.task.id][:4]
    rough, _ = to_examples(episodes, Budget(total=160), max_target_tokens=48)
    tok = train_tokenizer((t for ex in rough for t in (ex.prompt, ex.target)), 384)
    torch.manual_seed(0)
    model = build_model(ARConfig.preset("tiny"), len(tok), tok.pad_token_id, tok.eos_token_id)
    args = {"budget_tokens": 160, "budget_count": "tokenizer", "max_new_tokens": 64, "max_len": 256}
    out = tmp_path_factory.mktemp("start")
    save_checkpoint(out, model, tok, CheckpointMeta(str(SERIALIZATION_VERSION), training_args=args))
    (out / "notes.txt").write_text("carried along\n")  # a file beside the weights
    return out


@pytest.fixture(scope="module")
def data(start_dir: Path) -> GRPOData:
    start, budget, memory = load_start(start_dir)
    assert memory is None and budget.total == 160
    lake = [e for e in load_bundled("val", env="frozenlake") if "4x4" in e.task.id][:8]
    refs = [(e, i) for e in lake for i in range(len(e.steps))]
    items, report = make_items(refs, budget, start.tokenizer, 64, 256, limit=10)
    assert len(items) == report.kept == 10
    return GRPOData(train=items[:6], val=items[6:9], tau=items[6:], schemas={})


CFG = GRPOConfig.preset("tiny", rewards={"cosine": 1.0}, max_new_tokens=64, max_steps=1)


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in load_start(directory).start.model.state_dict().items()}


def test_one_step_changes_the_parameters_and_the_checkpoint_loads(
    start_dir: Path, data: GRPOData, tmp_path: Path
) -> None:
    before = _weights(start_dir)
    metrics = train_grpo(CFG, load_start(start_dir).start, data, tmp_path, CharEncoder())
    (entry,) = metrics["log"]
    assert entry["kept"] > 0 and entry["kl"] == 0.0  # the first update starts at the reference
    after = _weights(tmp_path)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert load_world_model(tmp_path).budget.total == 160
    meta = json.loads((tmp_path / "simworld.json").read_text())
    assert meta["training_args"]["budget_tokens"] == 160  # the start's arguments, kept
    assert meta["training_args"]["grpo"]["group_size"] == CFG.group_size
    assert {"tau", "tau_agreement", "curve", "error_kinds", "val_json_canonical"} <= set(
        meta["metrics"]
    )
    assert (tmp_path / "notes.txt").read_text() == "carried along\n"


def test_resuming_continues_the_same_run(start_dir: Path, data: GRPOData, tmp_path: Path) -> None:
    two = replace(CFG, max_steps=2)
    train_grpo(two, load_start(start_dir).start, data, tmp_path / "a", CharEncoder())
    train_grpo(CFG, load_start(start_dir).start, data, tmp_path / "b", CharEncoder())
    metrics = train_grpo(
        two, load_start(start_dir).start, data, tmp_path / "b", CharEncoder(), resume=True
    )
    assert [e["step"] for e in metrics["log"]] == [1, 2]
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    with pytest.raises(FileNotFoundError, match="resume"):
        train_grpo(CFG, load_start(start_dir).start, data, tmp_path / "c", resume=True)


def test_the_cli_writes_a_checkpoint(start_dir: Path, tmp_path: Path) -> None:
    lake = [e for e in load_bundled("val", env="frozenlake") if "4x4" in e.task.id]
    write_episodes(lake[:4], tmp_path / "train.jsonl")
    write_episodes(lake[4:8], tmp_path / "val.jsonl")
    out = tmp_path / "grpo"
    args = [
        "train",
        "grpo",
        "--init",
        str(start_dir),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--data",
        str(tmp_path / "train.jsonl"),
        "--val-data",
        str(tmp_path / "val.jsonl"),
    ]
    code = main([*args, "--no-embeddings", "--reward", "json_canonical=1",
                 "--reward", "field_f1=0.5"])  # fmt: skip
    assert code == 0
    meta = json.loads((out / "simworld.json").read_text())
    assert meta["training_args"]["grpo"]["rewards"] == {"json_canonical": 1.0, "field_f1": 0.5}
    assert meta["training_args"]["grpo"]["init"] == str(start_dir)
    assert meta["metrics"]["step"] == 2  # the tiny preset's two steps
    assert main([*args, "--no-embeddings"]) == 1  # the default rewards need the encoder
