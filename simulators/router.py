"""Who answers a step: deterministic rules, then the exact cache, then the world model; a
real backend only where it is switched on, and beside the model in shadow mode.

    router = Router(env, load_world_model("default"), RouterConfig(shadow=True))
    routed = router.answer(episode_so_far, state, action, seed=7)
    routed.answer.observation, routed.source, routed.retries, routed.problems
    router.stats_dict()          # {"rules": 0, "cache": 3, "model": 12, "retries": 1, ...}

Order, first that answers wins:
1. `rules`: the env's responder (exact, no model).
2. `real`: env.real, off by default. It answers a step when every call of the action names
   a tool in `real_tools`, or when `max_real_cost > 0` and `env.real.cost(state, action) <=
   max_real_cost` (cost-aware routing, DSWorld-style: cheap real calls run for real, dear
   ones are simulated). A text action names no tool: only the cost threshold routes it.
   Real answers are not cached (the backend is asked each time it is routed to).
3. `cache`: the exact cache (see cache.py), keyed on the env, the state and the canonical
   action; where the env tracks no state (state None) the history's actions and
   observations stand for it. Only model answers without problems are stored.
4. `model`: the world model, on `context_for_action(history, state, action, model.budget)`
   with the call ids in the env's recorded form (`SimEnv.call_id_form`), greedy (the
   model's own generation config), then grounded where the env grounds model answers
   (`SimEnv.ground`, unless `RouterConfig(ground=False)`: search rebuilds each hit the
   model names from the corpus). A prediction with problems (text the parser cannot
   read, or a result that breaks its tool's `output_schema`; error results are exempt) is
   retried up to `output_retries` times with seeded sampling at temperature 0.7. When every try
   has problems the last prediction is kept and its problems are reported, never raised;
   if its observation is unreadable, every call gets an error result "the simulator could
   not produce a result" in the env's error style (a text env: that text), and no patch.

Shadow mode (`shadow=True`, env.real present): whoever answered, env.real.execute runs on
the same step and `Routed.shadow` records its answer and whether the two observations
match in eval's JSON-canonical form (`simworld.data.canonical`: results one by one, error
flags included, sorted keys, the env's volatile fields by type and format, a text that is
not JSON trimmed). Patches are not compared. A failing real
backend never fails the step: the failure is counted and reported in `problems`.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from simworld.data.canonical import canonical, parse
from simworld.data.envs.seeding import derive_seed
from simworld.data.output_schemas import schema_validator
from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    TextAction,
    TextObservation,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
)
from simworld.simulators.cache import CachedAnswer, ExactCache, cache_key, canonical_action
from simworld.simulators.env import Answer, SimEnv
from simworld.simulators.validation import Violation
from simworld.worldmodel.context import context_for_action
from simworld.worldmodel.engines.base import GenerationConfig
from simworld.worldmodel.patch import diff
from simworld.worldmodel.world_model import Prediction, WorldModel

Source = Literal["rules", "cache", "real", "model"]
UNREADABLE = "the simulator could not produce a result"


@dataclass(frozen=True)
class RouterConfig:
    """How steps are routed (see the module docstring for the exact rules)."""

    use_cache: bool = True
    real_tools: frozenset[str] = frozenset()  # tools the real backend answers
    max_real_cost: float = 0.0  # > 0: the real backend answers steps that cost at most this
    shadow: bool = False  # run the real backend beside every other answer and compare
    output_retries: int = 2  # extra model tries for a prediction with problems
    ground: bool = True  # apply the env's grounding (SimEnv.ground) to model answers

    def __post_init__(self) -> None:
        if isinstance(self.real_tools, str):
            raise TypeError("real_tools is a set of tool names: frozenset({'ls'}), not a string")
        object.__setattr__(self, "real_tools", frozenset(self.real_tools))
        if self.max_real_cost < 0:
            raise ValueError(f"max_real_cost must be >= 0 (0: off), got {self.max_real_cost}")
        if self.output_retries < 0:
            raise ValueError(f"output_retries must be >= 0, got {self.output_retries}")


@dataclass(frozen=True)
class ShadowRecord:
    """The real backend's answer to a step another source answered, and whether the two
    observations match as canonical JSON."""

    real: Answer
    json_canonical_match: bool


@dataclass(frozen=True)
class Routed:
    """A step's answer, who gave it, the model's extra tries, and what went wrong."""

    answer: Answer
    source: Source
    retries: int = 0
    problems: list[str] = field(default_factory=list)
    shadow: ShadowRecord | None = None


@dataclass
class RouterStats:
    """Counters since the router was made. `unreadable`: model answers whose last try still
    had problems; `retries`: extra model tries in all."""

    rules: int = 0
    cache: int = 0
    real: int = 0
    model: int = 0
    retries: int = 0
    unreadable: int = 0
    shadow_steps: int = 0
    shadow_matches: int = 0
    shadow_errors: int = 0

    def count(self, source: Source) -> None:
        """One more answer from `source`."""
        if source == "rules":
            self.rules += 1
        elif source == "cache":
            self.cache += 1
        elif source == "real":
            self.real += 1
        else:
            self.model += 1


class Router:
    """Answers steps of one env (see the module docstring). Thread-safe: sessions of one
    env may share a router; the model is asked outside any lock."""

    def __init__(
        self,
        env: SimEnv,
        model: WorldModel | None,
        config: RouterConfig | None = None,
        cache: ExactCache | None = None,
    ) -> None:
        self.env = env
        self.model = model
        self.config = config or RouterConfig()
        self.cache = (cache or ExactCache()) if self.config.use_cache else None
        if self.cache is not None:
            for episode in env.recorded:
                prefill(self.cache, env.name, episode)
        self.stats = RouterStats()
        self._lock = threading.Lock()
        wants_real = self.config.real_tools or self.config.max_real_cost > 0
        if wants_real and env.real is None:
            raise ValueError(
                f"env {env.name!r} has no real backend: leave real_tools and max_real_cost off"
            )
        known = {t.name for task in env.tasks.values() for t in task.tools}
        unknown = sorted(self.config.real_tools - known)
        if unknown:
            raise ValueError(f"real_tools names tools env {env.name!r} does not have: {unknown}")

    def answer(self, history: Episode, state: JSON, action: Action, seed: int) -> Routed:
        """The answer to `action` in `state` after `history.steps` (the episode so far)."""
        routed = self._route(history, state, action, seed)
        shadow, problems = None, list(routed.problems)
        if self.config.shadow and self.env.real is not None and routed.source != "real":
            shadow = self._shadow(state, action, routed.answer, problems)
        with self._lock:
            self.stats.count(routed.source)
            self.stats.retries += routed.retries
            self.stats.unreadable += routed.source == "model" and bool(routed.problems)
        return Routed(routed.answer, routed.source, routed.retries, problems, shadow)

    def stats_dict(self) -> dict[str, int]:
        """The counters as a flat dict, for export (metrics, logs)."""
        with self._lock:
            return asdict(self.stats)

    def _route(self, history: Episode, state: JSON, action: Action, seed: int) -> Routed:
        if self.env.responder is not None:
            exact = self.env.responder(copy.deepcopy(state), action)
            if exact is not None:
                return Routed(exact, "rules")
        if self.env.real is not None and self._routed_to_real(state, action):
            return Routed(self.env.real.execute(copy.deepcopy(state), action), "real")
        key = cache_key(self.env.name, _cache_basis(history, state), action)
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            return Routed(Answer(cached.observation_for(action), cached.patch_copy()), "cache")
        if self.model is None:
            raise ValueError(
                f"no rule, real backend or cached answer covers this {self.env.name!r} step "
                "and the router has no world model"
            )
        answer, retries, problems = self._ask_model(self.model, history, state, action, seed)
        if self.cache is not None and not problems:
            self.cache.put(key, CachedAnswer.of(answer.observation, answer.patch))
        return Routed(answer, "model", retries, problems)

    def _routed_to_real(self, state: JSON, action: Action) -> bool:
        assert self.env.real is not None
        tools = [c.name for c in action.calls] if isinstance(action, ToolCallsAction) else []
        if tools and all(name in self.config.real_tools for name in tools):
            return True
        limit = self.config.max_real_cost
        return limit > 0 and self.env.real.cost(state, action) <= limit

    def _ask_model(
        self, model: WorldModel, history: Episode, state: JSON, action: Action, seed: int
    ) -> tuple[Answer, int, list[str]]:
        asked = model_call_ids(action, len(history.steps), self.env.call_id_form)
        ctx = context_for_action(history, state, asked, model.budget)
        tools = {t.name: t for t in history.tools}
        (prediction,) = model.predict([ctx])
        prediction = self._grounded(_client_ids(prediction, action), action)
        problems = _problems(prediction, action, tools)
        retries = 0
        while problems and retries < self.config.output_retries:
            retries += 1
            cfg = _sampling(model, derive_seed("router-retry", seed, retries))
            (prediction,) = model.predict([ctx], cfg)
            prediction = self._grounded(_client_ids(prediction, action), action)
            problems = _problems(prediction, action, tools)
        if prediction.observation is None:
            return Answer(self._unreadable(action, tools)), retries, problems
        return Answer(prediction.observation, prediction.patch), retries, problems

    def _grounded(self, prediction: Prediction, action: Action) -> Prediction:
        """The prediction grounded by the env (`SimEnv.ground`): its observation rebuilt
        from the env's own data, the parser's problems replaced by what grounding could
        not place; as it is where the env has no grounding, it is off, or nothing could be
        placed."""
        if self.env.ground is None or not self.config.ground:
            return prediction
        grounded = self.env.ground(action, prediction.observation, prediction.text)
        if grounded is None:
            return prediction
        observation, problems = grounded
        return replace(prediction, observation=observation, problems=list(problems))

    def _unreadable(self, action: Action, tools: dict[str, ToolSpec]) -> Observation:
        if isinstance(action, TextAction):
            return TextObservation(UNREADABLE)
        violation = [Violation("unreadable", "", UNREADABLE)]
        results = []
        for call in action.calls:
            text = self.env.error_style(call, tools.get(call.name), violation, UNREADABLE)
            results.append(ToolResult(call.id, text, parse(text)[1], is_error=True))
        return ToolResultsObservation(results)

    def _shadow(
        self, state: JSON, action: Action, answer: Answer, problems: list[str]
    ) -> ShadowRecord | None:
        assert self.env.real is not None
        try:
            real = self.env.real.execute(copy.deepcopy(state), action)
        # Shadow mode only watches: whatever the real backend raises must not fail the step.
        except Exception as exc:
            with self._lock:
                self.stats.shadow_errors += 1
            problems.append(f"shadow: the real backend failed: {type(exc).__name__}: {exc}")
            return None
        volatile = self.env.volatile
        match = canonical_observation(real.observation, volatile) == canonical_observation(
            answer.observation, volatile, reference=False
        )
        with self._lock:
            self.stats.shadow_steps += 1
            self.stats.shadow_matches += match
        return ShadowRecord(real, match)


def canonical_observation(
    observation: Observation, volatile: Sequence[VolatileField] = (), reference: bool = True
) -> JSON:
    """An observation as compared in shadow mode: per result (is_error, canonical text), or
    the canonical text, in the one canonical form eval's JSON-canonical metric uses
    (`simworld.data.canonical`: sorted keys, volatile values by type and format)."""
    if isinstance(observation, TextObservation):
        return ["text", canonical(observation.text, volatile, reference=reference)]
    results = observation.results
    return [[r.is_error, canonical(r.text, volatile, reference=reference)] for r in results]


def prefill(cache: ExactCache, env: str, episode: Episode) -> int:
    """Put a real episode's answers in `cache`, each under the key the router looks its step
    up by (the env, the state before it or, where there is none, the history before it, the
    action); the patch is the state change when both states are known. Returns how many."""
    for index, step in enumerate(episode.steps):
        basis = _cache_basis(replace(episode, steps=episode.steps[:index]), step.state)
        patch = None
        if step.state is not None and step.next_state is not None:
            patch = diff(step.state, step.next_state)
        cache.put(cache_key(env, basis, step.action), CachedAnswer.of(step.observation, patch))
    return len(episode.steps)


def _cache_basis(history: Episode, state: JSON) -> JSON:
    """What the cache keys a step's situation on: the state, or where the env tracks none,
    the task and the steps so far (call ids left out)."""
    if state is not None:
        return state
    steps = [
        [canonical_action(s.action), canonical_observation(s.observation)] for s in history.steps
    ]
    return {"task": history.task.id, "steps": steps}


RETRY_TEMPERATURE = 0.7  # a retry should differ from the greedy answer, yet stay plausible


def _sampling(model: WorldModel, seed: int) -> GenerationConfig:
    """Seeded sampling for a retry (at RETRY_TEMPERATURE, as the engines' own validated
    retries do: at 1.0 a small model's draws are mostly noise), within the model's own
    decode bound when it has one."""
    # The WorldModel protocol has no generation config; TextWorldModel's is `generation`.
    own = getattr(model, "generation", None)
    t = RETRY_TEMPERATURE
    if isinstance(own, GenerationConfig):
        return GenerationConfig(
            own.max_new_tokens, do_sample=True, temperature=t, seed=seed, stop=own.stop
        )
    return GenerationConfig(do_sample=True, temperature=t, seed=seed)


def model_call_ids(action: Action, step: int, form: str) -> Action:
    """The action as the model is asked it: call ids rewritten to the form of the env's
    recorded data (`SimEnv.call_id_form`). Ids are opaque, but a small model copies the
    kind of id it was trained on far better than a client's own (`call_abc123`), or one of
    the right kind it rarely saw (BFCL numbers calls by turn: `call_12_0` at a session's
    13th step is out of its data); `_client_ids` maps back."""
    if not isinstance(action, ToolCallsAction):
        return action
    calls = [replace(c, id=form.format(step=step, index=i)) for i, c in enumerate(action.calls)]
    return replace(action, calls=calls)


def _client_ids(prediction: Prediction, action: Action) -> Prediction:
    """The prediction with its results' call ids put back to the client's, by position
    (the parser already matched results to the asked action's calls)."""
    observation = prediction.observation
    if not isinstance(observation, ToolResultsObservation) or not isinstance(
        action, ToolCallsAction
    ):
        return prediction
    results = [
        replace(r, call_id=action.calls[i].id) if i < len(action.calls) else r
        for i, r in enumerate(observation.results)
    ]
    return replace(prediction, observation=ToolResultsObservation(results))


def _problems(prediction: Prediction, action: Action, tools: dict[str, ToolSpec]) -> list[str]:
    """The parser's problems, then each non-error result that breaks its tool's output schema."""
    problems = list(prediction.problems)
    observation = prediction.observation
    if not isinstance(observation, ToolResultsObservation) or isinstance(action, TextAction):
        return problems
    for call, result in zip(action.calls, observation.results, strict=False):
        spec = tools.get(call.name)
        if result.is_error or spec is None or spec.output_schema is None:
            continue
        ok, value = parse(result.text)
        if not ok:
            problems.append(f"result of {call.id!r} ({call.name}) is not JSON")
            continue
        errors = sorted(schema_validator(spec.output_schema).iter_errors(value), key=str)
        problems.extend(
            f"result of {call.id!r} ({call.name}) breaks the output schema: {e.message}"
            for e in errors[:3]
        )
    return problems


__all__ = [
    "UNREADABLE",
    "Routed",
    "Router",
    "RouterConfig",
    "RouterStats",
    "ShadowRecord",
    "Source",
    "canonical_observation",
]
