"""Baselines a learned world model must beat, each a `Predictor` (see predictors.py):

- `CopyLast` ("copy-last"): the observation is the last one seen (per tool name), the state
  is unchanged.
- `NearestNeighbour` ("nearest-neighbour"): the observation and state change of the most
  similar train step (TF-IDF cosine over the action and the previous observation).
- `PromptedLLM` ("prompted-llm"): a chat model prompted with the chat rendering of the same
  serialization (the Simia way), shown the nearest train step as a solved example:
  SmolLM2-135M-Instruct offline, or any OpenAI-compatible endpoint.

    from simworld.data.bundle import load_bundled
    from simworld.eval.baselines import make_baselines
    train, val = load_bundled("train"), load_bundled("val")
    refs = [(ep, i) for ep in val for i in range(len(ep.steps))]
    for predictor in make_baselines(["copy-last", "nearest-neighbour"], train, llm=None):
        predictions = predictor.predict_steps(refs)

A baseline's prediction text is `format_target(observation, patch)`, with no problems.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import replace

from simworld.data.records import (
    Action,
    Episode,
    Observation,
    Step,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.eval.predictors import ModelPredictor, Predictor, StepRef
from simworld.worldmodel.context import Budget
from simworld.worldmodel.engines.base import ChatEngine, Engine, GenerationConfig, load_engine
from simworld.worldmodel.patch import Patch
from simworld.worldmodel.render import format_target
from simworld.worldmodel.retrieval import Retriever, recorded_step, recorded_steps
from simworld.worldmodel.world_model import Prediction, TextWorldModel

BASELINES = ("copy-last", "nearest-neighbour", "prompted-llm")


def _prediction(observation: Observation, patch: Patch | None) -> Prediction:
    return Prediction(observation, patch, format_target(observation, patch))


def _tracks_state(step: Step) -> bool:
    """Whether the step has a patch target (as `build_context` decides)."""
    return step.state is not None and step.next_state is not None


def _result_of(action: Action, observation: Observation, position: int) -> ToolResult | None:
    """The result of the call at `position` of a step (its action and observation): by
    call id, else by position."""
    if not isinstance(action, ToolCallsAction) or not isinstance(
        observation, ToolResultsObservation
    ):
        return None
    results = observation.results
    call_id = action.calls[position].id
    by_id = next((r for r in results if r.call_id == call_id), None)
    return by_id or (results[position] if position < len(results) else None)


def _as_call(result: ToolResult, call: ToolCall) -> ToolResult:
    return ToolResult(call.id, result.text, result.structured, result.is_error)


# ---------------------------------------------------------------------------- copy-last


class CopyLast:
    """The observation is the last one seen; the state does not change (patch `[]`)."""

    name = "copy-last"

    def predict_steps(self, refs: Sequence[StepRef]) -> list[Prediction]:
        return [self.predict_step(episode, index) for episode, index in refs]

    def predict_step(self, episode: Episode, index: int) -> Prediction:
        step = episode.steps[index]
        patch: Patch | None = [] if _tracks_state(step) else None
        if isinstance(step.action, ToolCallsAction):
            results = [_copied_result(episode, index, call) for call in step.action.calls]
            return _prediction(ToolResultsObservation(results), patch)
        earlier = [s.observation for s in episode.steps[:index]]
        texts = [
            o for o in (episode.initial_observation, *earlier) if isinstance(o, TextObservation)
        ]
        return _prediction(TextObservation(texts[-1].text if texts else ""), patch)


def _copied_result(episode: Episode, index: int, call: ToolCall) -> ToolResult:
    """The most recent earlier result of the same tool, else the previous step's first
    result, else an empty "{}" (not an error); under the current call's id."""
    for step in reversed(episode.steps[:index]):
        if isinstance(step.action, ToolCallsAction):
            for position in reversed(range(len(step.action.calls))):
                result = _result_of(step.action, step.observation, position)
                if step.action.calls[position].name == call.name and result is not None:
                    return _as_call(result, call)
    previous = episode.steps[index - 1].observation if index else None
    if isinstance(previous, ToolResultsObservation) and previous.results:
        return _as_call(previous.results[0], call)
    return ToolResult(call.id, "{}", {}, False)


# ---------------------------------------------------------------------------- nearest neighbour


class NearestNeighbour:
    """Retrieval from train steps (the world model's `Retriever`): each call (or text
    action) of a query takes the result (or observation) of the most similar train call in
    the same env with the same tool name (the same env when the name is unseen; copy-last
    for an unseen env). Similarity is the mean of the TF-IDF cosines of the actions (name +
    canonical JSON arguments, or the text) and of the previous observations. Ties go to the
    earliest train step."""

    name = "nearest-neighbour"

    def __init__(self, train: Sequence[Episode]) -> None:
        self.retriever = Retriever([r for episode in train for r in recorded_steps(episode)])
        self._copy = CopyLast()

    @classmethod
    def fit(cls, train: Sequence[Episode]) -> NearestNeighbour:
        return cls(train)

    def predict_steps(self, refs: Sequence[StepRef]) -> list[Prediction]:
        return [self.predict_step(episode, index) for episode, index in refs]

    def predict_step(self, episode: Episode, index: int) -> Prediction:
        query = recorded_step(episode, index)
        found = self.retriever.nearest_calls(episode.env, query.action, query.previous)
        hits = [f for f in found if f is not None]
        if not hits or len(hits) < len(found):  # an unseen env, or a call-less action
            return self._copy.predict_step(episode, index)
        neighbour = hits[0][0]
        # the neighbour's state change; `[]` when the neighbour has no states
        patch = (neighbour.patch or []) if query.patch is not None else None
        step = episode.steps[index]
        if not isinstance(step.action, ToolCallsAction):
            observation = copy.deepcopy(neighbour.observation)
            return _prediction(observation, copy.deepcopy(patch))  # a copy: callers may edit
        results = []
        for call, (recorded, position) in zip(step.action.calls, hits, strict=True):
            result = _result_of(recorded.action, recorded.observation, position)
            results.append(_as_call(result or ToolResult("", "{}", {}), call))
        return _prediction(ToolResultsObservation(results), copy.deepcopy(patch))


# ---------------------------------------------------------------------------- prompted LLM


class PromptedLLM(ModelPredictor):
    """A chat model as the simulator: `TextWorldModel(engine, budget, generation, chat=True)`
    predicting from the chat rendering of the serialization, retried when unreadable.

    With `demos` (a NearestNeighbour over train episodes), each prompt shows the most
    similar train step and its real outcome as the serialization's example block (one-shot,
    the way Simia prompts its simulator), within `example_tokens` more prompt tokens."""

    def __init__(
        self,
        engine: Engine | ChatEngine,
        budget: Budget | None = None,
        generation: GenerationConfig | None = None,
        *,
        demos: NearestNeighbour | None = None,
        example_tokens: int = 256,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        budget = budget or Budget()
        memory = None
        if demos is not None:
            budget, memory = replace(budget, example=example_tokens), demos.retriever
        model = TextWorldModel(engine, budget, generation, chat=True, memory=memory)
        super().__init__(model, name="prompted-llm", batch_size=batch_size, progress=progress)

    @classmethod
    def smollm2(
        cls, max_new_tokens: int = 128, max_retries: int = 0, demos: NearestNeighbour | None = None
    ) -> PromptedLLM:
        """SmolLM2-135M-Instruct, offline on the transformers engine: a 768-token prompt plus
        a 256-token example. No retries by default: on CPU each costs a full generation, and
        a 135M model that missed the format once rarely finds it when resampled."""
        from simworld.worldmodel.ar import load_smollm2_gguf

        model, tokenizer = load_smollm2_gguf()
        engine = load_engine(
            "transformers", model=model, tokenizer=tokenizer, max_retries=max_retries
        )
        # A target never holds a blank line; a small model that rambles on is cut there.
        generation = GenerationConfig(max_new_tokens=max_new_tokens, stop=("\n\n",))
        return cls(engine, Budget(total=768), generation, demos=demos)

    @classmethod
    def openai(
        cls,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_new_tokens: int = 256,
        demos: NearestNeighbour | None = None,
    ) -> PromptedLLM:
        """Any OpenAI-compatible endpoint; its key (if any) is read from `api_key_env`."""
        engine = load_engine("openai", base_url=base_url, model=model, api_key_env=api_key_env)
        generation = GenerationConfig(max_new_tokens=max_new_tokens, stop=("\n\n",))
        return cls(engine, Budget(), generation, demos=demos)


def make_baselines(
    names: Sequence[str], train: Sequence[Episode], llm: str | None
) -> list[Predictor]:
    """The baselines `names` (of BASELINES), in order. "nearest-neighbour" is fit on `train`;
    "prompted-llm" needs `llm`: "smollm2", or an endpoint as "http(s)://HOST/v1#MODEL"."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        bad, known = ", ".join(map(repr, unknown)), ", ".join(BASELINES)
        raise ValueError(f"unknown baseline(s) {bad}; choose from {known}")
    neighbours = NearestNeighbour.fit(train) if set(names) - {"copy-last"} else None
    out: list[Predictor] = []
    for name in names:
        if name == "copy-last":
            out.append(CopyLast())
        elif name == "nearest-neighbour":
            assert neighbours is not None
            out.append(neighbours)
        else:
            out.append(prompted_llm(llm, demos=neighbours))
    return out


def prompted_llm(llm: str | None, demos: NearestNeighbour | None = None) -> PromptedLLM:
    """A prompted LLM from its spec: "smollm2", or an endpoint as "http(s)://HOST/v1#MODEL";
    `demos` gives it one solved train example per prompt."""
    if llm == "smollm2":
        return PromptedLLM.smollm2(demos=demos)
    url, _, model = (llm or "").partition("#")
    if not (url.startswith(("http://", "https://")) and model):
        raise ValueError(
            f"the prompted-llm baseline needs llm='smollm2' or 'http(s)://HOST/v1#MODEL', "
            f"got {llm!r}"
        )
    return PromptedLLM.openai(url, model, demos=demos)


__all__ = [
    "BASELINES",
    "CopyLast",
    "NearestNeighbour",
    "PromptedLLM",
    "make_baselines",
    "prompted_llm",
]
