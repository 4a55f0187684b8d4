"""An MDLM adapted from an AR checkpoint: the weights map one to one (its first target
position is the AR model's next-token distribution, with and without the copy head), the
causal prefix never reads later prompt tokens, foreign checkpoints are refused by field,
and `simworld train mdlm --init` trains from it and writes a served checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.checkpoint import CheckpointMeta, save_checkpoint
from simworld.worldmodel.mdlm import MDLM
from simworld.worldmodel.mdlm_adapt import mdlm_config_from_ar, mdlm_from_ar
from simworld.worldmodel.tokenizer import load_tokenizer, train_tokenizer

TEXTS = ["[state] grid 4x4 at (1, 2) [action] move(left)", '{"observation": "moved", "ok": 1}']


def _ar_checkpoint(directory: Path, copy_dim: int, copy_next: bool = False) -> Path:
    """A tiny AR checkpoint with weights large enough that distributions are not flat."""
    tok = train_tokenizer(TEXTS * 20, 300)
    torch.manual_seed(0)
    cfg = ARConfig.preset("tiny", copy_dim=copy_dim, copy_next=copy_next)
    model = build_model(cfg, len(tok), tok.pad_token_id, tok.eos_token_id)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0, 0.2)
    save_checkpoint(directory, model, tok, CheckpointMeta("2", kind="ar"))
    return directory


def _batch(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), P, dtype=torch.long)
    valid = torch.zeros(len(rows), P, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, : len(r)], valid[b, : len(r)] = torch.tensor(r), True
    return ids, valid


@pytest.mark.parametrize(("copy_dim", "copy_next"), [(0, False), (16, False), (16, True)])
def test_the_first_target_position_is_the_ar_models_next_token(
    tmp_path: Path, copy_dim: int, copy_next: bool
) -> None:
    from transformers import AutoModelForCausalLM

    from simworld.worldmodel.copy_head import register

    register()
    path = _ar_checkpoint(tmp_path / "ar", copy_dim, copy_next)
    mdlm, tok = mdlm_from_ar(path, target_len=5)
    mdlm.train(False)
    assert mdlm.cfg.shift and mdlm.cfg.causal_prefix and mdlm.cfg.copy_dim == copy_dim
    assert mdlm.cfg.copy_next is copy_next
    ar = AutoModelForCausalLM.from_pretrained(str(path)).eval()
    rows = [tok.encode(TEXTS[0]), tok.encode("[action] look")]  # two lengths: right padding
    ids, valid = _batch(rows)
    with torch.no_grad():
        prefix = mdlm.encode_prefix(ids, valid)
        got = mdlm.denoise(torch.full((2, 5), mdlm.mask_id), prefix)[:, 0]  # (2, V)
        for b, row in enumerate(rows):
            want = ar(input_ids=torch.tensor([row])).logits[0, -1]  # (V,)
            assert torch.allclose(got[b], want, atol=1e-4), (b, (got[b] - want).abs().max())
        # and target position 1 reads target position 0's state, not its own
        target = torch.full((2, 5), mdlm.mask_id)
        moved = target.clone()
        moved[:, 0] = 7
        a, b = mdlm.denoise(target, prefix), mdlm.denoise(moved, prefix)
        assert torch.allclose(a[:, 0], b[:, 0])  # position 0 comes from the prefix alone
        assert not torch.allclose(a[:, 1], b[:, 1])


def test_a_causal_prefix_never_reads_later_prompt_tokens(tmp_path: Path) -> None:
    mdlm, _ = mdlm_from_ar(_ar_checkpoint(tmp_path / "ar", 16), target_len=5)
    ids, valid = _batch([[5, 6, 7, 8, 9]])
    other = ids.clone()
    other[0, 4] = 3
    with torch.no_grad():
        one, two = mdlm.encode_prefix(ids, valid), mdlm.encode_prefix(other, valid)
    for k1, k2 in zip(one.k, two.k, strict=True):
        assert torch.equal(k1[..., :4, :], k2[..., :4, :])
        assert not torch.equal(k1[..., 4, :], k2[..., 4, :])


def test_foreign_checkpoints_are_refused_by_field(tmp_path: Path) -> None:
    path = _ar_checkpoint(tmp_path / "ar", 0)
    raw = json.loads((path / "config.json").read_text())
    for field, value, named in [
        ("tie_word_embeddings", False, "tie_word_embeddings"),
        ("model_type", "gpt2", "model_type"),
        ("rope_parameters", {"rope_type": "llama3", "rope_theta": 1e4}, "rope_type"),
    ]:
        (path / "config.json").write_text(json.dumps({**raw, field: value}))
        with pytest.raises(ValueError, match=named):
            mdlm_config_from_ar(path)
    (path / "config.json").write_text(json.dumps(raw))
    cfg, vocab = mdlm_config_from_ar(path, target_len=7)
    assert cfg.target_len == 7 and vocab == raw["vocab_size"]
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        mdlm_from_ar(tmp_path / "nothing")


def test_a_shift_model_needs_the_prefix_last_state(tmp_path: Path) -> None:
    mdlm, _ = mdlm_from_ar(_ar_checkpoint(tmp_path / "ar", 0), target_len=5)
    prefix = mdlm.encode_prefix(*_batch([[5, 6, 7]]))
    prefix.last = None
    with pytest.raises(ValueError, match="last state"):
        mdlm.denoise(torch.full((1, 5), mdlm.mask_id), prefix)


@pytest.mark.slow
def test_train_mdlm_init_adapts_and_serves(tmp_path: Path) -> None:
    from simworld.data.bundle import load_bundled
    from simworld.training.mdlm_run import MDLMRun, run_mdlm
    from simworld.training.sft_run import SFTRun, run_sft
    from simworld.worldmodel import load_world_model
    from simworld.worldmodel.checkpoint import read_meta
    from simworld.worldmodel.mdlm import load_mdlm
    from simworld.worldmodel.retrieval import MEMORY_FILE

    ar_dir = tmp_path / "ar"
    run_sft(
        SFTRun(out=ar_dir, preset="tiny", envs=("frozenlake",), limit=40, tokens=20_000,
               example_count=2, drop_result_fields=("text",), distinct_examples=True)
    )  # fmt: skip
    out = tmp_path / "mdlm"
    with pytest.raises(ValueError, match="tokenizer"):
        MDLMRun(out=out, init=str(ar_dir), tokenizer=str(ar_dir))
    run = MDLMRun(out=out, preset="tiny", envs=("frozenlake",), limit=40, tokens=20_000)
    metrics = run_mdlm(MDLMRun(**{**run.__dict__, "init": str(ar_dir), "lr": 1e-3}))
    assert metrics["tokens_seen"] >= 20_000
    model, tok, meta = load_mdlm(out)
    assert isinstance(model, MDLM) and model.cfg.shift and model.cfg.causal_prefix
    assert meta.training_args["init_from"] == str(ar_dir) and meta.training_args["lr"] == 1e-3
    assert meta.training_args["state_focus"] is True  # the tiny AR start's view, not MDLM's own
    # and the start's prompts: its example block, as many steps, the same results
    ar_args = read_meta(ar_dir).training_args
    for key in ("budget_tokens", "example_tokens", "example_count", "drop_result_fields",
                "distinct_examples"):  # fmt: skip
        assert meta.training_args[key] == ar_args[key], key
    assert ar_args["example_count"] == 2 and ar_args["drop_result_fields"] == ["text"]
    assert tok.get_vocab() == load_tokenizer(ar_dir).get_vocab()  # the AR model's tokens
    wm = load_world_model(out)
    assert wm.budget.examples == 2 and (out / MEMORY_FILE).exists()
    ctx = wm.context(load_bundled("val", env="frozenlake")[0], 0)
    (prediction,) = wm.predict([ctx])
    assert isinstance(prediction.text, str)
