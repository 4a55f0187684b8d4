"""The `mock` simulated env: a tiny counter for tests, with a responder and a real backend
that are both exact.

    from simworld.simulators.envs.mock import MockReal, mock_env
    env = mock_env()
    task = env.task_for("count-0")              # state {"total": 0}
    MockReal().execute({"total": 3}, action)    # add(n) and get() run exactly

Tools: `add(n)` (an integer n >= 1) adds n to the total and returns {"total": new total};
`get()` returns {"total": total}. The check gives reward 1.0 and terminates once the total
reaches 10 or more. The responder answers an action whose calls are all `get` from the
state; any action with an `add` is left to the model. MockReal costs 0.5 per `add` and 0.0
per `get`, so a router threshold can admit one tool and not the other. The error style is
DefaultStyle ({"error": "..."}); the step limit is 20.
"""

from __future__ import annotations

import functools
import json

from simworld.data.records import (
    JSON,
    Action,
    Observation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
)
from simworld.simulators.env import Answer, SimEnv, SimTask, StepCheck
from simworld.simulators.validation import DefaultStyle

TARGET = 10
MAX_STEPS = 20
COSTS = {"add": 0.5, "get": 0.0}
_TOTAL = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
TOOLS = (
    ToolSpec(
        name="add",
        description="Add n to the counter's total and return the new total.",
        input_schema={
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 1, "description": "how much"}},
            "required": ["n"],
            "additionalProperties": False,
        },
        output_schema=_TOTAL,
    ),
    ToolSpec(
        name="get",
        description="Return the counter's total.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        output_schema=_TOTAL,
    ),
)
RULES = (
    "A counter starts at 0. add(n) adds n (an integer of at least 1) and returns the new"
    ' total as {"total": N}; get() returns the total the same way.',
    f"The episode ends with reward 1 once the total reaches {TARGET} or more.",
)


def check(state: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
    """Reward 1.0 and terminated once the total reaches TARGET."""
    total = after.get("total") if isinstance(after, dict) else None
    done = isinstance(total, int) and total >= TARGET
    return StepCheck(reward=1.0 if done else 0.0, terminated=done)


def respond(state: JSON, action: Action) -> Answer | None:
    """`get` calls answered from the state; any action with another call is left alone."""
    if not isinstance(action, ToolCallsAction) or any(c.name != "get" for c in action.calls):
        return None
    return Answer(ToolResultsObservation([_result(c, state["total"]) for c in action.calls]), [])


class MockReal:
    """The counter itself: runs every call of an action in order."""

    def execute(self, state: JSON, action: Action) -> Answer:
        if not isinstance(action, ToolCallsAction):
            raise ValueError(f"the mock env takes tool calls, not a {action.kind} action")
        total: int = state["total"]
        results = []
        for call in action.calls:
            if call.name not in COSTS or (call.name == "add" and not _valid_add(call)):
                error = json.dumps({"error": f"invalid call of '{call.name}'"})
                results.append(ToolResult(call.id, error, json.loads(error), is_error=True))
                continue
            if call.name == "add":
                total += int((call.arguments or {})["n"])
            results.append(_result(call, total))
        patch: list[JSON] = [] if total == state["total"] else [_replace_total(total)]
        return Answer(ToolResultsObservation(results), patch)

    def cost(self, state: JSON, action: Action) -> float:
        if not isinstance(action, ToolCallsAction):
            return 0.0
        return sum(COSTS.get(call.name, 0.0) for call in action.calls)


@functools.cache
def mock_env() -> SimEnv:
    """The mock SimEnv: one task, "count-0", starting from {"total": 0}."""
    task = SimTask(
        id="count-0",
        instruction=f"Bring the counter's total to {TARGET} or more.",
        initial_state={"total": 0},
        tools=TOOLS,
    )
    return SimEnv(
        name="mock",
        tasks={task.id: task},
        action_kind="tool_calls",
        rules=RULES,
        max_steps=MAX_STEPS,
        check=check,
        responder=respond,
        real=MockReal(),
        error_style=DefaultStyle(),
    )


def _valid_add(call: ToolCall) -> bool:
    n = (call.arguments or {}).get("n")
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _result(call: ToolCall, total: int) -> ToolResult:
    return ToolResult(call.id, json.dumps({"total": total}), {"total": total})


def _replace_total(total: int) -> dict[str, JSON]:
    return {"op": "replace", "path": "/total", "value": total}


__all__ = [
    "COSTS",
    "MAX_STEPS",
    "RULES",
    "TARGET",
    "TOOLS",
    "MockReal",
    "check",
    "mock_env",
    "respond",
]
