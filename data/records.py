"""The core records every layer speaks: ToolSpec, Action, Observation, Step, Episode.

Plain dataclasses with an exact JSON round trip (`to_json` / `from_json`). Variants are
tagged unions on a `kind` field, never bags of optional fields. Decoding validates as it
goes and raises `RecordError` naming the field path and the rule that failed, e.g.

    >>> from_json(Episode, {"episode_id": 3})
    Traceback (most recent call last):
    ...
    simworld.data.records.RecordError: episode_id: expected a string, got int (3)

`None` on a state means "not known", not "empty".
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

SCHEMA_VERSION = 1

JSON = Any  # a JSON value: dict / list / str / int / float / bool / None


class RecordError(ValueError):
    """A record broke the schema: `path` names the field, `reason` the rule."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


# ---------------------------------------------------------------------------- tools


@dataclass
class ToolSpec:
    """A tool as an agent sees it: a superset of an MCP tool and an OpenAI function.

    `original` keeps the tool JSON exactly as it was received (key order included), so a
    tool list can be replayed byte for byte; the other fields are the normalized view.
    """

    name: str
    description: str
    input_schema: dict[str, JSON]
    output_schema: dict[str, JSON] | None = None
    annotations: dict[str, JSON] = field(default_factory=dict)
    original: dict[str, JSON] = field(default_factory=dict)


# ---------------------------------------------------------------------------- actions


@dataclass
class ToolCall:
    """One call. `raw_arguments` is the argument string as received; `arguments` is its
    parse, or None when the string is not a JSON object (kept so it can be replayed)."""

    id: str
    name: str
    arguments: dict[str, JSON] | None
    raw_arguments: str


@dataclass
class ToolCallsAction:
    """An agent turn that calls tools. `content` is any text sent with the calls."""

    calls: list[ToolCall]
    content: str = ""
    kind: Literal["tool_calls"] = "tool_calls"


@dataclass
class TextAction:
    """A free-text action (text games: "open chest drawer", "LEFT")."""

    text: str
    kind: Literal["text"] = "text"


Action = ToolCallsAction | TextAction


# ---------------------------------------------------------------------------- observations


@dataclass
class ToolResult:
    """The result of one call: its text, the parsed JSON when there is one, and whether the
    environment reported an error."""

    call_id: str
    text: str
    structured: JSON = None
    is_error: bool = False


@dataclass
class ToolResultsObservation:
    """One result per call of the action, in call order."""

    results: list[ToolResult]
    kind: Literal["tool_results"] = "tool_results"


@dataclass
class TextObservation:
    text: str
    kind: Literal["text"] = "text"


Observation = ToolResultsObservation | TextObservation


# ---------------------------------------------------------------------------- episodes


@dataclass
class Message:
    """A conversational message that is not itself a transition: a system prompt, a user
    turn, assistant text without tool calls."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass
class Step:
    """One transition. `messages` are the conversation messages that came between the
    previous observation and this action (a new user turn, say), in order.

    Reward and termination live here only. `reward` is None when the source recorded none.
    """

    action: Action
    observation: Observation
    state: JSON = None
    next_state: JSON = None
    reward: float | None = None
    terminated: bool = False
    truncated: bool = False
    info: dict[str, JSON] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)


@dataclass
class Task:
    """What the agent was asked to do. `id` identifies the scenario (what splits key on);
    `apis` names the API groups the task involves (what `--exclude-api` filters on)."""

    id: str
    instruction: str = ""
    apis: list[str] = field(default_factory=list)


@dataclass
class Provenance:
    """Where an episode came from: `source` is a real env ("bfcl") or a dump format
    ("openai"); `version` pins it ("bfcl-eval==2026.3.23"); `origin` locates the exact
    record ("multi_turn_base_12", "dump.jsonl:7"); `policy` says who chose the actions."""

    source: str
    version: str = ""
    origin: str = ""
    policy: str = ""


@dataclass
class VolatileField:
    """A value a real env produces from a random generator or a clock. Metrics compare it
    by type and format (`pattern`, a regex over its JSON text), never by value. `key` is a
    field name matched at any depth of structured observations and states."""

    key: str
    kind: Literal["id", "token", "timestamp", "noise"]
    pattern: str = ""


@dataclass
class Outcome:
    """How the episode ended: `success` and `score` when the source knows them."""

    success: bool | None = None
    score: float | None = None
    detail: str = ""


@dataclass
class Episode:
    """One trajectory in one environment.

    `initial_observation` is what a reset showed the agent (text games); `final_messages`
    are the messages after the last step (a closing answer, say), so nothing is lost.
    """

    episode_id: str
    env: str
    task: Task
    steps: list[Step]
    tools: list[ToolSpec] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    initial_state: JSON = None
    initial_observation: Observation | None = None
    seed: int | None = None
    provenance: Provenance = field(default_factory=lambda: Provenance(source="unknown"))
    outcome: Outcome = field(default_factory=Outcome)
    volatile: list[VolatileField] = field(default_factory=list)
    final_messages: list[Message] = field(default_factory=list)


# ---------------------------------------------------------------------------- JSON codec

T = TypeVar("T")

_TAGGED: dict[object, dict[str, type]] = {
    Action: {"tool_calls": ToolCallsAction, "text": TextAction},
    Observation: {"tool_results": ToolResultsObservation, "text": TextObservation},
}


def to_json(record: Any) -> Any:
    """A record (or list/dict of records) as plain JSON-ready Python, fields in order."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_json(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, list):
        return [to_json(x) for x in record]
    if isinstance(record, dict):
        return {k: to_json(v) for k, v in record.items()}
    return record


def from_json(cls: type[T], obj: Any, path: str = "") -> T:
    """Decode `obj` into `cls`, validating every field; errors name the field path."""
    result: T = _decode(cls, obj, path)
    return result


def _type_name(obj: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(obj), type(obj).__name__
    )


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _join(path: str, name: str | int) -> str:
    if isinstance(name, int):
        return f"{path}[{name}]"
    return f"{path}.{name}" if path else name


def _decode(tp: Any, obj: Any, path: str) -> Any:
    if tp in _TAGGED:
        return _decode_tagged(_TAGGED[tp], obj, path)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, obj, path)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if obj is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _decode(inner[0], obj, path)
        for union, variants in _TAGGED.items():
            if set(get_args(union)) == set(inner):
                return _decode_tagged(variants, obj, path)
        raise TypeError(f"unsupported union {tp!r} at {path}")  # a bug in this module
    if origin is list:
        if not isinstance(obj, list):
            raise RecordError(path, f"expected an array, got {_type_name(obj)} ({_short(obj)})")
        (item,) = get_args(tp)
        return [_decode(item, x, _join(path, i)) for i, x in enumerate(obj)]
    if origin is dict:
        if not isinstance(obj, dict):
            raise RecordError(path, f"expected an object, got {_type_name(obj)} ({_short(obj)})")
        for key, value in obj.items():
            _check_json(value, _join(path, key))
        return obj
    if origin is Literal:
        allowed = get_args(tp)
        if obj not in allowed:
            raise RecordError(path, f"expected one of {list(allowed)}, got {_short(obj)}")
        return obj
    if tp is Any:
        _check_json(obj, path)
        return obj
    return _decode_scalar(tp, obj, path)


def _decode_scalar(tp: Any, obj: Any, path: str) -> Any:
    if tp is bool:
        ok = isinstance(obj, bool)
    elif tp is int:
        ok = isinstance(obj, int) and not isinstance(obj, bool)
    elif tp is float:
        ok = isinstance(obj, int | float) and not isinstance(obj, bool)
        obj = float(obj) if ok else obj
    elif tp is str:
        ok = isinstance(obj, str)
    else:  # pragma: no cover - a programming error in this module
        raise TypeError(f"unsupported field type {tp!r} at {path}")
    if not ok:
        names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
        raise RecordError(path, f"expected {names[tp]}, got {_type_name(obj)} ({_short(obj)})")
    return obj


def _check_json(obj: Any, path: str) -> None:
    if obj is None or isinstance(obj, str | bool | int):
        return
    if isinstance(obj, float):
        if obj != obj or obj in (float("inf"), float("-inf")):
            raise RecordError(path, f"{obj} is not a JSON number")
        return
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            _check_json(x, _join(path, i))
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise RecordError(path, f"object key {key!r} is not a string")
            _check_json(value, _join(path, key))
        return
    raise RecordError(path, f"{_type_name(obj)} is not a JSON value")


def _decode_tagged(variants: dict[str, type], obj: Any, path: str) -> Any:
    if not isinstance(obj, dict):
        raise RecordError(path, f"expected an object, got {_type_name(obj)} ({_short(obj)})")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in variants:
        raise RecordError(_join(path, "kind"), f"expected one of {list(variants)}, got {kind!r}")
    return _decode_dataclass(variants[kind], obj, path)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls, globalns=globals())
    return _HINTS[cls]


def _decode_dataclass(cls: type, obj: Any, path: str) -> Any:
    if not isinstance(obj, dict):
        raise RecordError(path, f"expected an object, got {_type_name(obj)} ({_short(obj)})")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in obj if k not in fields]
    if unknown:
        raise RecordError(_join(path, unknown[0]), f"unknown field for {cls.__name__}")
    kwargs = {}
    for name, f in fields.items():
        if name not in obj:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(_join(path, name), f"missing required field of {cls.__name__}")
            continue
        kwargs[name] = _decode(hints[name], obj[name], _join(path, name))
    return cls(**kwargs)


__all__ = [
    "JSON",
    "SCHEMA_VERSION",
    "Action",
    "Episode",
    "Message",
    "Observation",
    "Outcome",
    "Provenance",
    "RecordError",
    "Step",
    "Task",
    "TextAction",
    "TextObservation",
    "ToolCall",
    "ToolCallsAction",
    "ToolResult",
    "ToolResultsObservation",
    "ToolSpec",
    "VolatileField",
    "from_json",
    "to_json",
]
