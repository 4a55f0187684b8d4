"""A transition's context: the blocks a world model is conditioned on, each rendered to a
string within a token budget, and the target (observation, and the state patch when the
data has states).

    from simworld.worldmodel.context import Budget, build_context, iter_contexts
    ctx = build_context(episode, 3, Budget(total=1024))
    for ctx in iter_contexts(episodes):          # every step of every episode
        ...

Blocks (in prompt order): `state` (the env's state view), `task` (the instruction plus the
user messages so far that it does not already hold), `tools` (the called tools' full
schemas and the other tools' names, as {"tools": [...], "other_tools": [...]}), `rules`
(one "- rule" per line), `steering` (one "- directive" per line), `history` (the last
steps as a compact JSON list of {"action", "observation"}), `example` (similar recorded
steps, `Budget.examples` of them, nearest first, a blank line apart: each its action, then
its outcome in the target format; see `with_example`), `action` (the
calls as compact JSON {"id", "name", "arguments"}, a list when there are several; or the
text action).

Budget: the action and the steering directives are kept whole, as are the called tools'
schemas; the rest of `Budget.total` goes to the other blocks by `Budget.shares` (a block
that needs less than its share gives the rest to the others), each shrinking itself to
fit. The rendered plain prompt never exceeds `total` tokens as `count` counts; when even
the smallest blocks do not fit, BudgetError names the block. The `example` block has its
own budget, `Budget.example` tokens on top of `total` (0: no block): it is filled after the
others (`with_example`, by the model at predict time or by the trainer), shrunk to fit
(the farthest steps left out before the nearest is shrunk), and left out when even the
smallest rendering of the nearest step alone does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from simworld.data.canonical import observation_text
from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    Step,
    TextAction,
    TextObservation,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
)
from simworld.worldmodel.patch import Patch, diff
from simworld.worldmodel.render import format_target, render_prompt, section
from simworld.worldmodel.retrieval import Recorded
from simworld.worldmodel.views import (
    LEVELS,
    BudgetError,
    Count,
    Level,
    compact,
    fit,
    shrink,
    view_for,
)


def approx_tokens(text: str) -> int:
    """A cheap token estimate: one per 3 characters, rounded up (BPE on JSON averages ~3-4
    characters a token, so this errs long). Pass a tokenizer's real count when there is one."""
    return (len(text) + 2) // 3


FLEXIBLE = ("state", "tools", "task", "history", "rules")
# The default split of what the kept-whole parts leave: the state view matters most; the
# other tools' names, the task, the history and the rules share the rest.
DEFAULT_SHARES: Mapping[str, float] = {
    "state": 0.55,
    "tools": 0.10,
    "task": 0.15,
    "history": 0.12,
    "rules": 0.08,
}


@dataclass(frozen=True)
class Budget:
    """How many tokens a plain prompt may take (`total`, as `count` counts), how that is
    split (`shares` over FLEXIBLE blocks), and how many earlier steps the history shows."""

    total: int = 1024
    count: Count = approx_tokens
    shares: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SHARES))
    history_steps: int = 4
    example: int = 0  # tokens for the similar-recorded-step block, on top of `total`
    examples: int = 1  # how many similar recorded steps the block shows, at most
    state_focus: bool = False  # the action-focused state view (views.Focus; version 3)

    def __post_init__(self) -> None:
        if self.total <= 0:
            raise ValueError(f"Budget.total must be positive, got {self.total}")
        if self.example < 0:
            raise ValueError(f"Budget.example must be >= 0 (0: no block), got {self.example}")
        if self.examples < 1:
            raise ValueError(f"Budget.examples must be >= 1, got {self.examples}")
        unknown = set(self.shares) - set(FLEXIBLE)
        if unknown or any(v <= 0 for v in self.shares.values()):
            raise ValueError(
                f"Budget.shares takes positive weights for {', '.join(FLEXIBLE)}; "
                f"got {dict(self.shares)}"
            )
        if self.history_steps < 0:
            raise ValueError(f"Budget.history_steps must be >= 0, got {self.history_steps}")


@dataclass(frozen=True)
class Target:
    """What the model must predict: the observation and, when states are known, the patch."""

    observation: Observation
    patch: Patch | None = None


@dataclass
class Context:
    """One transition's blocks as rendered strings ("" for an empty block) and its target
    (None for a live step, whose outcome is what the model is asked for)."""

    env: str
    state: str
    task: str
    tools: str
    rules: str
    steering: str
    history: str
    action: str
    action_kind: Literal["tool_calls", "text"]
    tracks_state: bool
    action_record: Action  # the action itself: the parser maps results to its call ids
    target: Target | None = None
    # A similar recorded step, solved (see `with_example`); "" until one is filled in.
    example: str = ""
    # The text of the observation the action follows: what retrieval matches on.
    previous: str = ""


def build_context(
    episode: Episode, index: int, budget: Budget | None = None, steering: Sequence[str] = ()
) -> Context:
    """The context of `episode.steps[index]` with its target. Steering defaults to the
    step's `info["steering"]` when that is a list of strings."""
    step = episode.steps[index]
    if not steering:
        given = step.info.get("steering")
        if isinstance(given, list) and all(isinstance(s, str) for s in given):
            steering = given
    patch = None
    if step.state is not None and step.next_state is not None:
        patch = diff(step.state, step.next_state)
    target = Target(step.observation, patch)
    earlier, messages = episode.steps[:index], _messages(episode.steps[: index + 1])
    ctx = _assemble(episode, earlier, messages, step.state, step.action, budget, steering)
    ctx.target = target
    ctx.tracks_state = patch is not None
    return ctx


def context_for_action(
    episode: Episode,
    state: JSON,
    action: Action,
    budget: Budget | None = None,
    steering: Sequence[str] = (),
) -> Context:
    """The context of a live step: `action` taken in `state` after all of `episode.steps`
    (a simulator's session so far). It has no target."""
    messages = _messages(episode.steps)
    return _assemble(episode, episode.steps, messages, state, action, budget, steering)


def iter_contexts(
    episodes: Iterable[Episode],
    budget: Budget | None = None,
    skipped: list[tuple[str, int, BudgetError]] | None = None,
) -> Iterator[Context]:
    """The context of every step of every episode, in order. A step that cannot fit the
    budget raises BudgetError, or, when a `skipped` list is given, is recorded there as
    (episode_id, step index, error) and left out."""
    for episode in episodes:
        for index in range(len(episode.steps)):
            try:
                ctx = build_context(episode, index, budget)
            except BudgetError as exc:
                if skipped is None:
                    raise
                skipped.append((episode.episode_id, index, exc))
                continue
            yield ctx


def with_example(
    ctx: Context, found: Recorded | Sequence[Recorded] | None, budget: Budget
) -> Context:
    """`ctx` with `found` (a similar recorded step, or several, nearest first) as its example
    block, a blank line between steps, shrunk to fit `budget.example` tokens, and the whole
    plain prompt `budget.total + budget.example`: at the largest level where the nearest
    fits, as many of the nearest steps as fit (whole steps before shrunk ones); `ctx`
    itself when there is no step, no example budget, or even the smallest rendering of the
    nearest does not fit (the block is left out whole, never cut)."""
    steps = [] if found is None else [found] if isinstance(found, Recorded) else list(found)
    if not steps or budget.example <= 0:
        return ctx
    count, limit = budget.count, budget.total + budget.example
    heading = count(section("example", "x")) - count("x")
    for level in _EXAMPLE_LEVELS:
        for n in range(len(steps), 0, -1):
            body = "\n\n".join(example_block(s, ctx.action_record, level) for s in steps[:n])
            if count(body) + heading > budget.example:
                continue
            shown = replace(ctx, example=body)
            if count(render_prompt(shown)) <= limit:
                return shown
    return ctx


def _messages(steps: Sequence[Step]) -> list[str]:
    return [m.content for s in steps for m in s.messages if m.role == "user"]


Renderer = Callable[[int], str]


def _assemble(
    episode: Episode,
    earlier: Sequence[Step],
    messages: list[str],
    state: JSON,
    action: Action,
    budget: Budget | None,
    steering: Sequence[str],
) -> Context:
    """The blocks within the budget, the called tools' schemas whole; only when that cannot
    fit, again with the descriptions inside those schemas left out (so every prompt that
    fits with whole schemas is the same as before this fallback existed)."""
    budget = budget or Budget()
    count = budget.count
    view = view_for(episode, budget.state_focus)
    renderers: dict[str, Renderer] = {
        "state": lambda b: "" if state is None else view.render(state, action, b, count),
        "tools": lambda b: tools_block(episode.tools, action, b, count),
        "task": lambda b: task_block(episode.task.instruction, messages, b, count),
        "history": lambda b: history_block(earlier, budget.history_steps, b, count),
        "rules": lambda b: rules_block(episode.rules, b, count),
    }
    fixed = {"action": action_block(action), "steering": _lines(steering)}
    kind: Literal["tool_calls", "text"] = (
        "tool_calls" if isinstance(action, ToolCallsAction) else "text"
    )
    before = earlier[-1].observation if earlier else episode.initial_observation
    ctx = Context(
        env=episode.env,
        state="",
        task="",
        tools="",
        rules="",
        steering=fixed["steering"],
        history="",
        action=fixed["action"],
        action_record=action,
        action_kind=kind,
        tracks_state=state is not None,
        previous=observation_text(before) if before is not None else "",
    )
    try:
        return _fill(ctx, renderers, budget)
    except BudgetError as whole:
        renderers["tools"] = lambda b: tools_block(episode.tools, action, b, count, True)
        try:
            return _fill(ctx, renderers, budget)
        except BudgetError as elided:
            raise elided from whole


def _fill(ctx: Context, renderers: Mapping[str, Renderer], budget: Budget) -> Context:
    """`ctx` with its flexible blocks rendered so that the whole prompt fits the budget."""
    count = budget.count
    spare = budget.total
    for _ in range(4):  # counts need not add up across blocks: re-fit on what is left over
        room = spare - count(render_prompt(ctx))
        if room < 0:
            block = "action" if count(section("action", ctx.action)) > budget.total else "steering"
            raise BudgetError(block, budget.total - room, budget.total)
        allotted = _allot(renderers, room, budget.shares, count)
        for name, tokens in allotted.items():
            heading = count(section(name, "x")) - count("x")
            setattr(ctx, name, renderers[name](max(tokens - heading, 0)))
        over = count(render_prompt(ctx)) - budget.total
        if over <= 0:
            return _widen_state(ctx, renderers, allotted, budget) if budget.state_focus else ctx
        for name in allotted:
            setattr(ctx, name, "")
        spare -= over + 2
    raise BudgetError("prompt", count(render_prompt(ctx)), budget.total)


def _widen_state(
    ctx: Context, renderers: Mapping[str, Renderer], allotted: Mapping[str, int], budget: Budget
) -> Context:
    """`ctx` with its state block re-rendered into what the fitted prompt left unused (the
    views shrink in coarse steps, so a block often ends well under its allotment), kept
    when the prompt still fits. Only with `state_focus`: plain prompts stay as they were."""
    if not ctx.state:
        return ctx
    count = budget.count
    heading = count(section("state", "x")) - count("x")
    slack = budget.total - count(render_prompt(ctx))
    if slack <= 0:
        return ctx
    wider = replace(ctx, state=renderers["state"](allotted["state"] - heading + slack))
    return wider if count(render_prompt(wider)) <= budget.total else ctx


def _allot(
    renderers: Mapping[str, Renderer], room: int, shares: Mapping[str, float], count: Count
) -> dict[str, int]:
    """Tokens per flexible block: first each block's smallest rendering, then the rest of
    `room` by share, a block taking no more than its whole rendering needs."""
    large = 1 << 30
    natural = {n: _cost(n, r(large), count) for n, r in renderers.items()}
    if sum(natural.values()) <= room:
        return natural
    allotted: dict[str, int] = {}
    for name, render in renderers.items():  # in priority order: state, tools, task, ...
        smallest = _smallest(name, render, count)
        if smallest > room - sum(allotted.values()):
            raise BudgetError(name, smallest, room - sum(allotted.values()))
        allotted[name] = smallest
    left = room - sum(allotted.values())
    wanting = {n for n in renderers if natural[n] > allotted[n] and shares.get(n, 0) > 0}
    while left > 0 and wanting:
        weight = sum(shares[n] for n in wanting)
        grants = {n: int(left * shares[n] / weight) for n in wanting}
        if not any(grants.values()):
            break
        for name, grant in grants.items():
            give = min(grant, natural[name] - allotted[name])
            allotted[name] += give
            left -= give
        wanting = {n for n in wanting if natural[n] > allotted[n]}
    return allotted


def _cost(name: str, body: str, count: Count) -> int:
    return count(section(name, body)) if body else 0


def _smallest(name: str, render: Renderer, count: Count) -> int:
    """The cost of a block's smallest rendering (what it shows at a budget of 0 tokens)."""
    try:
        return _cost(name, render(0), count)
    except BudgetError as exc:  # the block has a floor: its error says how much it needs
        heading = count(section(name, "x")) - count("x")
        return exc.needed + heading


# ---------------------------------------------------------------------------- the blocks


def action_value(action: Action, ids: bool = True) -> JSON:
    """An action as JSON: {"id", "name", "arguments"} per call (the raw argument string when
    it is not a JSON object), one object or a list; a text action is its text."""
    if isinstance(action, TextAction):
        return action.text
    calls = []
    for call in action.calls:
        arguments = call.raw_arguments if call.arguments is None else call.arguments
        calls.append({"id": call.id, "name": call.name, "arguments": arguments})
        if not ids:
            del calls[-1]["id"]
    return calls[0] if len(calls) == 1 else calls


def action_block(action: Action) -> str:
    return action.text if isinstance(action, TextAction) else compact(action_value(action))


def observation_value(observation: Observation) -> JSON:
    """An observation as JSON for the history: per result its structured JSON, else text."""
    if isinstance(observation, TextObservation):
        return observation.text
    values = [r.text if r.structured is None else r.structured for r in observation.results]
    return values[0] if len(values) == 1 else values


# The example block from whole to small: action arguments, result texts and the patch are
# cut (with markers) a step at a time.
_EXAMPLE_LEVELS = LEVELS[:9]


def example_block(found: Recorded, action: Action, level: Level = LEVELS[0]) -> str:
    """A recorded step as an example: its action (compact JSON without call ids, or its text
    as a JSON string) on the first line, then its outcome in the target format, its results
    under the ids of `action`'s calls (by position) so that a same outcome reads exactly as
    the target would. `level` shrinks the action and the outcome's texts."""
    observation = found.observation
    if isinstance(observation, TextObservation):
        shown: Observation = TextObservation(_elide(observation.text, level.chars))
    else:
        ids = [] if isinstance(action, TextAction) else [c.id for c in action.calls]
        named = [ids[i] if i < len(ids) else r.call_id for i, r in enumerate(observation.results)]
        results = [
            ToolResult(name, _elide(r.text, level.chars), None, r.is_error)
            for name, r in zip(named, observation.results, strict=True)
        ]
        shown = ToolResultsObservation(results)
    patch = None if found.patch is None else shrink(found.patch, level)
    head = compact(shrink(action_value(found.action, ids=False), level))
    return head + "\n" + format_target(shown, patch)


def _lines(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def history_block(earlier: Sequence[Step], keep: int, budget: int, count: Count) -> str:
    """The last `keep` steps, oldest first; older ones dropped first, then values shrunk."""
    entries = [
        {"action": action_value(s.action, False), "observation": observation_value(s.observation)}
        for s in (earlier[-keep:] if keep else [])
    ]
    steps = [(k, level) for k in range(len(entries), 0, -1) for level in LEVELS[0:6:2]]

    def render(i: int) -> str:
        if i == len(steps):
            return ""
        k, level = steps[i]
        gone = len(earlier) - k
        marker = [f"…({gone} earlier steps)"] * bool(gone)
        return compact(marker + [shrink(e, level) for e in entries[-k:]])

    return fit(render, len(steps) + 1, budget, count, "history")


def _elide(text: str, chars: int | None) -> str:
    if chars is None or len(text) <= chars + 24:
        return text
    if chars == 0:
        return ""
    head, tail = text[: chars * 2 // 3], text[len(text) - chars // 3 :]
    return f"{head}…({len(text) - len(head) - len(tail)} chars left out)…{tail}"


_CHARS = (None, 4000, 2000, 1000, 500, 250, 120, 60, 0)


def task_block(instruction: str, messages: Sequence[str], budget: int, count: Count) -> str:
    """The instruction and the user messages so far that it does not already hold; a long
    one keeps its head and tail around a marker."""
    text = "\n".join([instruction, *(m for m in messages if m and m not in instruction)])
    text = text.strip()
    return fit(lambda i: _elide(text, _CHARS[i]), len(_CHARS), budget, count, "task")


def rules_block(rules: Sequence[str], budget: int, count: Count) -> str:
    """The rules as "- rule" lines; long ones elided, then the last ones left out."""
    n = len(rules)
    steps = [(n, None), (n, 240), (n, 120), *((k, 120) for k in range(n - 1, -1, -1))]

    def render(i: int) -> str:
        if i == len(steps):
            return ""
        k, chars = steps[i]
        kept = [_elide(rule, chars) for rule in rules[:k]]
        return _lines(kept + [f"…({n - k} more rules)"] * (k < n))

    return fit(render, len(steps) + 1, budget, count, "rules")


def _tool_json(tool: ToolSpec, chars: int | None, schema_chars: int | None) -> dict[str, JSON]:
    out: dict[str, JSON] = {"name": tool.name, "description": _elide(tool.description, chars)}
    out["input_schema"] = _described(tool.input_schema, schema_chars)
    if tool.output_schema is not None:
        out["output_schema"] = _described(tool.output_schema, schema_chars)
    if schema_chars == 0:
        out["schema_descriptions"] = "left out"
    return out


def _described(schema: JSON, chars: int | None) -> JSON:
    """`schema` with every "description" string elided to `chars` (0: the key removed)."""
    if chars is None:
        return schema
    if isinstance(schema, list):
        return [_described(item, chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, JSON] = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            if chars > 0:
                out[key] = _elide(value, chars)
        else:
            out[key] = _described(value, chars)
    return out


# (other tools' names kept, the called tools' description chars), the tools block's steps
_TOOL_STEPS = ((None, None), *((k, None) for k in (24, 12, 6, 3, 0)), (0, 300), (0, 120), (0, 0))
# the chars kept of each description inside the called tools' schemas: steps added after
# _TOOL_STEPS only when whole schemas cannot fit (`_assemble`, `elide_schemas`)
_SCHEMA_CHARS = (120, 40, 0)


def tools_block(
    tools: Sequence[ToolSpec],
    action: Action,
    budget: int,
    count: Count,
    elide_schemas: bool = False,
) -> str:
    """{"tools": the called tools in full, "other_tools": the others' names}; the names
    are elided first, then the called tools' descriptions (their schemas stay whole); with
    `elide_schemas`, then the descriptions inside their schemas, down to none (marked)."""
    if not tools:
        return ""
    called = [] if isinstance(action, TextAction) else [c.name for c in action.calls]
    by_name = {tool.name: tool for tool in tools}
    names = list(dict.fromkeys(n for n in called if n in by_name))
    others = [tool.name for tool in tools if tool.name not in names]
    steps: list[tuple[int | None, int | None, int | None]]
    steps = [(items, chars, None) for items, chars in _TOOL_STEPS]
    if elide_schemas:
        steps += [(0, 0, schema_chars) for schema_chars in _SCHEMA_CHARS]

    def render(i: int) -> str:
        items, chars, schema_chars = steps[i]
        tools_json = [_tool_json(by_name[n], chars, schema_chars) for n in names]
        value: dict[str, JSON] = {"tools": tools_json}
        if others:
            value["other_tools"] = shrink(others, LEVELS[0] if items is None else _items(items))
        return compact(value)

    return fit(render, len(steps), budget, count, "tools")


def _items(items: int) -> Level:
    return Level(None, items, None)


__all__ = [
    "DEFAULT_SHARES",
    "FLEXIBLE",
    "Budget",
    "BudgetError",
    "Context",
    "Target",
    "approx_tokens",
    "build_context",
    "context_for_action",
    "example_block",
    "iter_contexts",
    "with_example",
]
