"""The `datascience` simulated env: tables as tasks, the operation vocabulary as tools, and a
real backend (pandas and scikit-learn) that rebuilds a table from its JSON state and whose
cost estimates let the router run cheap operations for real and simulate dear ones.

    from simworld.simulators.envs.datascience import DataScienceReal, datascience_env
    from simworld.simulators.router import Router, RouterConfig
    env = datascience_env()
    task = env.task_for("make_classification-50000x20-s0")
    env.real.cost(task.initial_state, action)         # seconds, estimated
    router = Router(env, model, RouterConfig(max_real_cost=1.0, use_cache=False))
    # impute / encode / scale … on 50,000 rows run for real; train_cv is predicted

Tasks: the recorder's DEFAULT_TABLES plus BIG_TABLES (generated tables of 100,000 and
200,000 rows), each with its untouched table's state. A task's state is built when it is
first asked for (building a big table and its profile takes a second), except that a
router, which lists every task's tools, builds them all.

The real backend (`DataScienceReal`) rebuilds the table a state describes by replaying
its pipeline on its source (`data.envs.datascience.replay`), keeping the frames of the most
recent pipeline prefixes (`keep`, default 16): a state one operation beyond a kept one
costs that one operation. It runs each call of an action in order, exactly as the
recorder does (so a routed step reads exactly like a recorded one), and answers with the
results and the RFC 6902 patch from the state before to the state after. A state that
does not replay (a predicted state the model got wrong, say) raises ValueError.

Cost (`cost`): the sum over the action's calls of `datascience_costs.estimate` on the
state's profile, in seconds. Measured factors make train_cv with an ensemble on 50,000
rows cost tens of seconds and every other operation well under a second, so a router
threshold of about one second sends exactly the expensive training to the model.

Decisions:
- No responder: every answer needs the table (even an error such as an unknown column is
  the executor's to give, in its words).
- `check`: no reward and no termination (the step limit, MAX_STEPS, ends an episode); a
  pipeline search ranks train_cv results itself.
- The error style is DefaultStyle, {"error": "..."}, as the executor's own errors read.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from simworld.data.datascience_costs import estimate
from simworld.data.datascience_ops import TOOLS
from simworld.data.datascience_tables import build_table, source_for, task_id_for
from simworld.data.envs.datascience import (
    DEFAULT_TABLES,
    RULES,
    apply_call,
    initial_state,
    instruction,
    result_text,
)
from simworld.data.records import (
    JSON,
    Action,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.simulators.env import Answer, SimEnv, SimTask, no_reward
from simworld.simulators.validation import DefaultStyle
from simworld.worldmodel.patch import diff

if TYPE_CHECKING:
    import pandas as pd

MAX_STEPS = 30
KEEP = 16
BIG_TABLES = (
    "make_classification-100000x20-s0",
    "make_classification-200000x20-s0",
    "make_regression-100000x20-s0",
)
TABLES = (*DEFAULT_TABLES, *BIG_TABLES)


class DataScienceReal:
    """pandas + scikit-learn behind the simulated env; see the module docstring."""

    def __init__(self, keep: int = KEEP) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1 (frames kept), got {keep}")
        self.keep = keep
        self._frames: OrderedDict[str, pd.DataFrame] = OrderedDict()
        self._lock = threading.Lock()

    def execute(self, state: JSON, action: Action) -> Answer:
        """Run the action's calls in order on the table `state` describes."""
        if not isinstance(action, ToolCallsAction):
            raise ValueError(f"the datascience env takes tool calls, not a {action.kind} action")
        frame = self.frame(state)
        current = state
        results = []
        for call in action.calls:
            if call.arguments is None:
                raise ValueError(f"call {call.id!r} ({call.name}) has no JSON-object arguments")
            applied = apply_call(frame, current, call.name, call.arguments)
            text = result_text(applied.result)
            results.append(ToolResult(call.id, text, applied.result, applied.is_error))
            if applied.state is not current:
                self._remember(applied.state, applied.frame)
            frame, current = applied.frame, applied.state
        return Answer(ToolResultsObservation(results), diff(state, current))

    def cost(self, state: JSON, action: Action) -> float:
        """Estimated seconds: the sum of each call's estimate on the state's profile."""
        if not isinstance(action, ToolCallsAction) or not isinstance(state, dict):
            return 0.0
        profile = state.get("profile")
        if not isinstance(profile, dict):
            return 0.0
        return sum(estimate(profile, c.name, c.arguments) for c in action.calls)

    def frame(self, state: JSON) -> pd.DataFrame:
        """The table `state` describes (not a copy: operations never modify their input)."""
        if not isinstance(state, dict) or not isinstance(state.get("pipeline"), list):
            raise ValueError("a datascience state is {'source', 'pipeline', 'profile'}")
        source, pipeline = state["source"], state["pipeline"]
        with self._lock:
            for cut in range(len(pipeline), -1, -1):
                found = self._frames.get(_key(source, pipeline[:cut]))
                if found is not None:
                    self._frames.move_to_end(_key(source, pipeline[:cut]))
                    break
            else:
                cut, found = 0, None
        if found is None:
            found = build_table(source)
            self._remember({"source": source, "pipeline": []}, found)
        if cut < len(pipeline):
            found = _replay_from(found, source, pipeline, cut)
            self._remember(state, found)
        return found

    def _remember(self, state: dict[str, JSON], frame: pd.DataFrame) -> None:
        with self._lock:
            key = _key(state["source"], state["pipeline"])
            self._frames[key] = frame
            self._frames.move_to_end(key)
            while len(self._frames) > self.keep:
                self._frames.popitem(last=False)


def _replay_from(
    frame: pd.DataFrame, source: dict[str, JSON], pipeline: list[JSON], start: int
) -> pd.DataFrame:
    """`frame` (the table after pipeline[:start]) carried through the rest of `pipeline`."""
    state: dict[str, JSON] = {"source": source, "pipeline": pipeline[:start], "profile": {}}
    for index in range(start, len(pipeline)):
        entry = pipeline[index]
        if not isinstance(entry, dict) or set(entry) != {"op", "args"}:
            raise ValueError(f"pipeline[{index}] must be {{'op', 'args'}}, got {entry!r}")
        applied = apply_call(frame, state, str(entry["op"]), entry["args"])
        if applied.is_error:
            raise ValueError(f"pipeline[{index}] does not replay: {applied.result['error']}")
        frame, state = applied.frame, applied.state
    return frame


def _key(source: JSON, pipeline: list[JSON]) -> str:
    return json.dumps([source, pipeline], sort_keys=True)


class _Tasks(Mapping[str, SimTask]):
    """The env's tasks in TABLES order, each built when first asked for."""

    def __init__(self, ids: tuple[str, ...]) -> None:
        self.ids = ids
        self._built: dict[str, SimTask] = {}
        self._lock = threading.Lock()

    def __getitem__(self, task_id: str) -> SimTask:
        if task_id not in self.ids:
            raise KeyError(task_id)
        with self._lock:
            if task_id not in self._built:
                source = source_for(task_id)
                self._built[task_id] = SimTask(
                    id=task_id,
                    instruction=instruction(source),
                    initial_state=initial_state(source, build_table(source)),
                    tools=TOOLS,
                )
            return self._built[task_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)


@functools.cache
def datascience_env() -> SimEnv:
    """The datascience SimEnv (tasks built lazily; see the module docstring)."""
    assert all(task_id_for(source_for(t)) == t for t in TABLES)
    return SimEnv(
        name="datascience",
        tasks=_Tasks(TABLES),
        action_kind="tool_calls",
        rules=RULES,
        max_steps=MAX_STEPS,
        check=no_reward,
        real=DataScienceReal(),
        error_style=DefaultStyle(),
    )


__all__ = ["BIG_TABLES", "MAX_STEPS", "TABLES", "DataScienceReal", "datascience_env"]
