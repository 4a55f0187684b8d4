"""OpenAI chat transcripts, one episode per JSON line, as fine-tuning dumps and TRL's
conversational datasets hold them:

    {"messages": [{"role": "system" | "user" | "assistant" | "tool", "content": ...,
                   "tool_calls": [{"id", "type": "function",
                                   "function": {"name", "arguments": "<JSON string>"}}],
                   "tool_call_id": ...}, ...],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}],
     "simworld": {...}}      # only in files we write: what messages cannot carry (extra.py)

Reading follows chat.py's layouts. `content` is a string, null, or a list of text parts.
A call's `arguments` string is kept verbatim in `ToolCall.raw_arguments` and parsed into
`arguments` when it is a JSON object (None otherwise: a malformed call is data, not an
error). A record with an unknown role, a tool result with no matching call, a call with no
result, or a wrong type is a bad record whose reason names the message index and field.
A plain dump reads as env "unknown", task id = the record's `id` or its "file:line".

Writing puts `ToolSpec.original` in `tools` when it is already an OpenAI tool (so the list
replays exactly) and converts other shapes (MCP, bare functions), keeping the original in the
extra key. Without the extra key a reader gets messages, calls (raw arguments), results and
tools; it loses ids, env, task, seed, provenance, outcome, rules, states, rewards,
termination, step info, error flags and `structured` values that differ from the text's JSON.
"""

from __future__ import annotations

from simworld.data.formats.base import (
    Format,
    expect_list,
    expect_object,
    expect_str,
    join,
    parse_arguments,
    read_each,
    record_id,
    require,
    type_name,
)
from simworld.data.formats.chat import Layout, Turn, layout_for, plain_episode, render_messages
from simworld.data.formats.extra import finish, layout_of, read_extra, write_lossless
from simworld.data.formats.tools import openai_tool, tools_from_json
from simworld.data.records import JSON, Episode, RecordError

NAME = "openai"
ROLES = ("system", "user", "assistant", "tool")


def sniff(value: JSON) -> bool:
    return isinstance(value, dict) and isinstance(value.get("messages"), list)


def parse(value: JSON, origin: str) -> Episode:
    """One record as an Episode; RecordError names the field that is wrong."""
    record = expect_object(value, "record")
    return finish(_read(record, origin, None), record)


def read_plain(record: dict[str, JSON], layout: Layout) -> dict[str, JSON]:
    """The record's episode JSON without its extra key, in the given layout."""
    return _read(record, "", layout)


def _read(record: dict[str, JSON], origin: str, layout: Layout | None) -> dict[str, JSON]:
    messages = expect_list(require(record, "messages"), "messages")
    turns = [to_turn(message, join("messages", i)) for i, message in enumerate(messages)]
    tools = tools_from_json(record.get("tools"), "tools")
    if layout is None:
        layout = layout_of(read_extra(record), turns, tools)
    ids = (record_id(record, origin), NAME, origin)
    episode: dict[str, JSON] = plain_episode(turns, tools, layout, ids)
    return episode


def to_turn(value: JSON, path: str) -> Turn:
    """One OpenAI message as a transcript turn."""
    message = expect_object(value, path)
    role = message.get("role")
    if role not in ROLES:
        raise RecordError(
            join(path, "role"), f"unknown role {role!r}; expected one of {', '.join(ROLES)}"
        )
    if message.get("function_call") is not None:
        reason = "the legacy function_call field is not supported; use tool_calls"
        raise RecordError(join(path, "function_call"), reason)
    text = content_text(message.get("content"), join(path, "content"))
    if role == "tool":
        call_id = expect_str(message.get("tool_call_id"), join(path, "tool_call_id"))
        return Turn("tool", text, path, call_id=call_id, id_field="tool_call_id")
    raw_calls = message.get("tool_calls")
    if not raw_calls:
        return Turn(role, text, path)
    where = join(path, "tool_calls")
    if role != "assistant":
        raise RecordError(where, f"only assistant messages make tool calls, not {role}")
    calls = [_call(call, join(where, k)) for k, call in enumerate(expect_list(raw_calls, where))]
    return Turn(role, text, path, calls=calls)


def content_text(value: JSON, path: str) -> str:
    """A message's content as text: a string, null (empty), or text parts joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        reason = f"expected a string or a list of text parts, got {type_name(value)}"
        raise RecordError(path, reason)
    texts = []
    for k, part in enumerate(value):
        part = expect_object(part, join(path, k))
        if part.get("type") != "text":
            reason = f"only text parts are supported, got {part.get('type')!r}"
            raise RecordError(join(join(path, k), "type"), reason)
        texts.append(expect_str(part.get("text"), join(join(path, k), "text")))
    return "".join(texts)


def _call(value: JSON, path: str) -> dict[str, JSON]:
    call = expect_object(value, path)
    call_id = expect_str(call.get("id"), join(path, "id"))
    if call.get("type", "function") != "function":
        raise RecordError(join(path, "type"), f"expected 'function', got {call.get('type')!r}")
    function = expect_object(call.get("function"), join(path, "function"))
    name = expect_str(function.get("name"), join(path, "function.name"))
    raw = expect_str(function.get("arguments"), join(path, "function.arguments"))
    return {"id": call_id, "name": name, "arguments": parse_arguments(raw), "raw_arguments": raw}


def render(episode: Episode) -> tuple[dict[str, JSON], Layout]:
    """The episode as an OpenAI record, without the extra key."""
    layout = layout_for(episode)
    record: dict[str, JSON] = {"messages": render_messages(episode, layout, NAME)}
    if episode.tools:
        record["tools"] = [openai_tool(tool) for tool in episode.tools]
    return record, layout


FORMAT = Format(
    name=NAME,
    shape='one {"messages": [...], "tools": [...]} object per line (OpenAI chat)',
    sniff=sniff,
    read=read_each(parse),
    write=lambda episodes, out: write_lossless(episodes, out, NAME, render, read_plain, parse),
)

__all__ = ["FORMAT", "NAME", "content_text", "parse", "render", "sniff", "to_turn"]
