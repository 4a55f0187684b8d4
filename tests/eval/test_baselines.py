"""The baselines and the model predictor: copy-last and nearest-neighbour on hand-made
episodes (exact observations, remapped call ids), nearest-neighbour on the bundled data,
over-budget steps as problem predictions, and the prompted LLM on a tiny random Llama.

    python -m pytest -q tests/eval/test_baselines.py
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from simworld.data.bundle import load_bundled
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
from simworld.eval.baselines import CopyLast, NearestNeighbour, PromptedLLM, make_baselines
from simworld.eval.predictors import ModelPredictor, Predictor, StepRef
from simworld.worldmodel.ar import ARConfig, build_model
from simworld.worldmodel.context import Budget, Context
from simworld.worldmodel.engines.base import GenerationConfig, load_engine
from simworld.worldmodel.render import format_target, render_messages
from simworld.worldmodel.tokenizer import token_counter, train_tokenizer
from simworld.worldmodel.world_model import Prediction, TextWorldModel

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(call_id, name, dict(arguments), json.dumps(arguments))


def tool_step(
    calls: list[ToolCall], texts: list[str], state: object = None, next_state: object = None
) -> Step:
    """Results flagged as errors when they start with "Error"; the state unchanged unless
    `next_state` is given."""
    pairs = zip(calls, texts, strict=True)
    results = [ToolResult(c.id, t, is_error=t.startswith("Error")) for c, t in pairs]
    after = state if next_state is None else next_state
    return Step(ToolCallsAction(calls), ToolResultsObservation(results), state, after)


def tool_episode(steps: list[Step], env: str = "mock", episode_id: str = "e") -> Episode:
    return Episode(episode_id, env, Task("t"), steps)


def text_episode(pairs: Sequence[tuple[str, str]], initial: str | None = "Start.") -> Episode:
    steps = [Step(TextAction(a), TextObservation(o)) for a, o in pairs]
    first = TextObservation(initial) if initial is not None else None
    return Episode("g", "game", Task("t"), steps, initial_observation=first)


def observed(prediction: Prediction) -> list[tuple[str, str, bool]]:
    assert isinstance(prediction.observation, ToolResultsObservation)
    return [(r.call_id, r.text, r.is_error) for r in prediction.observation.results]


def baseline_invariants(prediction: Prediction) -> None:
    assert prediction.ok and prediction.observation is not None
    assert prediction.text == format_target(prediction.observation, prediction.patch)


# ---------------------------------------------------------------------------- copy-last


def test_copy_last_tool_episode() -> None:
    state = {"cwd": "/"}
    episode = tool_episode(
        [
            tool_step([call("a0", "cd", folder="x")], ['{"cwd": "/x"}'], state),
            tool_step(
                [call("b0", "ls"), call("b1", "cd", folder="y")],
                ['{"files": []}', "Error: no y"],
                state,
            ),
            tool_step([call("c0", "cd", folder="z"), call("c1", "ls")], ["{}", "{}"], state),
            tool_step([call("d0", "pwd")], ["/"], state),
        ]
    )
    predictions = CopyLast().predict_steps([(episode, i) for i in range(4)])
    for prediction in predictions:
        baseline_invariants(prediction)
        assert prediction.patch == []  # states tracked: unchanged
    assert observed(predictions[0]) == [("a0", "{}", False)]  # nothing seen yet
    assert observed(predictions[1]) == [
        ("b0", '{"cwd": "/x"}', False),
        ("b1", '{"cwd": "/x"}', False),
    ]
    # cd's most recent result is b1's error; ls's is b0's
    assert observed(predictions[2]) == [("c0", "Error: no y", True), ("c1", '{"files": []}', False)]
    assert observed(predictions[3]) == [("d0", "{}", False)]  # an unseen tool: previous first


def test_copy_last_text_episode() -> None:
    episode = text_episode([("open door", "The door opens."), ("go north", "A hall.")])
    first, second = CopyLast().predict_steps([(episode, 0), (episode, 1)])
    assert first.observation == TextObservation("Start.")
    assert second.observation == TextObservation("The door opens.")
    assert first.patch is None and second.patch is None  # no states
    baseline_invariants(first)
    bare = text_episode([("look", "Dark.")], initial=None)
    (prediction,) = CopyLast().predict_steps([(bare, 0)])
    assert prediction.observation == TextObservation("")


# ---------------------------------------------------------------------------- nearest neighbour


def nn_train() -> list[Episode]:
    first = tool_episode(
        [
            tool_step([call("t0", "cat", file="notes.txt")], ["meeting at noon"], {"n": 0}),
            tool_step([call("t1", "cat", file="todo.md")], ["buy milk"], {"n": 0}),
            tool_step([call("t2", "ls", file="notes.txt")], ['{"files": ["notes.txt"]}'], {"n": 0}),
            tool_step(
                [call("t3", "rm", file="old.log")],
                ['{"removed": "old.log"}'],
                {"files": ["old.log"]},
                next_state={"files": []},
            ),
        ],
        episode_id="train-0",
    )
    game = text_episode([("open door", "The door opens."), ("go north", "A hall.")])
    return [first, game]


def test_nearest_neighbour_picks_the_obvious_step() -> None:
    nn = NearestNeighbour.fit(nn_train())
    query = tool_episode(
        [
            tool_step([call("q0", "cat", file="todo.md")], ["?"]),
            tool_step([call("q1", "cat", file="notes.txt"), call("q2", "ls")], ["?", "?"]),
            tool_step([call("q3", "rm", file="old.log")], ["?"], {"files": ["old.log"]}),
            tool_step([call("q4", "mv", file="old.log")], ["?"]),
        ]
    )
    predictions = nn.predict_steps([(query, i) for i in range(4)])
    for prediction in predictions:
        baseline_invariants(prediction)
    assert observed(predictions[0]) == [("q0", "buy milk", False)]
    # per-call neighbours, and the tool name rules: `ls` never takes a `cat` result
    assert observed(predictions[1]) == [
        ("q1", "meeting at noon", False),
        ("q2", '{"files": ["notes.txt"]}', False),
    ]
    assert predictions[1].patch is None  # the query has no states
    assert predictions[2].patch == [{"op": "remove", "path": "/files/0"}]  # the neighbour's
    # an unseen tool name: the most similar call of any tool in the env
    assert observed(predictions[3]) == [("q4", '{"removed": "old.log"}', False)]
    game = text_episode([("open door", "?"), ("go north", "?")], initial="Somewhere else.")
    texts = [p.observation for p in nn.predict_steps([(game, 0), (game, 1)])]
    assert texts == [TextObservation("The door opens."), TextObservation("A hall.")]


def test_nearest_neighbour_falls_back_to_copy_last_for_an_unseen_env() -> None:
    query = tool_episode([tool_step([call("x", "cat", file="todo.md")], ["?"])], env="other")
    (prediction,) = NearestNeighbour.fit(nn_train()).predict_steps([(query, 0)])
    assert observed(prediction) == [("x", "{}", False)]


def test_nearest_neighbour_on_bundled_data() -> None:
    nn = NearestNeighbour.fit(load_bundled("train"))
    val = load_bundled("val")
    refs = [(ep, i) for ep in val for i in range(len(ep.steps))][::7][:200]
    predictions = nn.predict_steps(refs)
    assert len(predictions) == 200
    right = []
    for prediction, (episode, index) in zip(predictions, refs, strict=True):
        baseline_invariants(prediction)
        step = episode.steps[index]
        assert (prediction.patch is not None) == (step.state is not None)
        real, predicted = step.observation, prediction.observation
        if isinstance(real, ToolResultsObservation):
            assert isinstance(predicted, ToolResultsObservation)
            assert [r.call_id for r in predicted.results] == [r.call_id for r in real.results]
            pairs = zip(predicted.results, real.results, strict=True)
            right += [p.is_error == r.is_error for p, r in pairs]
    assert right and sum(right) / len(right) > 0.5


# ---------------------------------------------------------------------------- model predictor


class FixedModel:
    """A WorldModel that answers every context with its action text."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.batches: list[int] = []

    def predict(
        self, batch: Sequence[Context], cfg: GenerationConfig | None = None
    ) -> list[Prediction]:
        self.batches.append(len(batch))
        return [Prediction(TextObservation(ctx.action), None, ctx.action) for ctx in batch]


def test_model_predictor_reports_over_budget_steps() -> None:
    long = "x" * 3000
    actions = ["open the door", long, "go north", "take the lamp", "light the lamp"]
    episode = text_episode([(a, "ok") for a in actions])
    refs: list[StepRef] = [(episode, i) for i in range(5)]
    counts: list[int] = []
    model = FixedModel(Budget(total=300))
    predictor = ModelPredictor(model, batch_size=2, progress=counts.append)
    predictions = predictor.predict_steps(refs)
    assert [p.text for p in predictions] == [a if a != long else "" for a in actions]
    assert predictions[1].observation is None and predictions[1].problems[0].startswith(
        "over budget: the action block"
    )
    assert model.batches == [2, 2] and sum(counts) == 5
    tiny = ModelPredictor(FixedModel(Budget(total=8))).predict_steps(refs)
    assert len(tiny) == 5 and all(p.problems[0].startswith("over budget:") for p in tiny)


# ---------------------------------------------------------------------------- prompted LLM


def test_prompted_llm_on_a_tiny_random_llama() -> None:
    corpus = [json.dumps({"cwd": f"/dir{i}", "files": ["a.txt", "b.md"]}) for i in range(200)]
    tokenizer = train_tokenizer(corpus, vocab_size=300)
    tokenizer.chat_template = CHAT_TEMPLATE
    config = ARConfig.preset("tiny", max_positions=2048)
    model = build_model(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine = load_engine("transformers", model=model, tokenizer=tokenizer, max_retries=0)
    budget = Budget(total=300, count=token_counter(tokenizer))
    llm = PromptedLLM(engine, budget, GenerationConfig(max_new_tokens=8))
    episode = tool_episode(
        [tool_step([call("c0", "cd", folder="x")], ["{}"]), tool_step([call("c1", "ls")], ["{}"])]
    )
    predictions = llm.predict_steps([(episode, 0), (episode, 1)])
    assert llm.name == "prompted-llm" and len(predictions) == 2
    assert all(isinstance(p, Prediction) for p in predictions)
    # With demos, each prompt shows the nearest train step, solved, as its example block.
    demos = NearestNeighbour.fit(nn_train())
    shown = PromptedLLM(engine, budget, GenerationConfig(max_new_tokens=8), demos=demos)
    query = tool_episode([tool_step([call("q0", "cat", file="todo.md")], ["?"])])
    assert shown.context(query, 0).example == ""  # the model fills it in when it predicts
    assert isinstance(shown.model, TextWorldModel)
    filled = shown.model.with_example(shown.context(query, 0))
    # the neighbour's action, then what it returned, under the query's call id
    assert filled.example.splitlines() == [
        '{"name":"cat","arguments":{"file":"todo.md"}}',
        "q0 ok buy milk",
        "patch []",  # the neighbour has states (unchanged)
    ]
    # chat: the example as a solved turn (its action, answered by its outcome), then the action
    roles = [m["role"] for m in render_messages(filled)]
    assert roles == ["system", "user", "assistant", "user"]
    assert len(shown.predict_steps([(query, 0)])) == 1


def test_make_baselines() -> None:
    made: list[Predictor] = make_baselines(["copy-last", "nearest-neighbour"], nn_train(), None)
    assert [p.name for p in made] == ["copy-last", "nearest-neighbour"]
    with pytest.raises(ValueError, match="choose from copy-last, nearest-neighbour, prompted-llm"):
        make_baselines(["oracle"], [], None)
    with pytest.raises(ValueError, match="smollm2"):
        make_baselines(["prompted-llm"], [], "gpt-4o")
    (remote,) = make_baselines(["prompted-llm"], [], "http://127.0.0.1:9/v1#my-model")
    assert isinstance(remote, PromptedLLM)
