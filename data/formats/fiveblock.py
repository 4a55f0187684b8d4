"""The five-block world-model format: one transition per chat record, as the
masked-diffusion text-world-model work lays it out (patronus-ai/mdlm_world_modeling; its
corpus is PatronusAI/world_model_corpus on the Hugging Face Hub):

    {"dataset": "tau2bench",                     # the source env (optional)
     "messages": [
       {"role": "system", "content": "## ENVIRONMENT STATE\\n...\\n\\n## TASK CONTEXT\\n...\\n\\n"
                                     "## TOOL SCHEMAS\\n...\\n\\n## DOMAIN RULES\\n- ...\\n\\n"
                                     "## STEERING DIRECTIVES\\n- ...\\n\\n"
                                     "PREDICTION TARGET: ..."},
       {"role": "user", "content": "State: <JSON list of earlier messages>\\n\\nAction: <action>"},
       {"role": "assistant", "content": "<the next observation>"}]}

The blocks are markdown `## ` sections in the system and user messages, in any order; extra
sections (`## COMPUTED QUERY STATE`, `## INITIAL SCENE`, ...) are kept in `info["sections"]`.
The action is an `## ACTION` section, else the user turn's `Action:` line, else the user
turn's text; the history is a `## RECENT HISTORY` section or the `State:` line. Each record
reads as a one-step Episode:

- state (Step.state and Episode.initial_state): the ENVIRONMENT STATE block, parsed when it
  is JSON (a ```json fence is allowed), else its text;
- task instruction: TASK CONTEXT; tools: TOOL SCHEMAS when it is a JSON tool list (else the
  text in `info["tool_schemas"]`); rules: DOMAIN RULES, one per line (a leading "- " dropped);
- step info: `steering` (lines), `history` (JSON when it is), `prediction_target`;
- action: a tool call when it is JSON `{"name", "arguments"}` (or an OpenAI tool call, or a
  list of them), else text; observation: the assistant text, as a tool result when the
  action is a call (`structured` when it is JSON, unwrapped from `<tool_response>` tags,
  `is_error` when that JSON is an object with a truthy "error"), else text.

This module reads the format. Writing it renders prompts, which the world model's
serialization owns: simworld.worldmodel.fiveblock writes it, loaded through
`formats.WRITER_PLUGINS` (this layer imports nothing above it).
"""

from __future__ import annotations

import json
import re

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
from simworld.data.formats.openai import content_text
from simworld.data.formats.tools import tool_from_json
from simworld.data.records import JSON, Episode, RecordError, from_json, to_json

NAME = "five-block"
STATE, TASK, TOOLS, RULES, STEERING = (
    "ENVIRONMENT STATE",
    "TASK CONTEXT",
    "TOOL SCHEMAS",
    "DOMAIN RULES",
    "STEERING DIRECTIVES",
)
HISTORY = ("RECENT HISTORY", "HISTORY", "INTERACTION HISTORY")
ACTION = ("ACTION", "CURRENT ACTION", "ACTIVE ACTION", "AGENT ACTION")
_SECTION = re.compile(r"^##[ \t]+(.+?)[ \t]*$", re.M)
_TARGET = re.compile(r"^PREDICTION TARGET:[ \t]*", re.M)
_FENCE = re.compile(r"\A```[a-zA-Z]*\n(.*)\n```\Z", re.S)
_WRAPPER = re.compile(r"\A<tool_response>\s*(.*?)\s*</tool_response>\Z", re.S)
_ACTION_LINE = re.compile(r"^Action:[ \t]*", re.M)


def sniff(value: JSON) -> bool:
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        return False
    return any(
        isinstance(m, dict)
        and m.get("role") in ("system", "user")
        and isinstance(m.get("content"), str)
        and re.search(rf"^##[ \t]+{STATE}\b", m["content"], re.M) is not None
        for m in value["messages"]
    )


def parse(value: JSON, origin: str) -> Episode:
    """One five-block record as a one-step Episode; RecordError names what is wrong."""
    record = expect_object(value, "record")
    messages = expect_list(require(record, "messages"), "messages")
    sections, user_text = _blocks(messages)
    if STATE not in sections:
        raise RecordError("messages", f"no '## {STATE}' section in the system or user messages")
    info: dict[str, JSON] = {}
    action_text, history = _action_and_history(sections, user_text)
    state = _json_or_text(sections.pop(STATE))
    task = sections.pop(TASK, "")
    tools = _tools(sections.pop(TOOLS, None), info)
    rules = _lines(sections.pop(RULES, ""))
    if STEERING in sections:
        info["steering"] = _lines(sections.pop(STEERING))
    if history is not None:
        info["history"] = _json_or_text(history)
    if "PREDICTION TARGET" in sections:
        info["prediction_target"] = sections.pop("PREDICTION TARGET")
    if sections:
        info["sections"] = dict(sections)
    last = join("messages", len(messages) - 1)
    target = content_text(expect_object(messages[-1], last).get("content"), join(last, "content"))
    action = _action(action_text)
    episode_id = record_id(record, origin)
    step: dict[str, JSON] = {"action": action, "observation": _observation(action, target)}
    step.update(state=state, info=info)
    env = expect_str(record.get("dataset", record.get("env", "unknown")), "dataset")
    episode: dict[str, JSON] = {"episode_id": episode_id, "env": env}
    episode["task"] = {"id": episode_id, "instruction": task}
    episode.update(steps=[step], tools=tools, rules=rules, initial_state=state)
    episode["provenance"] = {"source": NAME, "origin": origin}
    return from_json(Episode, episode)


def _blocks(messages: list[JSON]) -> tuple[dict[str, str], str]:
    """The `## ` sections of the system and user messages, and the user turn's other text.
    The last message must be the assistant's: the prediction target."""
    if not messages:
        raise RecordError("messages", "expected system/user messages and an assistant message")
    sections: dict[str, str] = {}
    user_parts: list[str] = []
    for i, value in enumerate(messages):
        path = join("messages", i)
        message = expect_object(value, path)
        role = message.get("role")
        last = i == len(messages) - 1
        if last != (role == "assistant"):
            where = "the last" if last else "only the last"
            reason = f"{where} message is the assistant's prediction target; got role {role!r}"
            raise RecordError(join(path, "role"), reason)
        if last:
            break
        if role not in ("system", "user"):
            raise RecordError(join(path, "role"), f"unknown role {role!r}; expected system or user")
        preamble = _split(content_text(message.get("content"), join(path, "content")), sections)
        if role == "user" and preamble:
            user_parts.append(preamble)
    return sections, "\n\n".join(user_parts)


def _split(text: str, sections: dict[str, str]) -> str:
    """Add `text`'s sections to `sections` (a repeated one is appended); return the text
    before the first section."""
    heads = list(_SECTION.finditer(text))
    preamble = text[: heads[0].start()] if heads else text
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        body = text[head.end() : end].strip("\n")
        target = _TARGET.search(body)
        if target:
            sections["PREDICTION TARGET"] = body[target.end() :].strip()
            body = body[: target.start()]
        name = head.group(1).strip().upper()
        body = body.strip()
        sections[name] = f"{sections[name]}\n\n{body}" if name in sections else body
    return preamble.strip()


def _action_and_history(sections: dict[str, str], user_text: str) -> tuple[str, str | None]:
    history = next((sections.pop(name) for name in HISTORY if name in sections), None)
    action = next((sections.pop(name) for name in ACTION if name in sections), None)
    if action is None:
        line = _ACTION_LINE.search(user_text)
        if line:
            before, action = user_text[: line.start()], user_text[line.end() :]
        elif user_text.lstrip().startswith("State:"):
            before, action = user_text, ""
        else:
            before, action = "", user_text
        if history is None and before.strip().startswith("State:"):
            history = before.strip().removeprefix("State:")
    action = action.strip()
    if not action:
        reason = "no action: expected an '## ACTION' section or an 'Action:' line in the user turn"
        raise RecordError("messages", reason)
    return action, None if history is None else history.strip()


def _json_or_text(text: str) -> JSON:
    fenced = _FENCE.match(text.strip())
    parsed = parse_json_text(fenced.group(1) if fenced else text)
    return text if parsed is None else parsed


def _lines(text: str) -> list[str]:
    return [line.rstrip().removeprefix("- ") for line in text.splitlines() if line.strip()]


def _tools(text: str | None, info: dict[str, JSON]) -> list[JSON]:
    if text is None:
        return []
    parsed = _json_or_text(text)
    if isinstance(parsed, dict) and isinstance(parsed.get("tools"), list):
        parsed = parsed["tools"]
    if not isinstance(parsed, list):
        info["tool_schemas"] = text
        return []
    path = f"## {TOOLS}"
    return [to_json(tool_from_json(tool, join(path, i))) for i, tool in enumerate(parsed)]


def _action(text: str) -> dict[str, JSON]:
    parsed = _json_or_text(text)
    items = parsed if isinstance(parsed, list) and parsed else [parsed]
    calls = [_call(item, k) for k, item in enumerate(items)]
    if any(call is None for call in calls):
        return {"kind": "text", "text": text}
    return {"kind": "tool_calls", "calls": calls}


def _call(value: JSON, index: int) -> dict[str, JSON] | None:
    """A tool call from `{"name", "arguments"}` or an OpenAI tool call, else None."""
    if not isinstance(value, dict):
        return None
    function = value.get("function", value)
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return None
    arguments = function.get("arguments", function.get("parameters", {}))
    if isinstance(arguments, dict):
        raw = json.dumps(arguments, ensure_ascii=False)
    elif isinstance(arguments, str):
        raw = arguments
    else:
        return None
    call_id = value.get("id")
    return {
        "id": call_id if isinstance(call_id, str) else f"call_{index}",
        "name": function["name"],
        "arguments": parse_arguments(raw),
        "raw_arguments": raw,
    }


def _observation(action: dict[str, JSON], text: str) -> dict[str, JSON]:
    if action["kind"] == "text":
        return {"kind": "text", "text": text}
    calls = action["calls"]
    assert isinstance(calls, list)
    if len(calls) != 1:
        reason = f"the action makes {len(calls)} calls, but a record holds one observation"
        raise RecordError("messages", reason)
    wrapped = _WRAPPER.match(text.strip())
    parsed = _json_or_text(wrapped.group(1) if wrapped else text)
    structured = parsed if isinstance(parsed, dict | list) else None
    is_error = isinstance(structured, dict) and bool(structured.get("error"))
    result = {
        "call_id": calls[0]["id"],
        "text": text,
        "structured": structured,
        "is_error": is_error,
    }
    return {"kind": "tool_results", "results": [result]}


FORMAT = Format(
    name=NAME,
    shape="chat messages whose system/user turns hold '## ENVIRONMENT STATE' and the other blocks",
    sniff=sniff,
    read=read_each(parse),
)

__all__ = ["FORMAT", "NAME", "parse", "sniff"]
