"""Retrieval: the nearest recorded step on hand-made episodes (tool names, per-call
neighbours, text actions, a scenario left out), the memory file (round trip, reproducible
bytes, bad files named), the example block within its own budget, and a world model that
fills the block itself from its memory, as every caller gets it.

    python -m pytest -q tests/worldmodel/test_retrieval.py
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from simworld.data.records import (
    Episode,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.worldmodel.context import (
    Budget,
    build_context,
    context_for_action,
    example_block,
    with_example,
)
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.render import render_prompt, section
from simworld.worldmodel.retrieval import (
    Recorded,
    Retriever,
    load_memory,
    recorded_step,
    recorded_steps,
    save_memory,
)
from simworld.worldmodel.world_model import TextWorldModel


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(call_id, name, dict(arguments), json.dumps(arguments))


def step(calls: list[ToolCall], texts: list[str], state: object = None) -> Step:
    results = [ToolResult(c.id, t) for c, t in zip(calls, texts, strict=True)]
    after = None if state is None else {"seen": True}
    return Step(ToolCallsAction(calls), ToolResultsObservation(results), state, after)


def episode(steps: list[Step], scenario: str, episode_id: str = "", env: str = "mock") -> Episode:
    return Episode(episode_id or scenario, env, Task(scenario), steps)


def memory_episodes() -> list[Episode]:
    notes = episode(
        [
            step([call("a0", "cat", file="notes.txt")], ["meeting at noon"], {"n": 0}),
            step([call("a1", "cat", file="todo.md")], ["buy milk"]),
            step([call("a2", "ls")], ['{"files": ["notes.txt", "todo.md"]}']),
        ],
        "notes",
    )
    # the same scenario recorded a second way (as BFCL records its long-context variant)
    again = episode([step([call("b0", "cat", file="todo.md")], ["buy milk, eggs"])], "notes", "n2")
    other = episode([step([call("c0", "cat", file="todo.md")], ["call mum"])], "family")
    game = Episode(
        "g",
        "game",
        Task("cave"),
        [
            Step(TextAction("open door"), TextObservation("The door opens.")),
            Step(TextAction("go north"), TextObservation("A hall.")),
        ],
        initial_observation=TextObservation("A door."),
    )
    return [notes, again, other, game]


@pytest.fixture
def retriever() -> Retriever:
    return Retriever([r for ep in memory_episodes() for r in recorded_steps(ep)])


def texts(found: Recorded | None) -> list[str]:
    assert found is not None
    observation = found.observation
    if isinstance(observation, TextObservation):
        return [observation.text]
    return [r.text for r in observation.results]


def test_the_nearest_step_and_a_left_out_scenario(retriever: Retriever) -> None:
    todo = ToolCallsAction([call("q", "cat", file="todo.md")])
    assert texts(retriever.neighbour("mock", todo, "meeting at noon")) == ["buy milk"]
    # training leaves out the step's own scenario, both of its recordings
    assert texts(retriever.neighbour("mock", todo, "", exclude="notes")) == ["call mum"]
    assert retriever.neighbour("elsewhere", todo, "") is None  # an unseen env
    only = Retriever(recorded_steps(memory_episodes()[0]))
    assert only.neighbour("mock", todo, "", exclude="notes") is None  # nothing else to show
    # an unseen tool name: the most similar call of any tool in the env
    unseen = ToolCallsAction([call("q", "head", file="notes.txt")])
    assert texts(retriever.neighbour("mock", unseen, "")) == ["meeting at noon"]
    pair = ToolCallsAction([call("x", "ls"), call("y", "cat", file="notes.txt")])
    found = retriever.nearest_calls("mock", pair, "")
    assert [(texts(f[0]), f[1]) if f else None for f in found] == [
        (['{"files": ["notes.txt", "todo.md"]}'], 0),
        (["meeting at noon"], 0),
    ]
    # text actions match text actions, on the action and the previous observation
    assert texts(retriever.neighbour("game", TextAction("go north"), "The door opens.")) == [
        "A hall."
    ]


def test_the_k_nearest_steps_nearest_first(retriever: Retriever) -> None:
    todo = ToolCallsAction([call("q", "cat", file="todo.md")])
    found = retriever.neighbours("mock", todo, "meeting at noon", 3)
    assert [texts(f) for f in found] == [["buy milk"], ["buy milk, eggs"], ["call mum"]]
    assert found[0] == retriever.neighbour("mock", todo, "meeting at noon")
    # more than the group holds: every cat call of the env, then nothing else
    assert len(retriever.neighbours("mock", todo, "", 10)) == 4
    left = retriever.neighbours("mock", todo, "", 3, exclude="notes")
    assert [texts(f) for f in left] == [["call mum"]]
    assert retriever.neighbours("elsewhere", todo, "", 3) == []
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        retriever.neighbours("mock", todo, "", 0)


def test_distinct_never_shows_a_recording_of_the_same_call(retriever: Retriever) -> None:
    todo = ToolCallsAction([call("q", "cat", file="todo.md")])
    # three recordings of cat(todo.md) under other call ids, in its scenario or another:
    # none is shown
    found = retriever.neighbours("mock", todo, "meeting at noon", 3, distinct=True)
    assert [texts(f) for f in found] == [["meeting at noon"]]
    # with none of its tool left, the env's other tools, still never the same call
    only_todo = [r for r in recorded_steps(memory_episodes()[0]) if texts(r) != ["meeting at noon"]]
    fallback = Retriever(only_todo).neighbours("mock", todo, "", 3, distinct=True)
    assert [texts(f) for f in fallback] == [['{"files": ["notes.txt", "todo.md"]}']]
    # without distinct the nearest is the very call
    assert texts(retriever.neighbours("mock", todo, "", 1)[0]) == ["buy milk"]


def test_a_recorded_step_keeps_what_retrieval_needs() -> None:
    notes = memory_episodes()[0]
    first, second = recorded_step(notes, 0), recorded_step(notes, 1)
    assert (first.env, first.scenario, first.previous) == ("mock", "notes", "")
    assert first.patch == [{"op": "replace", "path": "", "value": {"seen": True}}]
    assert second.previous == "meeting at noon" and second.patch is None


def test_the_memory_file_round_trips_in_reproducible_bytes(tmp_path: Path) -> None:
    entries = [r for ep in memory_episodes() for r in recorded_steps(ep)]
    one = save_memory(tmp_path / "one.jsonl.gz", entries)
    two = save_memory(tmp_path / "two.jsonl.gz", entries)
    assert one.read_bytes() == two.read_bytes()
    assert load_memory(one) == entries
    lines = gzip.decompress(one.read_bytes()).decode().splitlines()
    assert json.loads(lines[0]) == {"schema_version": 1, "entries": len(entries)}
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress("\n".join([lines[0], lines[1], "{}"]).encode()))
    with pytest.raises(ValueError, match=r"bad\.jsonl\.gz, line 3"):
        load_memory(bad)
    bad.write_bytes(gzip.compress(b'{"schema_version": 9, "entries": 0}\n'))
    with pytest.raises(ValueError, match="memory schema_version 9"):
        load_memory(bad)


def test_the_example_block_fits_its_own_budget_or_is_left_out(retriever: Retriever) -> None:
    notes = memory_episodes()[0]
    ctx = build_context(notes, 1, Budget(total=300))
    found = retriever.neighbour("mock", ctx.action_record, ctx.previous, exclude="notes")
    assert found is not None
    # the neighbour's action, then its outcome under this step's call id
    assert example_block(found, ctx.action_record).splitlines() == [
        '{"name":"cat","arguments":{"file":"todo.md"}}',
        "a1 ok call mum",
    ]
    roomy = with_example(ctx, found, Budget(total=300, example=60))
    assert roomy.example == example_block(found, ctx.action_record)
    assert with_example(ctx, found, Budget(total=300, example=5)) == ctx  # left out whole
    assert with_example(ctx, found, Budget(total=300)) == ctx  # no example budget: no block
    assert with_example(ctx, None, Budget(total=300, example=60)) == ctx
    # a long outcome is shrunk with a marker to fit, never cut blindly
    long = Recorded("mock", "x", found.action, "", TextObservation("word " * 400))
    small = with_example(ctx, long, Budget(total=300, example=120))
    assert "chars left out" in small.example
    assert len(small.example) < 400 and small.example.endswith('word "')


def test_several_steps_nearest_first_as_many_as_fit(retriever: Retriever) -> None:
    notes = memory_episodes()[0]
    ctx = build_context(notes, 1, Budget(total=300))
    found = retriever.neighbours("mock", ctx.action_record, ctx.previous, 3)
    blocks = [example_block(f, ctx.action_record) for f in found]
    assert [b.splitlines()[1] for b in blocks] == ["a1 ok buy milk", "a1 ok buy milk, eggs",
                                                   "a1 ok call mum"]  # fmt: skip
    roomy = with_example(ctx, found, Budget(total=300, example=200, examples=3))
    assert roomy.example == "\n\n".join(blocks)
    # one step given alone or as a list of one: the same block as before
    one = Budget(total=300, example=60)
    assert with_example(ctx, found[:1], one) == with_example(ctx, found[0], one)
    # a block that holds two whole steps shows the two nearest, not three shrunk ones
    count = Budget().count
    heading = count(section("example", "x")) - count("x")
    two = count("\n\n".join(blocks[:2])) + heading
    assert two < count("\n\n".join(blocks)) + heading
    tight = with_example(ctx, found, Budget(total=300, example=two, examples=3))
    assert tight.example == "\n\n".join(blocks[:2])
    with pytest.raises(ValueError, match=r"Budget\.examples must be >= 1"):
        Budget(examples=0)


def strict(text: str) -> int:
    return (len(text) + 1) // 2 + text.count("\n")


def test_the_prompt_stays_within_total_plus_example(retriever: Retriever) -> None:
    for total, example in ((120, 40), (160, 80), (400, 200)):
        budget = Budget(total=total, count=strict, example=example)
        for ep in memory_episodes():
            for index in range(len(ep.steps)):
                ctx = build_context(ep, index, budget)
                found = retriever.neighbour(ep.env, ctx.action_record, ctx.previous)
                filled = with_example(ctx, found, budget)
                assert strict(render_prompt(filled)) <= total + example
                assert strict(render_prompt(ctx)) <= total


class Recorder:
    """An Engine that remembers its prompts and answers each with a fixed text."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, prompts: Sequence[str], cfg: GenerationConfig) -> list[str]:
        self.prompts += prompts
        return ["q ok x"] * len(prompts)


def test_a_model_with_memory_fills_the_example_itself(retriever: Retriever) -> None:
    session = episode([step([call("s0", "cat", file="notes.txt")], ["meeting at noon"])], "new")
    live = context_for_action(session, None, ToolCallsAction([call("q", "cat", file="todo.md")]))
    assert live.example == "" and live.previous == "meeting at noon"
    engine = Recorder()
    model = TextWorldModel(engine, Budget(total=300, example=60), memory=retriever)
    (prediction,) = model.predict([live])
    assert prediction.ok and "## SIMILAR RECORDED STEP\n" in engine.prompts[0]
    assert "q ok buy milk" in engine.prompts[0]  # the nearest step, under the live call id
    # no memory, or no example budget: the prompt is what it was without retrieval
    for plain in (TextWorldModel(Recorder(), Budget(total=300)),
                  TextWorldModel(Recorder(), Budget(total=300), memory=retriever)):  # fmt: skip
        plain.predict([live])
        assert isinstance(plain.engine, Recorder)
        assert plain.engine.prompts == [render_prompt(live)]
