"""Captured envs: a real MCP server (or an HTTP tool API) kept as files, not code, and built
into a SimEnv. `simworld capture` and `simworld proxy` write them; `simworld serve --env DIR`
serves them.

    DIR/env.json      {"format": "simworld-captured-env", "schema_version": 1, "name": "notes",
                       "captured_at": "...Z", "source": {"transport": "stdio", ...},
                       "initialize": {protocolVersion, capabilities, serverInfo, instructions?},
                       "rules": [], "max_steps": 1000}
    DIR/tools.json    the tool list exactly as the server sent it: a JSON array whose items are
                      the bytes of each tool as received (key order, spacing, escapes)
    DIR/tasks.json    [{"id": "default", "instruction": "", "initial_state": null}, ...]
    DIR/recordings/   *.jsonl: real transitions recorded through `simworld proxy` (simworld
                      transitions dumps): training data, and answers the env knows exactly

    env = load_captured_env("envs/notes")       # a CapturedEnv (a SimEnv)
    env.initialize["serverInfo"], env.tasks["default"].tools[0].original, env.recorded

Decisions:
- Names. An env is served under `name` (URL-safe: letters, digits, `_.-`); a directory given
  by path is found by its env.json, and by name in the folders of SIMWORLD_ENV_PATH
  (os.pathsep-separated, each holding env folders named like their env).
- State. An MCP server's state is hidden: every task's initial state is null unless
  tasks.json says otherwise, so the router keys its cache on the history (the task and the
  steps so far) and the model sees the history, not a state.
- Recordings. `recorded` holds the episodes of every recordings/*.jsonl whose env is this
  env and whose task is one of its tasks (others are skipped and logged, as is every record
  that cannot be read, with file:line and the reason).
- Invalid calls (checked against the tools' inputSchema before anything answers) get a
  tool-level error in the text FastMCP-style servers write: `Error executing tool NAME: ...`.
- Rules: env.json's `rules`; capture fills them with the server's `instructions`, if any.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from simworld.data.formats import read_episodes
from simworld.data.formats.tools import tool_from_json
from simworld.data.records import JSON, Episode, RecordError, ToolCall, ToolSpec
from simworld.simulators.env import SimEnv, SimTask
from simworld.simulators.validation import Violation

log = logging.getLogger(__name__)

FORMAT = "simworld-captured-env"
SCHEMA_VERSION = 1
ENV_FILE, TOOLS_FILE, TASKS_FILE, RECORDINGS = "env.json", "tools.json", "tasks.json", "recordings"
PATH_VARIABLE = "SIMWORLD_ENV_PATH"
DEFAULT_MAX_STEPS = 1000
DEFAULT_TASKS: list[dict[str, JSON]] = [{"id": "default", "instruction": "", "initial_state": None}]
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class CapturedEnvError(ValueError):
    """A captured env directory that cannot be read or written: the file and what is wrong."""


class McpErrorStyle:
    """The text of an invalid call's error result, as FastMCP-style servers write it."""

    def __call__(
        self, call: ToolCall, spec: ToolSpec | None, violations: Sequence[Violation], message: str
    ) -> str:
        if spec is None:
            return f"Unknown tool: {call.name}"
        return f"Error executing tool {call.name}: {message}"


@dataclass
class CapturedEnv(SimEnv):
    """A SimEnv built from a captured env directory, with what the server said at
    initialize (its recordings are SimEnv.recorded, which the router's cache starts with)."""

    initialize: dict[str, JSON] = field(default_factory=dict)
    directory: Path | None = None


def valid_name(name: str) -> str:
    """`name` when it can name an env (and a URL segment); else CapturedEnvError."""
    if not _NAME.fullmatch(name):
        raise CapturedEnvError(
            f"env name {name!r} is not usable: use 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit"
        )
    return name


def write_captured_env(
    directory: str | Path,
    *,
    name: str,
    initialize: Mapping[str, JSON],
    tools: Sequence[str],
    source: Mapping[str, JSON],
    overwrite: bool = False,
) -> Path:
    """Write a captured env: `tools` are the raw JSON texts of the tools as received. An
    existing env.json is kept (CapturedEnvError) unless `overwrite`; tasks.json and the
    recordings of an existing directory are kept either way."""
    root = Path(directory)
    env_file = root / ENV_FILE
    if env_file.exists() and not overwrite:
        raise CapturedEnvError(f"{env_file}: a captured env is already here; pass overwrite")
    parsed = [_tool_text(text, i) for i, text in enumerate(tools)]
    instructions = initialize.get("instructions")
    meta: dict[str, JSON] = {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "name": valid_name(name),
        "captured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": dict(source),
        "initialize": dict(initialize),
        "rules": [instructions] if isinstance(instructions, str) and instructions else [],
        "max_steps": DEFAULT_MAX_STEPS,
    }
    (root / RECORDINGS).mkdir(parents=True, exist_ok=True)
    body = "[\n" + ",\n".join(text.strip() for text in tools) + "\n]\n" if parsed else "[]\n"
    (root / TOOLS_FILE).write_text(body, encoding="utf-8")
    if not (root / TASKS_FILE).exists():
        (root / TASKS_FILE).write_text(json.dumps(DEFAULT_TASKS, indent=2) + "\n", "utf-8")
    env_file.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return root


def _tool_text(text: str, index: int) -> dict[str, JSON]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise CapturedEnvError(f"tool #{index} is not JSON: {exc}") from exc
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise CapturedEnvError(f"tool #{index} is not an MCP tool (an object with a name)")
    return value


def is_captured_env(path: str | Path) -> bool:
    """Whether `path` is a directory holding a captured env's env.json."""
    return (Path(path) / ENV_FILE).is_file()


def search_path() -> list[Path]:
    """The folders of SIMWORLD_ENV_PATH, in order (empty when unset)."""
    raw = os.environ.get(PATH_VARIABLE, "")
    return [Path(part) for part in raw.split(os.pathsep) if part]


def names_on_path() -> tuple[str, ...]:
    """The names of the captured envs in SIMWORLD_ENV_PATH's folders (first one wins)."""
    names: list[str] = []
    for folder in search_path():
        if folder.is_dir():
            found = sorted(p.name for p in folder.iterdir() if is_captured_env(p))
            names += [n for n in found if n not in names and _NAME.fullmatch(n)]
    return tuple(names)


def find_captured_env(spec: str) -> Path | None:
    """The directory `spec` names: a captured env directory itself, or the folder called
    `spec` in the first SIMWORLD_ENV_PATH folder that has one; None when neither."""
    if is_captured_env(spec):
        return Path(spec)
    if not _NAME.fullmatch(spec):
        return None
    return next((f / spec for f in search_path() if is_captured_env(f / spec)), None)


def load_captured_env(directory: str | Path) -> CapturedEnv:
    """The CapturedEnv of `directory`, read now (its recordings included)."""
    root = Path(directory)
    meta = _read_json(root / ENV_FILE)
    _check_meta(meta, root / ENV_FILE)
    tools = _read_tools(root / TOOLS_FILE)
    tasks = _read_tasks(root / TASKS_FILE, tuple(tools))
    name = str(meta["name"])
    return CapturedEnv(
        name=name,
        tasks=tasks,
        action_kind="tool_calls",
        rules=tuple(str(rule) for rule in _list(meta.get("rules", []), root / ENV_FILE, "rules")),
        max_steps=_max_steps(meta.get("max_steps", DEFAULT_MAX_STEPS), root / ENV_FILE),
        error_style=McpErrorStyle(),
        initialize=dict(_object(meta["initialize"], root / ENV_FILE, "initialize")),
        directory=root,
        recorded=tuple(_recorded(root / RECORDINGS, name, set(tasks))),
    )


def _read_json(path: Path) -> JSON:
    if not path.is_file():
        raise CapturedEnvError(f"{path}: missing; a captured env directory needs it")
    try:
        return json.loads(path.read_text("utf-8"))
    except ValueError as exc:
        raise CapturedEnvError(f"{path}: not valid JSON: {exc}") from exc


def _object(value: JSON, path: Path, key: str) -> dict[str, JSON]:
    if not isinstance(value, dict):
        raise CapturedEnvError(f"{path}: {key}: expected an object, got {type(value).__name__}")
    return value


def _list(value: JSON, path: Path, key: str) -> list[JSON]:
    if not isinstance(value, list):
        raise CapturedEnvError(f"{path}: {key}: expected an array, got {type(value).__name__}")
    return value


def _check_meta(meta: JSON, path: Path) -> None:
    meta = _object(meta, path, "the file")
    if meta.get("format") != FORMAT:
        raise CapturedEnvError(f"{path}: format: expected {FORMAT!r}, got {meta.get('format')!r}")
    if meta.get("schema_version") != SCHEMA_VERSION:
        raise CapturedEnvError(
            f"{path}: schema_version {meta.get('schema_version')!r} is not one this simworld "
            f"reads ({SCHEMA_VERSION})"
        )
    if not isinstance(meta.get("name"), str):
        raise CapturedEnvError(f"{path}: name: expected a string")
    try:
        valid_name(meta["name"])
    except CapturedEnvError as exc:
        raise CapturedEnvError(f"{path}: {exc}") from exc
    _object(meta.get("initialize"), path, "initialize")


def _max_steps(value: JSON, path: Path) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CapturedEnvError(f"{path}: max_steps: expected an integer >= 1, got {value!r}")
    return value


def _read_tools(path: Path) -> list[ToolSpec]:
    tools = _list(_read_json(path), path, "the file")
    specs = []
    for i, tool in enumerate(tools):
        try:
            specs.append(tool_from_json(tool, f"[{i}]"))
        except RecordError as exc:
            raise CapturedEnvError(f"{path}: {exc}") from exc
    names = [spec.name for spec in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CapturedEnvError(f"{path}: tool {twice[0]!r} is listed twice")
    return specs


def _read_tasks(path: Path, tools: tuple[ToolSpec, ...]) -> dict[str, SimTask]:
    entries = _list(_read_json(path), path, "the file") if path.exists() else DEFAULT_TASKS
    tasks: dict[str, SimTask] = {}
    for i, entry in enumerate(entries):
        entry = _object(entry, path, f"[{i}]")
        task_id, instruction = entry.get("id"), entry.get("instruction", "")
        if not isinstance(task_id, str) or not task_id or task_id in tasks:
            raise CapturedEnvError(
                f"{path}: [{i}].id: expected a new non-empty string, got {task_id!r}"
            )
        if not isinstance(instruction, str):
            raise CapturedEnvError(f"{path}: [{i}].instruction: expected a string")
        tasks[task_id] = SimTask(task_id, instruction, entry.get("initial_state"), tools=tools)
    if not tasks:
        raise CapturedEnvError(f"{path}: no tasks; list at least one (id 'default')")
    return tasks


def _recorded(folder: Path, name: str, task_ids: set[str]) -> list[Episode]:
    episodes: list[Episode] = []
    for dump in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        result = read_episodes(dump)
        for bad in result.bad:
            log.warning("%s: skipped: %s", bad.location, bad.reason)
        mine = [ep for ep in result.episodes if ep.env == name and ep.task.id in task_ids]
        if len(mine) < len(result.episodes):
            log.warning(
                "%s: %d episodes of another env or an unknown task skipped",
                dump,
                len(result.episodes) - len(mine),
            )
        episodes += mine
    return episodes


__all__ = [
    "DEFAULT_TASKS",
    "ENV_FILE",
    "FORMAT",
    "PATH_VARIABLE",
    "RECORDINGS",
    "SCHEMA_VERSION",
    "TASKS_FILE",
    "TOOLS_FILE",
    "CapturedEnv",
    "CapturedEnvError",
    "McpErrorStyle",
    "find_captured_env",
    "is_captured_env",
    "load_captured_env",
    "names_on_path",
    "search_path",
    "valid_name",
    "write_captured_env",
]
