"""The real BFCL multi-turn backends, live: instantiate, call, normalise, capture state.

    backend = Backend(["GorillaFileSystem"], initial_config, long_context=False)
    outcome = backend.execute("cd", {"folder": "document"})
    outcome.text, outcome.structured, outcome.is_error, backend.state()

Instances are built as BFCL's `execute_multi_turn_func_call` builds them: the class from
`CLASS_FILE_PATH_MAPPING`, then `_load_scenario(deepcopy(config), long_context=...)` except
for the stateless MathAPI. Each instance is then deep-copied once, so nothing it holds
aliases the module-level long-context tables (TravelAPI's extension credit cards would
otherwise carry balance changes from one episode into the next).

Results are normalised exactly as BFCL does: a `str` stays, a `dict` becomes `json.dumps`
(or `str` when that fails), anything else `str`, and an exception becomes
"Error during execution: <message>". `is_error` is true when the call raised, returned a
dict with an "error" key, or returned a list made only of such dicts or "Error..." strings
(TradingBot and TicketAPI wrap some errors in a list).

Clock: `TravelAPI.verify_traveler_information` computes an age from `datetime.today()`.
During every call that module's `datetime` is swapped for one frozen at 2024-09-01 10:30,
TradingBot's own `CURRENT_TIME`, so a birth date near the 18-year line gets the same answer
on every day. The other clock reads are harmless: GorillaFileSystem stamps a private
`_last_modified` that no tool reads, and TradingBot's transaction timestamps come from its
seeded RNG mapped through the local time zone over 2024-09-01/02, a window in which no zone
of the tz database changes its UTC offset. Every RNG in the backends is seeded from the
scenario (`random_seed`), so replays are deterministic.

Hash order: TravelAPI's invalid-travel-class error and TicketAPI's invalid-update-fields
error print a `set` of strings, whose order depends on PYTHONHASHSEED; their items are
sorted before the result is normalised (BFCL's ground truth never reaches either).
"""

from __future__ import annotations

import copy
import datetime
import functools
import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    STATELESS_CLASSES,
)
from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import travel_booking

from simworld.data.envs.bfcl.calls import ParsedCall
from simworld.data.envs.bfcl.state import capture_state
from simworld.data.records import JSON

FROZEN_NOW = datetime.datetime(2024, 9, 1, 10, 30)  # = trading_bot.CURRENT_TIME
# BFCL refuses these names before it evaluates a call (multi_turn_utils).
_REFUSED = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
_ERROR_PREFIX = "Error during execution: "
# Two error messages print a set of strings, in an order that follows PYTHONHASHSEED; their
# items are sorted so that a recording is the same in every process.
_SET_MESSAGES = (
    re.compile(r"^(Invalid travel class\. Must be one of \{)(.*)(\})$"),  # TravelAPI.book_flight
    re.compile(r"^(Invalid fields for update: )(.*)()$"),  # TicketAPI.edit_ticket
)


@dataclass(frozen=True)
class CallOutcome:
    """What one call returned: BFCL's result string, its JSON parse, the error flag."""

    text: str
    structured: JSON
    is_error: bool


class Backend:
    """Live instances of a scenario's involved classes; public methods are the tools."""

    def __init__(
        self, classes: Sequence[str], config: Mapping[str, Any], long_context: bool
    ) -> None:
        self._attach({name: _instantiate(name, config, long_context) for name in classes})

    @classmethod
    def from_instances(cls, instances: Mapping[str, object]) -> Backend:
        """A backend over instances built elsewhere ({ClassName: instance}, in the
        scenario's class order), such as a state restored mid-episode; they are used as
        they are, not copied."""
        backend = cls.__new__(cls)
        backend._attach(dict(instances))
        return backend

    def _attach(self, instances: dict[str, object]) -> None:
        self.instances = instances
        self.tools: dict[str, Callable[..., Any]] = {}
        for instance in self.instances.values():
            for name, method in inspect.getmembers(instance, inspect.ismethod):
                if not name.startswith("_"):
                    self.tools[name] = method  # a later class wins a clash, as in BFCL

    def state(self) -> dict[str, JSON]:
        """The current state, {ClassName: {...}}; see `state.capture_state`."""
        state: dict[str, JSON] = capture_state(self.instances)
        return state

    def execute(self, name: str, arguments: Mapping[str, JSON]) -> CallOutcome:
        """Call tool `name` with keyword `arguments` and normalise the result as BFCL does."""
        if name in _REFUSED:
            return _failure(f"Function call {name} is not allowed.")
        method = self.tools.get(name)
        if method is None:
            return _failure(f"name '{name}' is not defined")
        try:
            with frozen_clock():
                result = method(**copy.deepcopy(dict(arguments)))
        except Exception as exc:  # BFCL reports any exception as the call's result
            return _failure(str(exc))
        text = normalise(_hash_order_free(result))
        return CallOutcome(text, parse_json(text), is_error_result(result))


@functools.cache
def backend_class(name: str) -> type:
    """The backend class called `name` ("GorillaFileSystem", ...)."""
    cls: type = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
    return cls


def tool_parameters(classes: Sequence[str]) -> dict[str, list[str]]:
    """Each tool's parameter names in signature order, for the tools of `classes`."""
    parameters = {}
    for class_name in classes:
        for name, function in inspect.getmembers(backend_class(class_name), inspect.isfunction):
            if not name.startswith("_"):
                parameters[name] = list(inspect.signature(function).parameters)[1:]  # no self
    return parameters


def bind(call: ParsedCall, parameters: Mapping[str, Sequence[str]]) -> dict[str, JSON]:
    """The call's arguments by name: positional ones take the tool's parameter names."""
    arguments: dict[str, JSON] = dict(call.kwargs)
    if not call.args:
        return arguments
    if call.name not in parameters:
        raise ValueError(f"cannot name the positional arguments of unknown tool {call.name}")
    names = parameters[call.name]
    if len(call.args) > len(names):
        raise ValueError(f"{call.name} takes {len(names)} arguments, got {len(call.args)}")
    positional = dict(zip(names, call.args, strict=False))
    if positional.keys() & arguments.keys():
        raise ValueError(f"{call.name} got an argument both by position and by name")
    return positional | arguments


def _instantiate(name: str, config: Mapping[str, Any], long_context: bool) -> object:
    instance = backend_class(name)()
    if name not in STATELESS_CLASSES:
        instance._load_scenario(copy.deepcopy(config.get(name, {})), long_context=long_context)
    return copy.deepcopy(instance)


def _hash_order_free(result: Any) -> Any:
    """`result` with the items of a printed set sorted (see _SET_MESSAGES)."""
    if not (isinstance(result, dict) and isinstance(result.get("error"), str)):
        return result
    message = result["error"]
    for pattern in _SET_MESSAGES:
        message = pattern.sub(lambda m: m[1] + ", ".join(sorted(m[2].split(", "))) + m[3], message)
    return {**result, "error": message}


def _failure(message: str) -> CallOutcome:
    return CallOutcome(_ERROR_PREFIX + message, None, True)


def normalise(result: Any) -> str:
    """BFCL's result string: str as is, dict as JSON (str if that fails), else str()."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def parse_json(text: str) -> JSON:
    """The JSON value `text` holds, or None when it is not JSON (NaN/Infinity are not)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return None


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def is_error_result(result: Any) -> bool:
    """Whether a returned value reports an error (an exception is one by definition)."""
    if isinstance(result, dict):
        return "error" in result
    if isinstance(result, list) and result:
        return all(_is_error_item(item) for item in result)
    return False


def _is_error_item(item: Any) -> bool:
    if isinstance(item, dict):
        return "error" in item
    return isinstance(item, str) and item.startswith("Error")


class _FrozenDatetime(datetime.datetime):
    """`datetime` whose today()/now() are FROZEN_NOW (in `tz` when one is given)."""

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> Self:
        frozen = cls.combine(FROZEN_NOW.date(), FROZEN_NOW.time())
        return frozen if tz is None else frozen.replace(tzinfo=tz)

    @classmethod
    def today(cls) -> Self:
        return cls.now()


@contextmanager
def frozen_clock() -> Iterator[None]:
    """Run backend code with TravelAPI's clock at FROZEN_NOW (not thread-safe)."""
    saved = travel_booking.datetime
    travel_booking.datetime = _FrozenDatetime
    try:
        yield
    finally:
        travel_booking.datetime = saved


__all__ = [
    "FROZEN_NOW",
    "Backend",
    "CallOutcome",
    "backend_class",
    "bind",
    "frozen_clock",
    "is_error_result",
    "normalise",
    "parse_json",
    "tool_parameters",
]
