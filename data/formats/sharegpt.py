"""ShareGPT transcripts in LLaMA-Factory's function-calling convention, one episode per JSON
line:

    {"conversations": [{"from": "human" | "gpt" | "function_call" | "observation" | "system",
                        "value": "..."}, ...],
     "system": "...", "tools": "<a JSON string: the tool list>",
     "simworld": {...}}      # only in files we write: what the turns cannot carry (extra.py)

A `function_call` value is JSON: `{"name", "arguments"}` or a list of them (parallel calls);
`arguments` is an object (or a string, kept as the raw argument text). The `observation` after
it is the result text; after N > 1 calls it is a JSON array of the N result texts. Calls carry
no ids, so reading numbers them `call_0`, `call_1`, ... through the conversation. The turns
map onto steps as chat.py describes; a record with an unknown `from`, a result with no call,
a call with no result, or a wrong type is a bad record naming the turn index and field.

Writing: the first system message goes to `system`, later ones are `system` turns; `tools`
lists `ToolSpec.original` when it is an OpenAI tool or a bare function object, else the
converted function. Without the extra key a reader loses what openai.py lists and also call
ids, the exact argument text (arguments are re-serialized) and text sent with tool calls.
"""

from __future__ import annotations

import json

from simworld.data.formats.base import (
    Format,
    expect_list,
    expect_object,
    expect_str,
    join,
    parse_arguments,
    parse_json_text,
    read_each,
    record_id,
    require,
)
from simworld.data.formats.chat import Layout, Turn, layout_for, plain_episode, render_messages
from simworld.data.formats.extra import finish, layout_of, read_extra, write_lossless
from simworld.data.formats.tools import llamafactory_tool, tools_from_json
from simworld.data.jsonio import dumps
from simworld.data.records import JSON, Episode, RecordError, ToolSpec

NAME = "sharegpt"
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}
FROMS = ("human", "gpt", "function_call", "observation", "system")


def sniff(value: JSON) -> bool:
    return isinstance(value, dict) and isinstance(value.get("conversations"), list)


def parse(value: JSON, origin: str) -> Episode:
    """One record as an Episode; RecordError names the field that is wrong."""
    record = expect_object(value, "record")
    return finish(_read(record, origin, None), record)


def read_plain(record: dict[str, JSON], layout: Layout) -> dict[str, JSON]:
    """The record's episode JSON without its extra key, in the given layout."""
    return _read(record, "", layout)


def _read(record: dict[str, JSON], origin: str, layout: Layout | None) -> dict[str, JSON]:
    conversations = expect_list(require(record, "conversations"), "conversations")
    turns = []
    system = record.get("system")
    if system is not None and expect_str(system, "system"):
        turns.append(Turn("system", system, "system"))
    turns += _turns(conversations)
    tools = _tools(record.get("tools"))
    if layout is None:
        layout = layout_of(read_extra(record), turns, tools)
    ids = (record_id(record, origin), NAME, origin)
    episode: dict[str, JSON] = plain_episode(turns, tools, layout, ids)
    return episode


def _tools(value: JSON) -> list[ToolSpec]:
    if isinstance(value, str):
        if not value.strip():
            return []
        parsed = parse_json_text(value)
        if not isinstance(parsed, list):
            raise RecordError("tools", "expected a JSON string holding a list of tools")
        value = parsed
    tools: list[ToolSpec] = tools_from_json(value, "tools")
    return tools


def _turns(conversations: list[JSON]) -> list[Turn]:
    turns: list[Turn] = []
    open_ids: list[str] = []  # the ids of the last function_call, until its observation
    count = 0
    for i, value in enumerate(conversations):
        path = join("conversations", i)
        turn = expect_object(value, path)
        source = turn.get("from")
        if source not in FROMS:
            raise RecordError(
                join(path, "from"), f"unknown role {source!r}; expected one of {', '.join(FROMS)}"
            )
        text = expect_str(turn.get("value"), join(path, "value"))
        if source == "function_call":
            calls = _calls(text, join(path, "value"), count)
            count += len(calls)
            open_ids = [str(call["id"]) for call in calls]
            turns.append(Turn("assistant", "", path, calls=calls))
        elif source == "observation":
            turns += _results(text, path, open_ids)
            open_ids = []
        else:
            turns.append(Turn(ROLES[source], text, path))
    return turns


def _calls(text: str, path: str, first: int) -> list[dict[str, JSON]]:
    parsed = parse_json_text(text)
    if not isinstance(parsed, dict | list) or not parsed:
        raise RecordError(path, 'expected JSON {"name", "arguments"} or a list of them')
    items = parsed if isinstance(parsed, list) else [parsed]
    calls: list[dict[str, JSON]] = []
    for k, item in enumerate(items):
        where = join(path, k) if isinstance(parsed, list) else path
        call = expect_object(item, where)
        name = expect_str(call.get("name"), join(where, "name"))
        arguments = call.get("arguments", {})
        if isinstance(arguments, dict):
            raw = json.dumps(arguments, ensure_ascii=False)
        elif isinstance(arguments, str):
            raw = arguments
        else:
            raise RecordError(join(where, "arguments"), "expected an object or a string")
        call_id = f"call_{first + k}"
        calls.append(
            {"id": call_id, "name": name, "arguments": parse_arguments(raw), "raw_arguments": raw}
        )
    return calls


def _results(text: str, path: str, open_ids: list[str]) -> list[Turn]:
    if len(open_ids) <= 1:
        call_id = open_ids[0] if open_ids else None
        return [Turn("tool", text, path, call_id=call_id)]
    parsed = parse_json_text(text)
    if not (
        isinstance(parsed, list)
        and len(parsed) == len(open_ids)
        and all(isinstance(x, str) for x in parsed)
    ):
        n = len(open_ids)
        reason = f"the observation after {n} calls must be a JSON array of {n} result texts"
        raise RecordError(join(path, "value"), reason)
    return [Turn("tool", str(x), path, call_id=i) for x, i in zip(parsed, open_ids, strict=True)]


def render(episode: Episode) -> tuple[dict[str, JSON], Layout]:
    """The episode as a ShareGPT record, without the extra key."""
    layout = layout_for(episode)
    messages = render_messages(episode, layout, NAME)
    record: dict[str, JSON] = {}
    system = None
    if messages and messages[0]["role"] == "system" and messages[0]["content"]:
        system = messages.pop(0)["content"]
    froms = {"user": "human", "assistant": "gpt", "system": "system"}
    turns: list[JSON] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        i += 1
        if not message.get("tool_calls"):
            turns.append({"from": froms[str(message["role"])], "value": message["content"]})
            continue
        turns.append({"from": "function_call", "value": _calls_value(message["tool_calls"])})
        results = []
        while i < len(messages) and messages[i]["role"] == "tool":
            results.append(messages[i]["content"])
            i += 1
        value = results[0] if len(results) == 1 else dumps(results)
        turns.append({"from": "observation", "value": value})
    record["conversations"] = turns
    if system is not None:
        record["system"] = system
    if episode.tools:
        record["tools"] = dumps([llamafactory_tool(tool) for tool in episode.tools])
    return record, layout


def _calls_value(tool_calls: JSON) -> str:
    items = []
    for call in expect_list(tool_calls, "tool_calls"):
        function = call["function"]
        raw = function["arguments"]
        arguments = parse_arguments(raw)
        items.append(
            {"name": function["name"], "arguments": raw if arguments is None else arguments}
        )
    value: str = dumps(items[0] if len(items) == 1 else items)
    return value


FORMAT = Format(
    name=NAME,
    shape='one {"conversations": [{"from", "value"}, ...]} object per line (ShareGPT)',
    sniff=sniff,
    read=read_each(parse),
    write=lambda episodes, out: write_lossless(episodes, out, NAME, render, read_plain, parse),
)

__all__ = ["FORMAT", "NAME", "parse", "render", "sniff"]
