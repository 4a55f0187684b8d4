"""Fixtures for the world-model tests: the bundled train split (real BFCL and FrozenLake
episodes with states), loaded once, and every one of its contexts at the default budget."""

from __future__ import annotations

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import Episode, Step
from simworld.worldmodel.context import Budget, Context, build_context
from simworld.worldmodel.views import BudgetError


@pytest.fixture(scope="session")
def train() -> list[Episode]:
    return load_bundled("train")


@pytest.fixture(scope="session")
def contexts(train: list[Episode]) -> list[tuple[Episode, Step, Context]]:
    """(episode, step, context) for every bundled train step that fits the default budget
    (the few whose action alone is past it are checked in test_context.py)."""
    out = []
    for episode in train:
        for index, step in enumerate(episode.steps):
            try:
                out.append((episode, step, build_context(episode, index, Budget())))
            except BudgetError as exc:
                assert exc.block == "action"
    return out
