"""The one serialization: a Context rendered as a plain prompt or chat messages, the target a
model must generate, and the parser that turns generated text back into an Observation and
a state patch. Prompt wording lives in prompts/*.txt and is rendered only here.

    ctx = build_context(episode, 3)
    prompt = render_prompt(ctx)              # blocks as "## HEADING" sections, then "## PREDICTION"
    messages = render_messages(ctx)          # the same blocks for chat models (Simia-style)
    target = render_target(ctx)              # what the model must write after the prompt
    parsed = parse_target(generated, step.action)   # .observation, .patch, .problems

The target, one line per item and nothing else:

    call_0_0 ok {"current_directory_content": ["workspace"]}     one line per tool call
    "  (Down)\\nSFFF…"                                            or one line: a text observation
    patch [{"op":"replace","path":"/position","value":8}]       when the data has states

A result line is the call id, `ok` or `error`, and the text exactly as the environment gave
it; a text that would not survive one raw line (it spans lines, starts with `"`, has outer
whitespace, or a text observation that starts with `patch`) is written as a JSON string.
`parse_target` never raises on model output: what it cannot read is listed in `problems`.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from simworld.data.formats import fiveblock as five
from simworld.data.records import (
    JSON,
    Action,
    Observation,
    TextObservation,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.worldmodel.patch import Patch, check
from simworld.worldmodel.views import compact

if TYPE_CHECKING:
    from simworld.worldmodel.context import Context

# Version 2 added the example block (a similar recorded step); without it a version-2 prompt
# is byte for byte a version-1 prompt, so version-1 checkpoints load (with no example).
# Version 3 added the action-focused state view (`Budget.state_focus`, views.Focus), which a
# checkpoint turns on with `state_focus` in its training arguments; without it a version-3
# prompt is byte for byte a version-2 one.
# Version 4 changed the focused view only (views.fit_focused: when the entries an action
# names cannot all be opened, they are shown less opened, then unopened, before the view
# falls to one entry per container); plain prompts are as in version 3, so a version-3
# checkpoint loads unless it was trained with the focused view.
SERIALIZATION_VERSION = 4
READS_VERSIONS = ("1", "2", "3", "4")

BLOCKS = ("state", "task", "tools", "rules", "steering", "history", "example", "action")
HEADINGS = {
    "state": five.STATE,
    "task": five.TASK,
    "tools": five.TOOLS,
    "rules": five.RULES,
    "steering": five.STEERING,
    "history": five.HISTORY[0],
    "example": "SIMILAR RECORDED STEP",
    "action": five.ACTION[0],
}
PATCH_PREFIX = "patch "


@cache
def template(name: str) -> string.Template:
    """prompts/`name` as a `string.Template` ($name placeholders; JSON braces are safe)."""
    text = resources.files("simworld.worldmodel").joinpath("prompts", name).read_text("utf-8")
    return string.Template(text)


def section(block: str, body: str) -> str:
    """One block as a markdown section ("" when the block is empty)."""
    return f"## {HEADINGS[block]}\n{body}\n\n" if body else ""


def render_blocks(ctx: Context, blocks: tuple[str, ...] = BLOCKS) -> str:
    return "".join(section(name, getattr(ctx, name)) for name in blocks)


def render_prompt(ctx: Context) -> str:
    """The plain-text prompt; it ends with TARGET_MARKER, after which the target follows."""
    return template("plain.txt").substitute(blocks=render_blocks(ctx))


TARGET_MARKER = template("plain.txt").template.split("${blocks}", 1)[1]


def target_format(ctx: Context) -> str:
    """The target format in words, for prompted models."""
    lines = [template("target_tools.txt" if ctx.action_kind == "tool_calls" else "target_text.txt")]
    if ctx.tracks_state:
        lines.append(template("target_patch.txt"))
    return "".join(t.template for t in lines).rstrip("\n")


def render_messages(ctx: Context) -> list[dict[str, str]]:
    """The same blocks as chat messages: a system message that asks for the target format
    and holds every block but the action and the example; the example, when there is one,
    as a solved turn (its action as a user message, answered by its outcome: a chat model
    imitates an answer it has seen far better than one quoted in a prompt); then the action
    as the last user message, in the same form as the example's."""
    system = template("chat_system.txt").substitute(format=target_format(ctx)).rstrip("\n")
    blocks = render_blocks(ctx, tuple(b for b in BLOCKS if b not in ("example", "action")))
    messages = [{"role": "system", "content": (system + "\n\n" + blocks).rstrip("\n")}]
    if ctx.example:
        action, _, outcome = ctx.example.partition("\n")  # the action is one compact line
        messages.append({"role": "user", "content": section("action", action).rstrip("\n")})
        messages.append({"role": "assistant", "content": outcome})
    messages.append({"role": "user", "content": section("action", ctx.action).rstrip("\n")})
    return messages


def prompt_from_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """The plain prompt of the context whose chat rendering is `messages` (what
    `render_messages` writes), so a causal LM trained on plain prompts can answer a chat
    request. ValueError says what does not have that shape."""
    roles = [m.get("role") for m in messages]
    if roles not in (["system", "user"], ["system", "user", "assistant", "user"]):
        raise ValueError(
            "messages: expected the world model's chat rendering (system, then the action as "
            f"user; or system, example action, example outcome, action), got roles {roles}"
        )
    texts = [m.get("content") for m in messages]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("messages: every content must be a string")
    system, *turns = (str(t) for t in texts)
    action = f"## {HEADINGS['action']}"
    if not all(t.startswith(action + "\n") for t in turns[0::2]):
        raise ValueError(f"messages: each user message must open with {action!r}")
    starts = [system.find(f"\n\n## {HEADINGS[b]}\n") for b in BLOCKS[:-2]]
    found = [i for i in starts if i >= 0]
    blocks = system[min(found) + 2 :] + "\n\n" if found else ""
    if len(turns) == 3:
        example = turns[0].removeprefix(action + "\n") + "\n" + turns[1]
        blocks += section("example", example)
    blocks += turns[-1] + "\n\n"
    return template("plain.txt").substitute(blocks=blocks)


# ---------------------------------------------------------------------------- the target


def _payload(text: str, text_observation: bool = False) -> str:
    raw_ok = (
        text != ""
        and not text.startswith('"')
        and text == text.strip()
        and len(text.splitlines()) == 1
        and not (text_observation and text.startswith(PATCH_PREFIX.strip()))
    )
    return text if raw_ok else json.dumps(text, ensure_ascii=False)


def _call_id(call_id: str) -> str:
    plain = call_id and not call_id.startswith('"') and not any(c.isspace() for c in call_id)
    return call_id if plain else json.dumps(call_id, ensure_ascii=False)


def format_target(observation: Observation, patch: Patch | None) -> str:
    """The target text for an observation and (when the data has states) a patch."""
    if isinstance(observation, ToolResultsObservation):
        lines = [
            f"{_call_id(r.call_id)} {'error' if r.is_error else 'ok'} {_payload(r.text)}"
            for r in observation.results
        ]
    else:
        lines = [_payload(observation.text, text_observation=True)]
    if patch is not None:
        lines.append(PATCH_PREFIX + compact(patch))
    return "\n".join(lines)


def render_target(ctx: Context) -> str:
    """What a model must generate for this context; ValueError when it has no target."""
    if ctx.target is None:
        raise ValueError("this context has no target (it was built for a live step)")
    return format_target(ctx.target.observation, ctx.target.patch)


@dataclass
class Parsed:
    """A parse of generated text: the observation (None unless every call got a result),
    the patch (None when absent or unreadable) and what could not be read."""

    observation: Observation | None
    patch: Patch | None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


_FENCE = re.compile(r"\A\s*```[\w-]*\n(.*?)\n?```\s*\Z", re.S)
_RESULT = re.compile(r"\A(ok|error)(?: (.*))?\Z", re.S)


def parse_target(text: str, action: Action, *, expect_patch: bool = False) -> Parsed:
    """Read generated text back; never raises. Results map to the action's call ids (by id,
    else by position, which is reported); `expect_patch` reports a missing patch line."""
    fenced = _FENCE.match(text)
    lines = [line.removesuffix("\r") for line in (fenced.group(1) if fenced else text).split("\n")]
    lines = [line for line in lines if line.strip()]
    problems: list[str] = []
    patch_lines = [line for line in lines if _is_patch_line(line)]
    body = [line for line in lines if not _is_patch_line(line)]
    patch = _read_patch(patch_lines, problems)
    if patch is None and not patch_lines and expect_patch:
        problems.append("no patch line")
    if isinstance(action, ToolCallsAction):
        observation: Observation | None = _read_results(body, action, problems)
    else:
        observation = _read_text(body, problems)
    return Parsed(observation, patch, problems)


def _is_patch_line(line: str) -> bool:
    if line.rstrip() == PATCH_PREFIX.strip():
        return True
    return line.startswith(PATCH_PREFIX) and not _RESULT.match(line[len(PATCH_PREFIX) :])


def _read_patch(lines: list[str], problems: list[str]) -> Patch | None:
    if not lines:
        return None
    if len(lines) > 1:
        problems.append(f"{len(lines)} patch lines; the last one is used")
    text = lines[-1][len(PATCH_PREFIX) :].strip()
    try:
        value: Any = json.loads(text)
    except ValueError as exc:
        problems.append(f"patch: not JSON ({exc})")
        return None
    shape = check(value)
    if shape:
        problems.extend(f"patch: {p}" for p in shape)
        return None
    result: Patch = value
    return result


def _decode(payload: str, where: str, problems: list[str]) -> str:
    if not payload.startswith('"'):
        return payload
    try:
        value = json.loads(payload)
    except ValueError:
        value = None
    if isinstance(value, str):
        return value
    problems.append(f"{where}: an unreadable quoted text; kept as written")
    return payload


def _structured(text: str) -> JSON:
    """The JSON in a result text, when it is an object or array (as the readers do)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def _split_id(line: str) -> tuple[str, str] | None:
    if line.startswith('"'):
        try:
            value, end = json.JSONDecoder().raw_decode(line)
        except ValueError:
            return None
        return (value, line[end:].removeprefix(" ")) if isinstance(value, str) else None
    head, _, rest = line.partition(" ")
    return head, rest


def _read_results(
    lines: list[str], action: ToolCallsAction, problems: list[str]
) -> ToolResultsObservation | None:
    ids = [call.id for call in action.calls]
    found: dict[int, ToolResult] = {}
    for n, line in enumerate(lines):
        where = f"result line {n + 1}"
        split = _split_id(line)
        matched = _RESULT.match(split[1]) if split else None
        if split is None or matched is None:
            problems.append(f"{where}: expected '<call id> ok|error <text>', got {line[:60]!r}")
            continue
        call_id, (flag, payload) = split[0], matched.groups()
        index = next((i for i, c in enumerate(ids) if c == call_id and i not in found), None)
        if index is None:
            index = n if n < len(ids) and n not in found else None
            known = "a repeated" if call_id in ids else "an unknown"
            fallback = f"taken as call {ids[index]!r}" if index is not None else "dropped"
            problems.append(f"{where}: {known} call id {call_id!r}; {fallback}")
            if index is None:
                continue
        text = _decode(payload or "", where, problems)
        if payload is None:
            problems.append(f"{where}: no result text")
        found[index] = ToolResult(ids[index], text, _structured(text), flag == "error")
    missing = [ids[i] for i in range(len(ids)) if i not in found]
    if missing:
        problems.append(f"no result for call {', '.join(map(repr, missing))}")
        return None
    return ToolResultsObservation([found[i] for i in range(len(ids))])


def _read_text(lines: list[str], problems: list[str]) -> TextObservation | None:
    if not lines:
        problems.append("no observation line")
        return None
    if len(lines) > 1:
        problems.append(f"expected one observation line, got {len(lines)}; joined them")
        return TextObservation("\n".join(lines))
    return TextObservation(_decode(lines[0], "observation", problems))


__all__ = [
    "BLOCKS",
    "HEADINGS",
    "READS_VERSIONS",
    "SERIALIZATION_VERSION",
    "TARGET_MARKER",
    "Parsed",
    "format_target",
    "parse_target",
    "prompt_from_messages",
    "render_blocks",
    "render_messages",
    "render_prompt",
    "render_target",
    "section",
    "target_format",
]
