"""BFCL's real Python backends (bfcl-eval) behind a live simulated session: a RealBackend
that runs a step's calls on the API class instances rebuilt from the session's state.

    from simworld.simulators.envs.bfcl_real import BfclReal
    real = BfclReal()
    answer = real.execute(step.state, step.action)   # a ToolCallsAction
    answer.observation                                # BFCL's result text, JSON, error flag
    answer.patch                                      # RFC 6902, state before -> after
    real.cost(step.state, step.action)                # seconds (see REAL_SECONDS_PER_CALL)

The recorder's own code does the work (`simworld.data.envs.bfcl`): `Backend.execute` runs
a call and normalises its result as BFCL does (frozen clock, refused names, error flag),
and `Backend.state` captures the state after; so a step answered here reads exactly like a
recorded one. Only the way back, from a JSON state to live instances, is new here.

Where the instances come from, first that applies:
1. a scenario's initial state (any category of the pinned bfcl-eval data): instances built
   from the scenario's config, as the recorder builds them (first, so that a session reset
   to a task starts from BFCL's own instances, even where a session already came back to
   that same state with its RNG moved on);
2. a state this backend produced itself (the `remember` most recent after-states): the
   live instances, copied, hidden fields and RNG position included;
3. otherwise `restore(state)`: each class is made and loaded by BFCL's own
   `_load_scenario` from the state's public fields, which are then set exactly as the
   state holds them (GorillaFileSystem's tree and `_cwd`, TwitterAPI's tweets and
   TradingBot's orders by integer id, MessageAPI's ids as a set). The rebuilt instances
   must capture back to the very same JSON, or a ValueError says which field differs.

What a JSON state does not hold (capture_state keeps public fields only), a restored
instance has to guess:
- every RNG restarts from the class's default seed (no scenario sets `random_seed`), so
  ids, tokens, timestamps and noise drawn after a restore are well-formed but not the
  values the original session would have drawn (the env's volatile fields; TravelAPI's
  card and booking ids also land in the state as dict keys, which no volatile field
  masks);
- VehicleControlAPI's brake forces: `_brakePedalForce` is 1000.0 when the pedal shows
  "pressed" (a full press, the one that lets the engine start; the ground truth always
  presses fully) and 0.0 otherwise; `_parkingBrakeForce` / `_slopeAngle` take the
  defaults, so displayCarStatus("parkingBrake") may show other numbers.
(TravelAPI's private `_flight_cost_lookup` needs no guess: book_flight refills it.) Sessions
that run every step here (router `real_tools`, or shadow mode while the model keeps to the
real state) meet cases 1 and 2 only, and replay BFCL exactly. Two histories that reach the
same JSON state with different hidden fields share one remembered entry (the latest).

Cost: `cost()` is REAL_SECONDS_PER_CALL seconds per call (wall-clock seconds, the unit of
the router's `max_real_cost`), measured for a whole `execute` (rebuild, run, capture, diff)
over the 632 bundled BFCL test steps (one call each) on a shared 2-core machine: median
0.4-0.6 ms, 90th percentile 0.9-1.5 ms; long-context states are the slow ones.
Importing this module does not import bfcl-eval; the first `execute` does (about 0.1 s)
and indexes the scenarios' initial states (about 0.4 s). Thread-safe: one lock around
`execute` (BFCL's frozen clock swaps a module global).
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from simworld.data.records import (
    JSON,
    Action,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.simulators.env import Answer
from simworld.worldmodel.patch import diff

if TYPE_CHECKING:
    from simworld.data.envs.bfcl.backend import Backend

REAL_SECONDS_PER_CALL = 2e-3  # the measured 90th percentile, rounded up (see above)
REMEMBER = 256  # after-states kept live by default
CWD = "_cwd"  # GorillaFileSystem's private current directory, as capture_state writes it
FULL_BRAKE = 1000.0  # VehicleControlAPI: the force of pressBrakePedal(1.0)
# Public fields whose JSON form BFCL's own loader turns back into the live form.
_LOADER_CONVERTS = {
    "GorillaFileSystem": ("root",),  # the tree of Directory / File objects
    "TwitterAPI": ("tweets",),  # keyed by integer id
    "TradingBot": ("orders",),  # keyed by integer id
}
_SETS = {"MessageAPI": ("generated_ids",)}  # a set, written as a sorted list


class BfclReal:
    """The real BFCL backends as a RealBackend; see the module docstring."""

    def __init__(self, remember: int = REMEMBER) -> None:
        if remember < 0:
            raise ValueError(f"remember must be >= 0 (0: rebuild every state), got {remember}")
        self.remember = remember
        self._live: OrderedDict[str, dict[str, object]] = OrderedDict()
        self._lock = threading.Lock()

    def execute(self, state: JSON, action: Action) -> Answer:
        """Run the action's calls in order on instances holding `state`."""
        from simworld.data.envs.bfcl.backend import Backend

        if not isinstance(action, ToolCallsAction):
            raise ValueError(f"the bfcl env takes tool calls, not a {action.kind} action")
        if not isinstance(state, dict):
            raise ValueError(f"a bfcl state is {{ClassName: {{...}}}}, got {type(state).__name__}")
        with self._lock:
            backend = Backend.from_instances(self._instances(state))
            results = [_run(backend, call) for call in action.calls]
            after = backend.state()
            self._keep(after, backend.instances)
        return Answer(ToolResultsObservation(results), diff(state, after))

    def cost(self, state: JSON, action: Action) -> float:
        """Seconds: REAL_SECONDS_PER_CALL per call."""
        calls = action.calls if isinstance(action, ToolCallsAction) else []
        return REAL_SECONDS_PER_CALL * len(calls)

    def _instances(self, state: dict[str, JSON]) -> dict[str, object]:
        key = _key(state)
        initial = _initial_states().get(key)
        if initial is not None:
            return copy.deepcopy(initial)
        live = self._live.get(key)
        if live is not None:
            self._live.move_to_end(key)
            return copy.deepcopy(live)
        return restore(state)

    def _keep(self, state: dict[str, JSON], instances: dict[str, object]) -> None:
        if self.remember == 0:
            return
        key = _key(state)
        self._live[key] = copy.deepcopy(instances)
        self._live.move_to_end(key)
        while len(self._live) > self.remember:
            self._live.popitem(last=False)


def restore(state: Mapping[str, JSON]) -> dict[str, object]:
    """Live instances holding `state` ({ClassName: class state}, as capture_state writes
    it), in the state's class order; ValueError when a class or field is unknown, missing,
    or does not survive the round trip."""
    from simworld.data.envs.bfcl.state import capture_state

    instances = {name: restore_instance(name, saved) for name, saved in state.items()}
    captured = capture_state(instances)
    for name, saved in state.items():
        if _key(captured[name]) != _key(saved):
            field = _first_difference(captured[name], saved)
            raise ValueError(f"{name}.{field} does not restore to the value the state holds")
    return instances


def restore_instance(name: str, saved: JSON) -> object:
    """One backend instance holding `saved`, its class state (see `restore`)."""
    from bfcl_eval.constants.executable_backend_config import (
        CLASS_FILE_PATH_MAPPING,
        STATELESS_CLASSES,
    )

    from simworld.data.envs.bfcl.backend import backend_class

    if name not in CLASS_FILE_PATH_MAPPING:
        raise ValueError(f"the state names {name!r}, not a BFCL class")
    if not isinstance(saved, dict):
        raise ValueError(f"the state of {name} is a {type(saved).__name__}, not an object")
    cls = backend_class(name)
    instance: Any = cls()
    if name in STATELESS_CLASSES:
        if saved:
            raise ValueError(f"{name} is stateless, but its state holds {sorted(saved)}")
        return instance
    instance._load_scenario({}, long_context=False)  # the class's defaults: its fields
    _check_fields(name, saved, {key for key in vars(instance) if not key.startswith("_")})
    public = {key: value for key, value in saved.items() if not key.startswith("_")}
    try:
        instance._load_scenario(copy.deepcopy(public), long_context=False)
    # BFCL's loader reads the values without checking them: say which class they broke.
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the state of {name} does not load: {type(exc).__name__}: {exc}") from exc
    converted = _LOADER_CONVERTS.get(name, ())
    for key, value in public.items():
        if key not in converted:
            setattr(instance, key, _live_value(name, key, copy.deepcopy(value)))
    if name == "GorillaFileSystem":
        instance._current_dir = _directory(instance.root, saved[CWD])
    if name == "VehicleControlAPI":
        instance._brakePedalForce = FULL_BRAKE if saved["brakePedalStatus"] == "pressed" else 0.0
    return instance


def _check_fields(name: str, saved: dict[str, JSON], known: set[str]) -> None:
    """The class state holds exactly the class's public fields (plus `_cwd` for the FS)."""
    expected = known | ({CWD} if name == "GorillaFileSystem" else set())
    missing, unknown = sorted(expected - set(saved)), sorted(set(saved) - expected)
    if missing or unknown:
        raise ValueError(f"the state of {name} lacks {missing} and has unknown fields {unknown}")


def _live_value(name: str, key: str, value: JSON) -> object:
    if key in _SETS.get(name, ()) and isinstance(value, list):
        return set(value)
    return value


def _directory(root: Any, path: JSON) -> Any:
    """The directory at absolute `path` ("/workspace/document") under `root`."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"GorillaFileSystem._cwd must be an absolute path, got {path!r}")
    first, *names = path[1:].split("/")
    node = root
    if first != root.name:
        raise ValueError(f"GorillaFileSystem._cwd {path!r} is not under the root {root.name!r}")
    for part in names:
        child = node.contents.get(part)
        if child is None or not hasattr(child, "contents"):
            raise ValueError(f"GorillaFileSystem._cwd {path!r}: no directory {part!r}")
        node = child
    return node


def _run(backend: Backend, call: ToolCall) -> ToolResult:
    if call.arguments is None:
        raise ValueError(
            f"call {call.id!r} ({call.name}) has arguments that are not a JSON object "
            f"({call.raw_arguments[:60]!r}); the real backend runs parsed calls only"
        )
    outcome = backend.execute(call.name, call.arguments)
    return ToolResult(call.id, outcome.text, outcome.structured, outcome.is_error)


@functools.cache
def _initial_states() -> dict[str, dict[str, object]]:
    """Every scenario's initial instances (all categories), keyed by their state's JSON."""
    from simworld.data.envs.bfcl.backend import Backend
    from simworld.data.envs.bfcl.env import CATEGORIES
    from simworld.data.envs.bfcl.scenarios import load_scenarios

    index: dict[str, dict[str, object]] = {}
    for category in CATEGORIES:
        for scenario in load_scenarios(category):
            backend = Backend(
                scenario.involved_classes, scenario.initial_config, scenario.long_context
            )
            index.setdefault(_key(backend.state()), backend.instances)
    return index


def _key(value: JSON) -> str:
    """JSON text with sorted keys: a state's index key, and how values are compared (1 and
    1.0 differ, as they do for the patches)."""
    return json.dumps(value, sort_keys=True)


def _first_difference(got: JSON, want: JSON) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for key in sorted(set(got) | set(want)):
            if key not in got or key not in want or _key(got[key]) != _key(want[key]):
                return str(key)
    return "?"


__all__ = ["REAL_SECONDS_PER_CALL", "REMEMBER", "BfclReal", "restore", "restore_instance"]
