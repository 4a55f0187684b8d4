"""What an episode will do, before the backend runs it: planned calls and the initial config.

    calls = ground_truth_calls(s)
    plan = Plan("ground_truth", calls, s.initial_config)

A ground-truth plan is the entry's calls in order; an off-policy plan (see `offpolicy`) is
the same list with calls inserted, and sometimes a changed initial config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from simworld.data.envs.bfcl.backend import bind, tool_parameters
from simworld.data.envs.bfcl.calls import format_call, parse_call
from simworld.data.envs.bfcl.scenarios import Scenario
from simworld.data.records import JSON, ToolSpec

GROUND_TRUTH = "ground_truth"


@dataclass(frozen=True)
class PlannedCall:
    """One call to make: its turn, tool, named arguments, BFCL call string, and policy."""

    turn: int
    name: str
    arguments: dict[str, JSON]
    call: str
    policy: str = GROUND_TRUTH


@dataclass(frozen=True)
class Plan:
    """An episode's calls and the config its backend starts from."""

    policy: str  # "ground_truth" or "off_policy:<kind>"
    calls: list[PlannedCall]
    config: Mapping[str, JSON]


@dataclass(frozen=True)
class PlanContext:
    """What an off-policy planner may look at."""

    scenario: Scenario
    calls: list[PlannedCall]  # the ground truth
    tools: dict[str, ToolSpec]  # by name, every tool of the involved classes
    pool: Mapping[str, Sequence[dict[str, JSON]]]  # ground-truth arguments per tool
    state: dict[str, JSON]  # the state before the first call

    def tool_class(self, name: str) -> str:
        owner: str = self.tools[name].annotations["bfcl_class"]
        return owner


def ground_truth_calls(scenario: Scenario) -> list[PlannedCall]:
    """The entry's ground truth, positional arguments named after the method's parameters."""
    parameters = tool_parameters(scenario.involved_classes)
    planned = []
    for turn, calls in enumerate(scenario.ground_truth):
        for text in calls:
            parsed = parse_call(text)
            planned.append(PlannedCall(turn, parsed.name, bind(parsed, parameters), text))
    return planned


def off_policy_call(kind: str, turn: int, name: str, arguments: dict[str, JSON]) -> PlannedCall:
    """A call no ground truth made, labelled `off_policy:<kind>`."""
    return PlannedCall(turn, name, arguments, format_call(name, arguments), f"off_policy:{kind}")


def inserted(
    calls: Sequence[PlannedCall], insertions: Sequence[tuple[int, PlannedCall]]
) -> list[PlannedCall]:
    """`calls` with each (index, call) of `insertions` placed before position `index`
    (`len(calls)`: at the end); calls for one index keep their order in `insertions`."""
    before: dict[int, list[PlannedCall]] = {}
    for index, call in insertions:
        if not 0 <= index <= len(calls):
            raise IndexError(f"cannot insert at {index} into {len(calls)} calls")
        before.setdefault(index, []).append(call)
    out: list[PlannedCall] = []
    for index in range(len(calls) + 1):
        out.extend(before.get(index, []))
        if index < len(calls):
            out.append(calls[index])
    return out


def retimed(call: PlannedCall, turn: int, kind: str) -> PlannedCall:
    """A copy of a ground-truth call made at another turn, as an off-policy call."""
    return replace(call, turn=turn, policy=f"off_policy:{kind}")


__all__ = [
    "GROUND_TRUTH",
    "Plan",
    "PlanContext",
    "PlannedCall",
    "ground_truth_calls",
    "inserted",
    "off_policy_call",
    "retimed",
]
