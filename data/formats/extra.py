"""The extra key that makes our own chat transcripts (openai, sharegpt) lossless.

A transcript carries messages, tool calls and results; everything else an Episode holds
(episode id, env, task, seed, provenance, outcome, volatile fields, rules, states, rewards,
termination, step info, error flags, ...) travels under one top-level key, `"simworld"`:

    {"schema_version": 1, "mode": "tools" | "text",
     "episode": {episode_id, env, task, rules, initial_state, seed, provenance, outcome, volatile},
     "initial_observation": ...,              # when the transcript cannot show it
     "tools": [{field: value, ...}, ...],     # per tool, only fields the tool JSON loses
     "steps": [{field: value, ...}, ...]}     # per step, only fields the transcript loses

Per tool and per step only the fields that differ from what the plain transcript reads as are
written (`{}` when nothing differs; the list is left out when no entry has any). A writer
renders an episode, reads the transcript back plain, records the difference, then checks
that the whole record reads back identical: an episode a format cannot carry raises
ValueError instead of being written with a loss.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from simworld.data.formats.base import expect_list, expect_object, join
from simworld.data.formats.chat import Layout, Turn
from simworld.data.jsonio import dumps
from simworld.data.records import (
    JSON,
    SCHEMA_VERSION,
    Episode,
    RecordError,
    ToolSpec,
    from_json,
    to_json,
)

EXTRA_KEY = "simworld"
EPISODE_FIELDS = (
    *("episode_id", "env", "task", "rules", "initial_state", "seed"),
    *("provenance", "outcome", "volatile"),
)
STEP_FIELDS = ("state", "next_state", "reward", "terminated", "truncated", "info")


# ---------------------------------------------------------------------------- reading


def layout_of(extra: dict[str, JSON] | None, turns: list[Turn], tools: list[ToolSpec]) -> Layout:
    """The layout the extra key names, else tools when any tool appears, else text."""
    if extra is not None and "mode" in extra:
        mode = extra["mode"]
        if mode not in ("tools", "text"):
            raise RecordError(f"{EXTRA_KEY}.mode", f"expected 'tools' or 'text', got {mode!r}")
    else:
        has_tools = bool(tools) or any(t.calls or t.role == "tool" for t in turns)
        mode = "tools" if has_tools else "text"
    no_initial = extra is not None and extra.get("initial_observation", True) is None
    return Layout(mode=mode, initial=not (mode == "text" and no_initial))


def finish(plain: dict[str, JSON], record: dict[str, JSON]) -> Episode:
    """The Episode: `plain` with the record's extra key merged in, validated."""
    extra = read_extra(record)
    if extra is not None:
        _merge_extra(plain, extra)
    try:
        return from_json(Episode, plain)
    except RecordError as exc:
        if extra is None:
            raise
        raise RecordError(_extra_path(exc.path), exc.reason) from None


def read_extra(record: dict[str, JSON]) -> dict[str, JSON] | None:
    """The record's extra key (None when it has none); checks its schema version."""
    if record.get(EXTRA_KEY) is None:
        return None
    extra: dict[str, JSON] = expect_object(record[EXTRA_KEY], EXTRA_KEY)
    version = extra.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"{EXTRA_KEY}.schema_version",
            f"schema_version {version!r} is not one this simworld reads ({SCHEMA_VERSION})",
        )
    return extra


def _merge_extra(plain: dict[str, JSON], extra: dict[str, JSON]) -> None:
    known = {"schema_version", "mode", "episode", "initial_observation", "tools", "steps"}
    for key in extra:
        if key not in known:
            raise RecordError(join(EXTRA_KEY, key), "unknown field of the simworld extra key")
    episode = expect_object(extra.get("episode", {}), f"{EXTRA_KEY}.episode")
    for key, value in episode.items():
        if key not in EPISODE_FIELDS:
            raise RecordError(f"{EXTRA_KEY}.episode.{key}", "unknown field for Episode")
        plain[key] = value
    if "initial_observation" in extra:
        plain["initial_observation"] = extra["initial_observation"]
    _merge_list(plain["tools"], extra.get("tools"), f"{EXTRA_KEY}.tools")
    overrides = extra.get("steps")
    if overrides is None:
        return
    steps = plain["steps"]
    if len(expect_list(overrides, f"{EXTRA_KEY}.steps")) != len(steps):
        reason = f"{len(overrides)} entries for the {len(steps)} steps of the transcript"
        raise RecordError(f"{EXTRA_KEY}.steps", reason)
    for i, (step, override) in enumerate(zip(steps, overrides, strict=True)):
        _merge_step(step, expect_object(override, f"{EXTRA_KEY}.steps[{i}]"), i)


def _merge_step(step: dict[str, Any], override: dict[str, JSON], index: int) -> None:
    path = f"{EXTRA_KEY}.steps[{index}]"
    for key, value in override.items():
        if key in STEP_FIELDS:
            step[key] = value
        elif key == "content" and step["action"]["kind"] == "tool_calls":
            step["action"]["content"] = value
        elif key == "calls" and step["action"]["kind"] == "tool_calls":
            _merge_list(step["action"]["calls"], value, join(path, key))
        elif key == "results" and step["observation"]["kind"] == "tool_results":
            _merge_list(step["observation"]["results"], value, join(path, key))
        else:
            raise RecordError(join(path, key), "unknown field for this step")


def _merge_list(items: Any, overrides: JSON, path: str) -> None:
    if overrides is None:
        return
    if len(expect_list(overrides, path)) != len(items):
        raise RecordError(path, f"{len(overrides)} entries for {len(items)} items")
    for i, (item, override) in enumerate(zip(items, overrides, strict=True)):
        item.update(expect_object(override, join(path, i)))


def _extra_path(path: str) -> str:
    """Where a field that failed validation sits in the record: in the extra key."""
    where = "" if path.startswith(("steps", "tools", "initial_observation")) else ".episode"
    return f"{EXTRA_KEY}{where}.{path}"


# ---------------------------------------------------------------------------- writing

Render = Callable[[Episode], tuple[dict[str, JSON], Layout]]
ReadPlain = Callable[[dict[str, JSON], Layout], dict[str, JSON]]
Parse = Callable[[JSON, str], Episode]


def write_lossless(
    episodes: Iterable[Episode],
    out: TextIO,
    fmt: str,
    render: Render,
    read_plain: ReadPlain,
    parse: Parse,
) -> int:
    """Write each episode as `render` gives it plus the extra key, one JSON line each, after
    checking that it reads back identical; returns how many were written."""
    count = 0
    for episode in episodes:
        record, layout = render(episode)
        try:
            plain = read_plain(record, layout)
            record[EXTRA_KEY] = make_extra(episode, plain, layout)
            back = parse(record, "")
        except RecordError as exc:
            reason = f"{fmt}: episode {episode.episode_id!r} does not read back: {exc}"
            raise ValueError(reason) from exc
        where = first_difference(to_json(episode), to_json(back), "")
        if where is not None:
            raise ValueError(
                f"{fmt}: episode {episode.episode_id!r} cannot be written as {fmt} without "
                f"loss (it would read back different at {where or 'the top'})"
            )
        out.write(dumps(record) + "\n")
        count += 1
    return count


def make_extra(episode: Episode, plain: dict[str, JSON], layout: Layout) -> dict[str, JSON]:
    """What `episode` holds beyond the plain reading of its transcript."""
    actual = to_json(episode)
    base = to_json(from_json(Episode, plain))
    extra: dict[str, JSON] = {"schema_version": SCHEMA_VERSION, "mode": layout.mode}
    extra["episode"] = {key: actual[key] for key in EPISODE_FIELDS}
    if layout.mode == "text" and not layout.initial:
        extra["initial_observation"] = None
    elif not _same(actual["initial_observation"], base["initial_observation"]):
        extra["initial_observation"] = actual["initial_observation"]
    tools = _list_diff(actual["tools"], base["tools"])
    if tools:
        extra["tools"] = tools
    if len(actual["steps"]) == len(base["steps"]):
        steps = [_step_diff(a, b) for a, b in zip(actual["steps"], base["steps"], strict=True)]
        if any(steps):
            extra["steps"] = steps
    return extra


def _step_diff(actual: dict[str, Any], base: dict[str, Any]) -> dict[str, JSON]:
    out = {key: actual[key] for key in STEP_FIELDS if not _same(actual[key], base[key])}
    action, base_action = actual["action"], base["action"]
    if action["kind"] == base_action["kind"] == "tool_calls":
        if action["content"] != base_action["content"]:
            out["content"] = action["content"]
        calls = _list_diff(action["calls"], base_action["calls"])
        if calls:
            out["calls"] = calls
    observation, base_observation = actual["observation"], base["observation"]
    if observation["kind"] == base_observation["kind"] == "tool_results":
        results = _list_diff(observation["results"], base_observation["results"])
        if results:
            out["results"] = results
    return out


def _list_diff(actual: list[Any], base: list[Any]) -> list[JSON] | None:
    """Per item, the fields of `actual` that differ from `base`; None when nothing differs
    (or the lists differ in length, which the read-back check reports)."""
    if len(actual) != len(base):
        return None
    diffs: list[JSON] = [
        {key: value for key, value in a.items() if key not in b or not _same(value, b[key])}
        for a, b in zip(actual, base, strict=True)
    ]
    return diffs if any(diffs) else None


def _same(a: JSON, b: JSON) -> bool:
    """Equal as JSON text: 1, 1.0 and true differ, and so does key order."""
    return a is b or json.dumps(a) == json.dumps(b)


def first_difference(a: JSON, b: JSON, path: str) -> str | None:
    """The path of the first place two JSON values differ, or None when they are the same."""
    if isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b):
        for key in a:
            found = first_difference(a[key], b[key], join(path, key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, join(path, i))
            if found is not None:
                return found
        return None
    return None if _same(a, b) else path


__all__ = [
    "EPISODE_FIELDS",
    "EXTRA_KEY",
    "STEP_FIELDS",
    "finish",
    "first_difference",
    "layout_of",
    "make_extra",
    "read_extra",
    "write_lossless",
]
