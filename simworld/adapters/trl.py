"""TRL's `GRPOTrainer(environment_factory=...)` over a running simworld server: a class per
env whose methods are the env's tools (read against trl 1.16.0; TRL is not a simworld
dependency, and this module does not import it).

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from simworld.adapters.trl import environment_factory

    Counter = environment_factory("http://127.0.0.1:8000", "mock")
    env = Counter()                                  # what TRL does, once per rollout slot
    env.reset(task_id="count-0")                     # -> "Bring the counter's total to 10 ..."
    env.add(n=3)                                     # -> '{"total": 3}' (a step on the server)
    env.get_reward()                                 # -> 0.0, the episode's reward so far

    rows = {"prompt": [[{"role": "user", "content": ""}]] * 64, "seed": list(range(64))}
    trainer = GRPOTrainer(model="Qwen/Qwen3-0.6B", train_dataset=Dataset.from_dict(rows),
                          environment_factory=Counter, args=GRPOConfig(...))

What TRL takes (trl/trainer/grpo_trainer.py): it lists the environment's tools on the
CLASS with `inspect.getmembers(type(env), inspect.isfunction)`; every public function but
`reset` and `get_reward` is a tool, rendered for the model by transformers'
`get_json_schema` (from the signature, the type hints and a Google-style docstring) and
called as `method(**arguments)`; what it returns becomes the tool message's content.
`reset(**row)` gets the dataset row's columns and returns text appended to the last user
message; `get_reward()` scores the finished rollout. Instances are pooled and reused.

So each tool of the env becomes a real method of a class built here: its `__signature__`,
`__annotations__` and docstring come from the tool's JSON Schema (required parameters
first, optional ones defaulting to the schema's `default`, else None), so
`get_json_schema(Counter.add)` gives back the tool's schema. Types: string str, integer
int, number float, boolean bool, null None, array list[items], object dict (dict[str, V]
with a schema in additionalProperties), enum Literal[...], anyOf/oneOf/type lists unions,
no type Any. A method forwards exactly the arguments it was given (positional ones mapped
by the signature) as one tool call; argument checks are the server's, which answers a
missing or malformed argument with the error the real API gives, as a counted step.

Each instance owns one episode at a time: `reset` deletes its previous episode and starts
one for the row's `task_id`, else its `seed` (other columns are ignored), and returns the
task's instruction (and, for text envs, the first observation after a blank line). The
class's tools are those of one task (`task_id`, else the env's first); a reset into a task
with another tool set raises (build one class per tool set and give TRL a dict of them).
A text env (frozenlake) gets one tool, `act(action: str)`. `get_reward()` is the sum of
the episode's step rewards. A tool called after the episode ended raises RuntimeError,
which TRL hands to the model as `{"error": ...}`. `with instance:` deletes the episode on
exit; an instance TRL leaves behind keeps its episode until its next reset or the
server's idle limit.
"""

from __future__ import annotations

import functools
import inspect
import keyword
import operator
from collections.abc import Callable, Mapping
from types import GenericAlias, TracebackType
from typing import Any, ClassVar, Literal

from simworld.adapters.client import DEFAULT_TIMEOUT, SimworldClient, Started, Stepped, tool_call

RESERVED = ("reset", "get_reward")  # TRL's own methods; names starting "_" are never tools
ACT_TOOL = {  # the one tool of a text env's class
    "name": "act",
    "description": "Take one action in the text environment and return what it shows next.",
    "parameters": {
        "type": "object",
        "properties": {"action": {"type": "string", "description": "The action, as text."}},
        "required": ["action"],
    },
}
_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}


class SimworldTrlEnv:
    """The base of every class `environment_factory` builds: one episode per instance.
    Its only public methods are `reset` and `get_reward`; the subclasses add the tools."""

    _base_url: ClassVar[str]
    _env: ClassVar[str]
    _token: ClassVar[str | None] = None
    _timeout: ClassVar[float] = DEFAULT_TIMEOUT
    _tool_names: ClassVar[frozenset[str] | None] = None  # None: a text env

    def __init__(self) -> None:
        self._client = SimworldClient(self._base_url, token=self._token, timeout=self._timeout)
        self._episode: Started | None = None
        self._reward = 0.0
        self._steps = 0
        self._done = False

    def reset(self, **kwargs: Any) -> str:
        """Start a new episode (the row's `task_id`, else its `seed`); the task's text."""
        self._close_episode()
        self._episode = self._client.start(
            self._env,
            task_id=kwargs.get("task_id"),
            seed=kwargs.get("seed"),
            initial_state=kwargs.get("initial_state"),
        )
        self._reward, self._steps, self._done = 0.0, 0, False
        names = {tool["function"]["name"] for tool in self._episode.tools}
        if self._tool_names is not None and names != self._tool_names:
            task = self._episode.task_id
            self._close_episode()
            raise ValueError(
                f"task {task!r} has the tools {sorted(names)}, but {type(self).__name__} "
                f"was built with {sorted(self._tool_names)}: build one class per tool set "
                "(environment_factory(..., task_id=...)) and pass TRL a dict of them"
            )
        first = self._episode.text
        parts = [self._episode.instruction, *([] if first is None else [first])]
        return "\n\n".join(part for part in parts if part)

    def get_reward(self) -> float:
        """The sum of the episode's step rewards so far."""
        return self._reward

    @property
    def episode_id(self) -> str | None:
        return None if self._episode is None else self._episode.episode_id

    @property
    def done(self) -> bool:
        return self._done

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """One tool call as one step; the tool message's content (a text env's `act`
        sends its `action` as the step's text)."""
        episode = self._live_episode()
        if self._tool_names is None:
            action = arguments.get("action")
            if not isinstance(action, str) or set(arguments) != {"action"}:
                raise TypeError(f"act takes one argument, action (a string); got {arguments}")
            return self._record(self._client.step(episode, text=action))
        call = tool_call(name, arguments, f"call_{self._steps}_0")
        return self._record(self._client.step(episode, tool_calls=[call]))

    def _live_episode(self) -> str:
        if self._episode is None:
            raise RuntimeError("call reset() before calling a tool")
        if self._done:
            raise RuntimeError("the episode is over: no further tool calls are answered")
        return self._episode.episode_id

    def _record(self, stepped: Stepped) -> str:
        self._steps += 1
        self._reward += stepped.reward
        self._done = stepped.done
        return stepped.text

    def _close_episode(self) -> None:
        if self._episode is not None:
            self._client.close_episode(self._episode.episode_id, missing_ok=True)
            self._episode = None

    def __enter__(self) -> SimworldTrlEnv:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._close_episode()
        self._client.close()


def environment_factory(
    base_url: str,
    env: str,
    *,
    task_id: str | None = None,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    name: str | None = None,
) -> type[SimworldTrlEnv]:
    """The class TRL takes as `environment_factory` for `env` on the server at `base_url`:
    its tools are those of task `task_id` (None: the env's first task), read by starting
    (and deleting) one episode."""
    with SimworldClient(base_url, token=token, timeout=timeout) as client:
        probe = client.start(env, task_id=task_id)
        client.close_episode(probe.episode_id)
    tools = probe.tools if probe.action_kind == "tool_calls" else None
    return tool_env_class(
        tools, base_url=base_url, env=env, token=token, timeout=timeout, name=name
    )


def tool_env_class(
    tools: list[dict[str, Any]] | None,
    *,
    base_url: str,
    env: str,
    token: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    name: str | None = None,
) -> type[SimworldTrlEnv]:
    """The class for OpenAI function `tools` (None: a text env, with one tool `act`),
    without asking the server; `environment_factory` reads the tools from it."""
    class_name = name or "Simworld" + "".join(
        p.capitalize() for p in env.replace("-", "_").split("_")
    )
    namespace: dict[str, Any] = {
        "_base_url": base_url,
        "_env": env,
        "_token": token,
        "_timeout": timeout,
        "__module__": __name__,
        "__doc__": f"simworld env {env!r} served at {base_url}, for TRL's environment_factory.",
    }
    if tools is None:
        namespace["_tool_names"] = None
        namespace["act"] = tool_method(ACT_TOOL, class_name)
    else:
        functions = [tool["function"] for tool in tools]
        namespace["_tool_names"] = frozenset(f["name"] for f in functions)
        for function in functions:
            namespace[function["name"]] = tool_method(function, class_name)
    return type(class_name, (SimworldTrlEnv,), namespace)


def tool_method(function: Mapping[str, Any], owner: str = "SimworldTrlEnv") -> Callable[..., str]:
    """A method for one OpenAI function object `{name, description, parameters}`."""
    name = str(function["name"])
    if name in RESERVED or name.startswith("_"):
        raise ValueError(
            f"tool {name!r} cannot be a TRL environment method: TRL reserves reset and "
            "get_reward, and never exposes names that start with '_'"
        )
    schema = function.get("parameters") or {}
    parameters = _parameters(name, schema)
    names = [p.name for p in parameters]

    def method(self: SimworldTrlEnv, *args: Any, **kwargs: Any) -> str:
        if len(args) > len(names):
            raise TypeError(f"{name}() takes {len(names)} arguments, got {len(args)}")
        return self._call_tool(name, {**dict(zip(names, args, strict=False)), **kwargs})

    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__name__ = name
    method.__qualname__ = f"{owner}.{name}"
    method.__doc__ = _docstring(function.get("description") or "", name, schema)
    method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [self_parameter, *parameters], return_annotation=str
    )
    method.__annotations__ = {**{p.name: p.annotation for p in parameters}, "return": str}
    return method


def _parameters(tool: str, schema: Mapping[str, Any]) -> list[inspect.Parameter]:
    """The keyword parameters of `schema`'s properties: required first, in schema order."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    bad = [p for p in properties if not p.isidentifier() or keyword.iskeyword(p)]
    if bad:
        raise ValueError(
            f"tool {tool!r} has parameters that are not Python identifiers ({bad}); TRL "
            "calls tools with keyword arguments, so it cannot take this tool"
        )
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    first = [
        inspect.Parameter(p, kind, annotation=python_type(properties[p]))
        for p in properties
        if p in required
    ]
    rest = [
        inspect.Parameter(
            p, kind, default=properties[p].get("default"), annotation=python_type(properties[p])
        )
        for p in properties
        if p not in required
    ]
    return first + rest


def python_type(schema: Any) -> Any:
    """The type hint for a JSON Schema (see the module docstring for the mapping)."""
    if not isinstance(schema, Mapping):
        return Any
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(_is_scalar(v) for v in enum):
        return Literal[tuple(enum)]
    choices = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(choices, list) and choices:
        return _union([python_type(choice) for choice in choices])
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return _union([python_type({**schema, "type": k}) for k in kind])
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array":
        items = schema.get("items")
        if isinstance(items, Mapping) and items:
            return GenericAlias(list, (python_type(items),))  # list[<items' type>]
        return list
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping) and values:
            return GenericAlias(dict, (str, python_type(values)))  # dict[str, <values' type>]
        return dict
    return Any


def _union(types: list[Any]) -> Any:
    unique = list(dict.fromkeys(types))
    return functools.reduce(operator.or_, unique) if Any not in unique else Any


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _docstring(description: str, tool: str, schema: Mapping[str, Any]) -> str:
    """A Google-style docstring: the description, then an Args line per property."""
    lines = [description.strip() or f"Call the {tool} tool."]
    properties: Mapping[str, Any] = schema.get("properties") or {}
    if properties:
        lines += ["", "Args:"]
        for name, prop in properties.items():
            text = ""
            if isinstance(prop, Mapping):
                text = str(prop.get("description") or prop.get("title") or "").strip()
            text = (text or f"The {name} argument.").replace("\n", "\n        ")
            lines.append(f"    {name}: {text}")
    return "\n".join(lines)


__all__ = [
    "ACT_TOOL",
    "RESERVED",
    "SimworldTrlEnv",
    "environment_factory",
    "python_type",
    "tool_env_class",
    "tool_method",
]
