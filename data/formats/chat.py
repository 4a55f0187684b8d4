"""A chat transcript as an Episode and back, shared by the openai and sharegpt formats.

A transcript is a list of turns (system, user, assistant text, assistant tool calls, tool
results). Two layouts:

- **tools**: an assistant turn with tool calls is a step's action; the tool results right after
  it (matched by call id) are its observation; other turns before it are `Step.messages`;
  turns after the last step are `Episode.final_messages`.
- **text** (text games, no tools anywhere): the first user turn is the initial observation;
  an assistant turn followed by a user turn is an action and its observation; other turns
  are messages as above.

`plain_episode` reads turns as a plain dump gives them; `render_messages` writes an Episode
as OpenAI-shaped messages. What a transcript cannot carry travels in the extra key (extra.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simworld.data.formats.base import join, parse_json_text
from simworld.data.records import (
    JSON,
    Episode,
    Message,
    RecordError,
    TextAction,
    TextObservation,
    ToolCallsAction,
    ToolResultsObservation,
    ToolSpec,
    to_json,
)


@dataclass
class Turn:
    """One transcript turn, normalized: `role` is system, user, assistant or tool; `calls`
    are ToolCall JSON (assistant); `call_id` is what a tool result answers; `path` and
    `id_field` locate it in the record for error messages."""

    role: str
    text: str
    path: str
    calls: list[dict[str, JSON]] = field(default_factory=list)
    call_id: str | None = None
    id_field: str = ""


@dataclass(frozen=True)
class Layout:
    """How a transcript maps onto steps; `initial`: in text mode, whether the first user turn
    is the initial observation."""

    mode: Literal["tools", "text"]
    initial: bool = True


# ---------------------------------------------------------------------------- reading


def plain_episode(
    turns: list[Turn], tools: list[ToolSpec], layout: Layout, ids: tuple[str, str, str]
) -> dict[str, JSON]:
    """The episode a transcript reads as on its own (before the extra key), as JSON; `ids` is
    (episode id, source format, origin "file:line")."""
    episode_id, source, origin = ids
    if layout.mode == "tools":
        initial = None
        steps, final = _tool_steps(turns)
    else:
        initial, steps, final = _text_steps(turns, layout.initial)
    instruction = next((t.text for t in turns if t.role == "user"), "")
    return {
        "episode_id": episode_id,
        "env": "unknown",
        "task": {"id": episode_id, "instruction": instruction},
        "steps": steps,
        "tools": [to_json(tool) for tool in tools],
        "initial_observation": initial,
        "provenance": {"source": source, "origin": origin},
        "final_messages": final,
    }


def _message(turn: Turn) -> dict[str, JSON]:
    return {"role": turn.role, "content": turn.text}


def tool_result(call_id: str, text: str) -> dict[str, JSON]:
    """A ToolResult as a plain dump gives it: `structured` is the text's JSON object or
    array when it is one; no error flag."""
    parsed = parse_json_text(text)
    structured = parsed if isinstance(parsed, dict | list) else None
    return {"call_id": call_id, "text": text, "structured": structured, "is_error": False}


def _tool_steps(turns: list[Turn]) -> tuple[list[JSON], list[JSON]]:
    steps: list[JSON] = []
    pending: list[JSON] = []
    i = 0
    while i < len(turns):
        turn = turns[i]
        i += 1
        if turn.role == "tool":
            where = join(turn.path, turn.id_field) if turn.id_field else turn.path
            raise RecordError(where, _orphan(turn))
        if not turn.calls:
            pending.append(_message(turn))
            continue
        answers = []
        while i < len(turns) and turns[i].role == "tool":
            answers.append(turns[i])
            i += 1
        steps.append(
            {
                "action": {"kind": "tool_calls", "calls": turn.calls, "content": turn.text},
                "observation": {"kind": "tool_results", "results": _match(turn, answers)},
                "messages": pending,
            }
        )
        pending = []
    return steps, pending


def _match(call: Turn, answers: list[Turn]) -> list[JSON]:
    """The results for `call`'s tool calls, in call order, matched by call id."""
    ids = [c["id"] for c in call.calls]
    by_id: dict[str, Turn] = {}
    for answer in answers:
        where = join(answer.path, answer.id_field) if answer.id_field else answer.path
        if answer.call_id is None or answer.call_id not in ids:
            raise RecordError(where, _orphan(answer))
        if answer.call_id in by_id:
            raise RecordError(where, f"a second tool result for call {answer.call_id!r}")
        by_id[answer.call_id] = answer
    for k, call_id in enumerate(ids):
        if call_id in ids[:k]:
            raise RecordError(call.path, f"tool call id {call_id!r} is used twice")
        if call_id not in by_id:
            name = call.calls[k]["name"]
            raise RecordError(call.path, f"tool call {call_id!r} ({name}) has no tool result")
    return [tool_result(call_id, by_id[call_id].text) for call_id in ids]


def _orphan(turn: Turn) -> str:
    if turn.call_id is None:
        return "tool result with no matching call before it"
    return f"tool result for call {turn.call_id!r} with no matching call before it"


def _text_steps(turns: list[Turn], initial: bool) -> tuple[JSON, list[JSON], list[JSON]]:
    for turn in turns:
        if turn.calls or turn.role == "tool":
            raise RecordError(turn.path, "a tool call or tool result in a text episode")
    pending: list[JSON] = []
    i = 0
    while i < len(turns) and turns[i].role == "system":
        pending.append(_message(turns[i]))
        i += 1
    observation = None
    if initial and i < len(turns) and turns[i].role == "user":
        observation = {"kind": "text", "text": turns[i].text}
        i += 1
    steps: list[JSON] = []
    while i < len(turns):
        turn = turns[i]
        if turn.role == "assistant" and i + 1 < len(turns) and turns[i + 1].role == "user":
            steps.append(
                {
                    "action": {"kind": "text", "text": turn.text},
                    "observation": {"kind": "text", "text": turns[i + 1].text},
                    "messages": pending,
                }
            )
            pending = []
            i += 2
        else:
            pending.append(_message(turn))
            i += 1
    return observation, steps, pending


# ---------------------------------------------------------------------------- writing


def layout_for(episode: Episode) -> Layout:
    """tools when the episode lists tools or calls one, else text."""
    calls = any(isinstance(step.action, ToolCallsAction) for step in episode.steps)
    if calls or episode.tools:
        return Layout("tools")
    return Layout("text", initial=episode.initial_observation is not None)


def render_messages(episode: Episode, layout: Layout, fmt: str) -> list[dict[str, JSON]]:
    """The episode as OpenAI chat messages; ValueError when a step does not fit `layout`."""
    for index, step in enumerate(episode.steps):
        if layout.mode == "tools":
            fits = isinstance(step.action, ToolCallsAction) and isinstance(
                step.observation, ToolResultsObservation
            )
        else:
            fits = isinstance(step.action, TextAction) and isinstance(
                step.observation, TextObservation
            )
        if not fits:
            kinds = f"{step.action.kind} action, {step.observation.kind} observation"
            raise ValueError(
                f"{fmt}: episode {episode.episode_id!r} step {index} ({kinds}) does not fit a "
                f"{layout.mode} transcript; {fmt} carries one kind of step per episode"
            )
    if layout.mode == "tools":
        return _render_tools(episode)
    return _render_text(episode)


def _plain(messages: list[Message]) -> list[dict[str, JSON]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def _render_tools(episode: Episode) -> list[dict[str, JSON]]:
    out: list[dict[str, JSON]] = []
    for step in episode.steps:
        assert isinstance(step.action, ToolCallsAction)
        assert isinstance(step.observation, ToolResultsObservation)
        out += _plain(step.messages)
        calls: list[JSON] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.raw_arguments},
            }
            for call in step.action.calls
        ]
        out.append(
            {"role": "assistant", "content": step.action.content or None, "tool_calls": calls}
        )
        for result in step.observation.results:
            out.append({"role": "tool", "tool_call_id": result.call_id, "content": result.text})
    return out + _plain(episode.final_messages)


def _render_text(episode: Episode) -> list[dict[str, JSON]]:
    first = episode.steps[0].messages if episode.steps else episode.final_messages
    lead = 0
    while lead < len(first) and first[lead].role == "system":
        lead += 1
    out = _plain(first[:lead])
    if isinstance(episode.initial_observation, TextObservation):
        out.append({"role": "user", "content": episode.initial_observation.text})
    out += _plain(first[lead:])
    for index, step in enumerate(episode.steps):
        assert isinstance(step.action, TextAction)
        assert isinstance(step.observation, TextObservation)
        if index:
            out += _plain(step.messages)
        out.append({"role": "assistant", "content": step.action.text})
        out.append({"role": "user", "content": step.observation.text})
    return out + (_plain(episode.final_messages) if episode.steps else [])


__all__ = ["Layout", "Turn", "layout_for", "plain_episode", "render_messages", "tool_result"]
