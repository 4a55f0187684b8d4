"""Checkpoints: a save/load round trip gives identical weights and the same logits;
incomplete dirs fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from simworld.worldmodel.tokenizer import encode, train_tokenizer
from simworld.worldmodel.world_model import load_world_model

TEXTS = [json.dumps({"ls": ["a.txt", f"dir_{i}"], "cwd": "/alex"}) for i in range(30)]


def _saved(tmp_path: Path) -> tuple[torch.nn.Module, object, Path]:
    tok = train_tokenizer(TEXTS, vocab_size=320)
    torch.manual_seed(0)
    model = build_model(ARConfig.preset("tiny"), len(tok), tok.pad_token_id, tok.eos_token_id)
    meta = CheckpointMeta("test-1", training_args={"lr": 0.1}, metrics={"val_exact": 0.5})
    return model, tok, save_checkpoint(tmp_path / "ckpt", model, tok, meta)


def test_round_trip_gives_identical_weights_and_meta(tmp_path: Path) -> None:
    model, tok, path = _saved(tmp_path)
    loaded, loaded_tok, meta = load_checkpoint(path)
    ids = torch.tensor([encode(tok, TEXTS[3])])  # (1, T)
    model.eval()
    want = model.state_dict()
    got = loaded.state_dict()
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)  # every weight, bit for bit
    with torch.no_grad():
        # Equal weights can still round apart in the last bit: some BLAS kernels (seen on
        # AMD EPYC) block differently for differently aligned memory, and the loaded
        # weights live elsewhere than the trained ones.
        torch.testing.assert_close(model(ids).logits, loaded(ids).logits, atol=1e-5, rtol=0)
    assert encode(loaded_tok, TEXTS[3]) == ids[0].tolist()
    assert meta.kind == "ar" and meta.serialization_version == "test-1"
    assert meta.metrics == {"val_exact": 0.5} and meta.training_args == {"lr": 0.1}
    assert (path / "model.safetensors").stat().st_size < 2e6


def test_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        load_checkpoint(tmp_path / "nope")


def test_incomplete_directory_names_the_missing_files(tmp_path: Path) -> None:
    _, _, path = _saved(tmp_path)
    (path / "model.safetensors").unlink()
    (path / "simworld.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing model\.safetensors, simworld\.json"):
        load_checkpoint(path)


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    _, _, path = _saved(tmp_path)
    meta = json.loads((path / "simworld.json").read_text())
    (path / "simworld.json").write_text(json.dumps({**meta, "schema_version": 99}))
    with pytest.raises(ValueError, match="schema_version 99"):
        load_checkpoint(path)


def test_serialization_versions_a_world_model_loads(tmp_path: Path) -> None:
    model, tok, _ = _saved(tmp_path)
    for version, focus, ok in (("3", False, True), ("4", True, True), ("3", True, False)):
        meta = CheckpointMeta(version, training_args={"state_focus": focus})
        path = save_checkpoint(tmp_path / f"v{version}-{focus}", model, tok, meta)
        if ok:
            assert load_world_model(path).budget.state_focus is focus
        else:  # version 4 changed the focused view: its prompts are not the ones it learned
            with pytest.raises(ValueError, match="version 3's action-focused state view"):
                load_world_model(path)
    meta = CheckpointMeta("99")
    path = save_checkpoint(tmp_path / "v99", model, tok, meta)
    with pytest.raises(ValueError, match="serialization version 99"):
        load_world_model(path)
