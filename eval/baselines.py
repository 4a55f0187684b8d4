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
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from simworld.data.canonical import observation_text
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
from simworld.worldmodel.context import Budget, Context, build_context
from simworld.worldmodel.engines.base import ChatEngine, Engine, GenerationConfig, load_engine
from simworld.worldmodel.patch import Patch, diff
from simworld.worldmodel.render import format_target
from simworld.worldmodel.views import BudgetError
from simworld.worldmodel.world_model import Prediction, TextWorldModel

BASELINES = ("copy-last", "nearest-neighbour", "prompted-llm")


def _prediction(observation: Observation, patch: Patch | None) -> Prediction:
    return Prediction(observation, patch, format_target(observation, patch))


def _tracks_state(step: Step) -> bool:
    """Whether the step has a patch target (as `build_context` decides)."""
    return step.state is not None and step.next_state is not None


def _result_of(step: Step, position: int) -> ToolResult | None:
    """The result of the step's call at `position`: by call id, else by position."""
    if not isinstance(step.action, ToolCallsAction) or not isinstance(
        step.observation, ToolResultsObservation
    ):
        return None
    results = step.observation.results
    call_id = step.action.calls[position].id
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
                result = _result_of(step, position)
                if step.action.calls[position].name == call.name and result is not None:
                    return _as_call(result, call)
    previous = episode.steps[index - 1].observation if index else None
    if isinstance(previous, ToolResultsObservation) and previous.results:
        return _as_call(previous.results[0], call)
    return ToolResult(call.id, "{}", {}, False)


# ---------------------------------------------------------------------------- nearest neighbour

_TOKEN = re.compile(r"\w+")
ACTION_WEIGHT = 0.5  # similarity = w * cos(action) + (1 - w) * cos(previous observation)
_ANY_TOOL = "\x00any tool"  # the env-wide group of tool calls (unseen tool names)
_TEXT = "\x00text"  # the group of text actions


def _previous_text(episode: Episode, index: int) -> str:
    before = episode.steps[index - 1].observation if index else episode.initial_observation
    return observation_text(before) if before is not None else ""


def _call_text(call: ToolCall) -> str:
    arguments = call.raw_arguments if call.arguments is None else call.arguments
    return call.name + " " + json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _queries(action: Action) -> list[tuple[str, str]]:
    """(group, action text) per call, or one for a text action."""
    if isinstance(action, ToolCallsAction):
        return [(call.name, _call_text(call)) for call in action.calls]
    return [(_TEXT, action.text)]


def _bag(text: str) -> Counter[str]:
    return Counter(_TOKEN.findall(text.lower()))


@dataclass
class _Group:
    """The candidates that share an env and a tool name: global entry numbers (ascending)
    and, per token id, the rows holding it and their weights."""

    entries: list[int] = field(default_factory=list)
    postings: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = field(
        default_factory=dict
    )


class NearestNeighbour:
    """Retrieval from train steps: each call (or text action) of a query takes the result
    (or observation) of the most similar train call in the same env with the same tool name
    (the same env when the name is unseen; copy-last for an unseen env). Similarity is the
    mean of the TF-IDF cosines of the actions (name + canonical JSON arguments, or the text)
    and of the previous observations. Ties go to the earliest train step."""

    name = "nearest-neighbour"

    def __init__(self, train: Sequence[Episode]) -> None:
        # entry -> (episode, step index, call position or -1 for a text action)
        self._entries: list[tuple[Episode, int, int]] = []
        bags: list[tuple[Counter[str], Counter[str]]] = []
        keys: list[tuple[str, str]] = []
        for episode in train:
            for index, step in enumerate(episode.steps):
                context = _bag(_previous_text(episode, index))
                for position, (group, text) in enumerate(_queries(step.action)):
                    text_action = group == _TEXT
                    self._entries.append((episode, index, -1 if text_action else position))
                    bags.append((_bag(text), context))
                    keys.append((episode.env, group))
        self._vocab: dict[str, int] = {}
        df: Counter[int] = Counter()
        for action_bag, context_bag in bags:
            df.update(
                {self._id("a", t) for t in action_bag} | {self._id("o", t) for t in context_bag}
            )
        n = len(bags)
        self._idf = {t: math.log((1 + n) / (1 + d)) + 1 for t, d in df.items()}
        self._unseen_idf = math.log(1 + n) + 1
        self._groups = self._build_groups(bags, keys)
        self._copy = CopyLast()

    @classmethod
    def fit(cls, train: Sequence[Episode]) -> NearestNeighbour:
        return cls(train)

    def _id(self, part: str, token: str) -> int:
        return self._vocab.setdefault(part + ":" + token, len(self._vocab))

    def _vector(self, action_bag: Counter[str], context_bag: Counter[str]) -> dict[int, float]:
        """Sublinear TF-IDF per part, each part scaled to norm sqrt(its weight)."""
        vector: dict[int, float] = {}
        for part, bag, weight in (
            ("a", action_bag, ACTION_WEIGHT),
            ("o", context_bag, 1 - ACTION_WEIGHT),
        ):
            raw: dict[int, float] = {}
            unseen = 0.0
            for token, tf in bag.items():
                key = self._vocab.get(part + ":" + token)
                w = (1 + math.log(tf)) * (self._idf[key] if key is not None else self._unseen_idf)
                if key is None:
                    unseen += w * w  # counts in the norm, matches nothing
                else:
                    raw[key] = w
            norm = math.sqrt(sum(w * w for w in raw.values()) + unseen)
            for key, w in raw.items():
                vector[key] = w / norm * math.sqrt(weight)
        return vector

    def _build_groups(
        self, bags: list[tuple[Counter[str], Counter[str]]], keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], _Group]:
        lists: dict[tuple[str, str], dict[int, tuple[list[int], list[float]]]] = {}
        groups: dict[tuple[str, str], _Group] = defaultdict(_Group)
        for entry, ((action_bag, context_bag), (env, name)) in enumerate(
            zip(bags, keys, strict=True)
        ):
            vector = self._vector(action_bag, context_bag)
            for key in {(env, name), (env, _TEXT if name == _TEXT else _ANY_TOOL)}:
                group = groups[key]
                row = len(group.entries)
                group.entries.append(entry)
                postings = lists.setdefault(key, {})
                for token, weight in vector.items():
                    rows, weights = postings.setdefault(token, ([], []))
                    rows.append(row)
                    weights.append(weight)
        for key, postings in lists.items():
            groups[key].postings = {
                t: (np.array(r, dtype=np.int64), np.array(w, dtype=np.float64))
                for t, (r, w) in postings.items()
            }
        return dict(groups)

    def _nearest(self, env: str, group: str, action_text: str, previous: str) -> int | None:
        """The train entry most similar to the query, or None when the env is unseen."""
        fallback = _TEXT if group == _TEXT else _ANY_TOOL
        candidates = self._groups.get((env, group)) or self._groups.get((env, fallback))
        if candidates is None:
            return None
        scores = np.zeros(len(candidates.entries))  # (candidates,)
        for token, weight in self._vector(_bag(action_text), _bag(previous)).items():
            hit = candidates.postings.get(token)
            if hit is not None:
                scores[hit[0]] += weight * hit[1]
        return candidates.entries[int(np.argmax(scores))]  # argmax: the first of ties

    def predict_steps(self, refs: Sequence[StepRef]) -> list[Prediction]:
        return [self.predict_step(episode, index) for episode, index in refs]

    def neighbour(self, episode: Episode, index: int) -> StepRef | None:
        """The train step most similar to this one (by its first call), or None."""
        queries = _queries(episode.steps[index].action)
        if not queries:
            return None
        group, text = queries[0]
        entry = self._nearest(episode.env, group, text, _previous_text(episode, index))
        return None if entry is None else self._entries[entry][:2]

    def predict_step(self, episode: Episode, index: int) -> Prediction:
        step = episode.steps[index]
        previous = _previous_text(episode, index)
        found = [self._nearest(episode.env, g, t, previous) for g, t in _queries(step.action)]
        hits = [f for f in found if f is not None]
        if not hits or len(hits) < len(found):  # an unseen env, or a call-less action
            return self._copy.predict_step(episode, index)
        patch = self._patch(hits[0]) if _tracks_state(step) else None
        if not isinstance(step.action, ToolCallsAction):
            neighbour, neighbour_index, _ = self._entries[hits[0]]
            observation = copy.deepcopy(neighbour.steps[neighbour_index].observation)
            return _prediction(observation, patch)  # a copy: callers may edit theirs
        results = []
        for call, entry in zip(step.action.calls, hits, strict=True):
            neighbour, neighbour_index, position = self._entries[entry]
            result = _result_of(neighbour.steps[neighbour_index], position)
            results.append(_as_call(result or ToolResult("", "{}", {}), call))
        return _prediction(ToolResultsObservation(results), patch)

    def _patch(self, entry: int) -> Patch:
        """The neighbour's state change; `[]` when the neighbour has no states."""
        neighbour, neighbour_index, _ = self._entries[entry]
        step = neighbour.steps[neighbour_index]
        return diff(step.state, step.next_state) if _tracks_state(step) else []


# ---------------------------------------------------------------------------- prompted LLM


class PromptedLLM(ModelPredictor):
    """A chat model as the simulator: `TextWorldModel(engine, budget, generation, chat=True)`
    predicting from the chat rendering of the serialization, retried when unreadable.

    With `demos` (a NearestNeighbour over train episodes), each prompt first shows the most
    similar train step and its real outcome as a solved example (one-shot, the way Simia
    prompts its simulator); the example's context gets `demo_budget` of the prompt."""

    def __init__(
        self,
        engine: Engine | ChatEngine,
        budget: Budget | None = None,
        generation: GenerationConfig | None = None,
        *,
        demos: NearestNeighbour | None = None,
        demo_budget: Budget | None = None,
        batch_size: int = 32,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        model = TextWorldModel(engine, budget, generation, chat=True)
        super().__init__(model, name="prompted-llm", batch_size=batch_size, progress=progress)
        self.demos = demos
        self.demo_budget = demo_budget or Budget(total=512)

    def context(self, episode: Episode, index: int) -> Context:
        ctx = super().context(episode, index)
        found = self.demos.neighbour(episode, index) if self.demos is not None else None
        if found is None:
            return ctx
        try:
            demo = build_context(*found, self.demo_budget)
        except BudgetError:
            return ctx
        return replace(ctx, demonstrations=(demo,))

    @classmethod
    def smollm2(
        cls, max_new_tokens: int = 128, max_retries: int = 0, demos: NearestNeighbour | None = None
    ) -> PromptedLLM:
        """SmolLM2-135M-Instruct, offline on the transformers engine: a 768-token prompt plus
        a 512-token example. No retries by default: on CPU each costs a full generation, and
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
