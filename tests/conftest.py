"""Fixtures shared across the test packages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny AR checkpoint trained on 40 FrozenLake transitions (seconds); read-only."""
    from simworld.training.sft_run import SFTRun, run_sft

    out = tmp_path_factory.mktemp("tiny")
    run_sft(SFTRun(out=out, preset="tiny", envs=("frozenlake",), limit=40))
    return out
