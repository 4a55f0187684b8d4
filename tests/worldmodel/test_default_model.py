"""The shipped default world model: it is inside the package, small, loads at once, and
reproduces the val metrics its checkpoint records."""

from __future__ import annotations

import pytest

from simworld.data.bundle import load_bundled
from simworld.training.sft_run import reproduce_val_metrics
from simworld.worldmodel import default_checkpoint, load_world_model
from simworld.worldmodel.checkpoint import load_checkpoint
from simworld.worldmodel.render import READS_VERSIONS

MAX_BYTES = 30 * 1024 * 1024


def test_the_default_ships_inside_the_package_and_is_small() -> None:
    directory = default_checkpoint()
    files = {p.name: p.stat().st_size for p in directory.iterdir()}
    assert {"model.safetensors", "config.json", "simworld.json", "tokenizer.json"} <= set(files)
    assert "resume" not in files  # the optimizer state is not shipped
    assert sum(files.values()) <= MAX_BYTES


def test_the_default_serves_bfcl_and_frozenlake() -> None:
    wm = load_world_model("default")
    _, _, meta = load_checkpoint(default_checkpoint())
    assert meta.serialization_version in READS_VERSIONS
    contexts = [wm.context(load_bundled("val", env=env)[0], 0) for env in ("bfcl", "frozenlake")]
    predictions = wm.predict(contexts)
    assert [p.text != "" for p in predictions] == [True, True]


@pytest.mark.slow
def test_the_default_reproduces_its_recorded_val_metrics() -> None:
    _, _, meta = load_checkpoint(default_checkpoint())
    again = reproduce_val_metrics(default_checkpoint())
    assert again["val_exact"] == meta.metrics["val_exact"]
    assert again["val_loss"] == pytest.approx(meta.metrics["val_loss"], abs=1e-3)
