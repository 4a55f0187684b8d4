"""Plans replayed against the real BFCL backends, one Episode per plan.

    recorder = Recorder(categories=("base",), off_policy=1, off_policy_calls=3)
    keys = recorder.keys()                   # every episode the options define, in order
    episode = recorder.episode(keys[0], seed=0)

An episode is one BFCL entry of one category. Each call is one Step: a ToolCallsAction with
one ToolCall (id "call_<turn>_<n>", n counting the turn's calls, arguments by name, and
`raw_arguments` their `json.dumps`), a ToolResultsObservation with one ToolResult (BFCL's
result string, its JSON parse, the error flag), `state` / `next_state` as
{ClassName: {...}}, and `info` = {"turn", "call" (the BFCL call string), "policy"}. The user
messages of a turn go on the turn's first step; a turn without calls hands them on to the
next step, or to `final_messages` after the last one. Rewards are None; the last step is
terminated.

Episode ids: "bfcl-multi_turn_base_12" (ground truth) and "bfcl-multi_turn_base_12-offpolicy-0"
(variant 0). The task id "bfcl-12" is shared by the categories, which tell one scenario four
ways, so a split by task id keeps them together. Variant `v` of an entry draws from
`derive_seed("bfcl", seed, entry_id, v)`, so an episode is the same whichever subset of
episodes is asked for.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from simworld.data.envs.bfcl.backend import Backend
from simworld.data.envs.bfcl.env import BFCL_VERSION
from simworld.data.envs.bfcl.offpolicy import plan_variant
from simworld.data.envs.bfcl.plan import (
    GROUND_TRUTH,
    Plan,
    PlanContext,
    PlannedCall,
    ground_truth_calls,
)
from simworld.data.envs.bfcl.scenarios import Scenario, load_scenarios
from simworld.data.envs.bfcl.schemas import tool_specs
from simworld.data.envs.bfcl.volatile import volatile_fields
from simworld.data.envs.seeding import derive_seed
from simworld.data.records import (
    JSON,
    Episode,
    Message,
    Provenance,
    Step,
    Task,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)

SOURCE_VERSION = f"bfcl-eval=={BFCL_VERSION}"


@dataclass(frozen=True)
class EpisodeKey:
    """Which episode: a category, an entry's position in it, and the variant (None = GT)."""

    category: str
    position: int
    variant: int | None


class Recorder:
    """Episodes of the chosen categories: each entry's ground truth, then its variants."""

    def __init__(self, categories: Sequence[str], off_policy: int, off_policy_calls: int) -> None:
        self.off_policy = off_policy
        self.off_policy_calls = off_policy_calls
        self.scenarios = {category: load_scenarios(category) for category in categories}
        self._calls: dict[str, list[PlannedCall]] = {}
        self._pools: dict[str, dict[str, list[dict[str, JSON]]]] = {}

    def keys(self) -> list[EpisodeKey]:
        variants: list[int | None] = [None, *range(self.off_policy)]
        return [
            EpisodeKey(category, position, variant)
            for category, scenarios in self.scenarios.items()
            for position in range(len(scenarios))
            for variant in variants
        ]

    def episode(self, key: EpisodeKey, seed: int) -> Episode:
        scenario = self.scenarios[key.category][key.position]
        calls = self._ground_truth(scenario)
        if key.variant is None:
            plan = Plan(GROUND_TRUTH, calls, scenario.initial_config)
            return replay(scenario, plan, seed, f"bfcl-{scenario.entry_id}")
        entry = scenario.entry_id
        context = PlanContext(
            scenario=scenario,
            calls=calls,
            tools={spec.name: spec for spec in tool_specs(scenario.involved_classes)},
            pool=self._pool(key.category),
            state=Backend(
                scenario.involved_classes, scenario.initial_config, scenario.long_context
            ).state(),
        )
        offset = random.Random(derive_seed("bfcl", seed, entry, "kind")).randrange(1 << 16)
        rng = random.Random(derive_seed("bfcl", seed, entry, key.variant))
        variant_plan = plan_variant(context, key.variant, rng, offset, self.off_policy_calls)
        if variant_plan is None:
            raise ValueError(f"{entry} admits no off-policy call")
        return replay(scenario, variant_plan, seed, f"bfcl-{entry}-offpolicy-{key.variant}")

    def _ground_truth(self, scenario: Scenario) -> list[PlannedCall]:
        if scenario.entry_id not in self._calls:
            self._calls[scenario.entry_id] = ground_truth_calls(scenario)
        return self._calls[scenario.entry_id]

    def _pool(self, category: str) -> dict[str, list[dict[str, JSON]]]:
        """Distinct ground-truth argument sets per tool, over the whole category."""
        if category not in self._pools:
            pool: dict[str, list[dict[str, JSON]]] = {}
            seen: set[tuple[str, str]] = set()
            for scenario in self.scenarios[category]:
                for call in self._ground_truth(scenario):
                    mark = (call.name, json.dumps(call.arguments, sort_keys=True))
                    if mark not in seen:
                        seen.add(mark)
                        pool.setdefault(call.name, []).append(call.arguments)
            self._pools[category] = pool
        return self._pools[category]


def replay(scenario: Scenario, plan: Plan, seed: int, episode_id: str) -> Episode:
    """Run `plan` against a fresh backend and record what happened."""
    backend = Backend(scenario.involved_classes, plan.config, scenario.long_context)
    initial_state = backend.state()
    by_turn: dict[int, list[PlannedCall]] = {}
    for call in plan.calls:
        by_turn.setdefault(call.turn, []).append(call)
    steps: list[Step] = []
    pending: list[Message] = []
    for turn, messages in enumerate(scenario.turns):
        pending.extend(copy.deepcopy(messages))
        for n, call in enumerate(by_turn.pop(turn, [])):
            steps.append(_step(backend, call, f"call_{turn}_{n}", pending))
            pending = []
    if by_turn:
        raise ValueError(f"{scenario.entry_id}: calls planned for turns {sorted(by_turn)}")
    if steps:
        steps[-1].terminated = True
    held_out = {name: turn for turn, names in scenario.missed_function.items() for name in names}
    return Episode(
        episode_id=episode_id,
        env="bfcl",
        task=Task(
            id=f"bfcl-{scenario.index}",
            instruction="\n\n".join(m.content for turn in scenario.turns for m in turn),
            apis=list(scenario.involved_classes),
        ),
        steps=steps,
        tools=tool_specs(scenario.involved_classes, held_out),
        initial_state=initial_state,
        seed=seed,
        provenance=Provenance("bfcl", SOURCE_VERSION, scenario.entry_id, plan.policy),
        volatile=volatile_fields(scenario.involved_classes),
        final_messages=pending,
    )


def _step(backend: Backend, call: PlannedCall, call_id: str, messages: list[Message]) -> Step:
    state = backend.state()
    outcome = backend.execute(call.name, call.arguments)
    arguments = copy.deepcopy(call.arguments)
    action = ToolCall(call_id, call.name, arguments, json.dumps(arguments))
    result = ToolResult(call_id, outcome.text, outcome.structured, outcome.is_error)
    return Step(
        action=ToolCallsAction([action]),
        observation=ToolResultsObservation([result]),
        state=state,
        next_state=backend.state(),
        info={"turn": call.turn, "call": call.call, "policy": call.policy},
        messages=messages,
    )


__all__ = ["SOURCE_VERSION", "EpisodeKey", "Recorder", "replay"]
