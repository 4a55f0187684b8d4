"""Training examples that never show the step's own call (`--distinct-examples`,
training/data.py): a train step whose query another scenario also asked is shown the
nearest *other* query's answer, as a held-out query that no recording repeats is; val
steps still search the whole memory; the checkpoint records the choice.

    python -m pytest -q tests/training/test_distinct_examples.py
"""

from __future__ import annotations

import json

import pytest

from simworld.data.records import (
    Episode,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.training.data import to_examples
from simworld.training.sft_run import SFTRun, _recipe
from simworld.worldmodel.context import Budget
from simworld.worldmodel.retrieval import Retriever, recorded_steps


def search(scenario: str, query: str, passage: str) -> Episode:
    arguments = {"query": query, "top_k": 1}
    call = ToolCall("c1", "search", arguments, json.dumps(arguments))
    hits = json.dumps([{"id": passage, "title": passage.upper(), "score": 3.5}])
    result = ToolResultsObservation([ToolResult("c1", hits)])
    return Episode(scenario, "mock", Task(scenario), [Step(ToolCallsAction([call]), result)])


EPISODES = [
    search("need-1", "oak tree bark", "p-oak"),
    search("need-2", "oak tree bark", "p-oak"),  # another need asks the very query
    search("need-3", "oak tree leaves", "p-leaf"),
]


def example_of(prompt: str) -> str:
    return prompt.split("## SIMILAR RECORDED STEP")[1].split("## ")[0]


def test_a_train_step_is_shown_another_querys_answer() -> None:
    memory = Retriever([r for ep in EPISODES for r in recorded_steps(ep)])
    budget = Budget(total=600, example=200)
    plain, _ = to_examples(EPISODES[:1], budget, 200, memory, True)
    distinct, report = to_examples(EPISODES[:1], budget, 200, memory, True, distinct=True)
    assert report.kept == 1
    # without it, need-1 is shown need-2's recording of its own query: its very answer
    assert "oak tree bark" in example_of(plain[0].prompt)
    assert '"p-oak"' in example_of(plain[0].prompt)
    # with it, the nearest other query
    assert "oak tree leaves" in example_of(distinct[0].prompt)
    assert '"p-leaf"' in example_of(distinct[0].prompt)
    assert plain[0].target == distinct[0].target  # the target is the step's own result
    # a val step (not exclude_own, not distinct) searches the whole memory
    val, _ = to_examples(EPISODES[:1], budget, 200, memory)
    assert '"p-oak"' in example_of(val[0].prompt)


def test_the_recipe_takes_it_only_with_an_example_block() -> None:
    assert _recipe(SFTRun(out="x", preset="tiny", distinct_examples=True)).distinct_examples
    assert not _recipe(SFTRun(out="x", preset="tiny")).distinct_examples
    with pytest.raises(ValueError, match="needs an example block"):
        _recipe(SFTRun(out="x", preset="default", distinct_examples=True))
    with pytest.raises(ValueError, match="its own example retrieval"):
        SFTRun(out="x", init="default", distinct_examples=True)
