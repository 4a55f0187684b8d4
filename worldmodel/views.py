"""Per-env state views: a state rendered as compact JSON within a token budget, shrunk step
by step (never cut blindly) until it fits.

    from simworld.worldmodel.views import view_for
    view = view_for(episode)                                  # by episode.env
    text = view.render(step.state, step.action, budget=300, count=approx_tokens)

Shrinking keeps the text valid JSON and says what it left out: a long string keeps its head
and ends "…(+812 chars)", a long list keeps its first items and then "…(12 more)", an
object keeps its first keys and then `"…":"(7 more keys)"`, and a container below the depth
limit becomes "{…5 keys}" or "[…9 items]". Views:

- `bfcl`: only the API classes whose tools the action calls (tool → class from the
  episode's tool specs); the file system shows the current directory's subtree first, then
  its parents and siblings as the budget allows;
- `frozenlake`: the whole board (a board with rows left out would mislead);
- `datascience`: the table profile, dropping per-column detail in levels for wide tables;
- any other env: the generic JSON view.

A view that cannot fit even its tightest rendering raises `BudgetError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Protocol

from simworld.data.records import JSON, Action, Episode, ToolCallsAction

Count = Callable[[str], int]


class BudgetError(ValueError):
    """A block that cannot be rendered within its budget, even at its smallest."""

    def __init__(self, block: str, needed: int, budget: int) -> None:
        self.block, self.needed, self.budget = block, needed, budget
        super().__init__(
            f"the {block} block needs at least {needed} tokens but only {budget} are left; "
            "raise the budget or shorten the episode's inputs"
        )


def compact(value: JSON) -> str:
    """JSON without spaces (keys in their order, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Level:
    """How much of a value one shrinking step keeps (None: no limit): containers `depth`
    levels deep, `items` entries per container, `chars` characters per string."""

    depth: int | None = None
    items: int | None = None
    chars: int | None = None


# From the whole value down to almost nothing; each step is tighter in every respect.
LEVELS = (
    Level(),
    Level(None, None, 2000),
    Level(None, 60, 800),
    Level(8, 30, 400),
    Level(6, 16, 160),
    Level(5, 10, 80),
    Level(4, 6, 40),
    Level(3, 4, 24),
    Level(2, 3, 12),
    Level(1, 2, 8),
    Level(0, 0, 0),
)
# The action-focused view's levels (Focus): one more before the last, which keeps only the
# way to what the action names and one entry per container (see fit_focused).
FOCUS_LEVELS = (*LEVELS[:-1], Level(1, 1, 8), LEVELS[-1])


def shrink(value: JSON, level: Level, focus: Focus | None = None) -> JSON:
    """`value` cut down to `level`, with explicit markers where something was left out.
    With a `focus` (the action-focused view, `Focus`), what the action names is kept first
    and shown in more detail: see `Focus`."""
    if isinstance(value, str):
        if level.chars is not None and len(value) > level.chars + 12:  # a marker costs ~12
            return f"{value[: level.chars]}…(+{len(value) - level.chars} chars)"
        return value
    if not isinstance(value, dict | list) or not value:
        return value
    if level.depth is not None and level.depth <= 0 and (focus is None or not focus.within(value)):
        return f"{{…{len(value)} keys}}" if isinstance(value, dict) else f"[…{len(value)} items]"
    inner = Level(None if level.depth is None else level.depth - 1, level.items, level.chars)
    keep = len(value) if level.items is None else level.items
    if isinstance(value, list):
        picked = range(min(keep, len(value))) if focus is None else focus.pick_items(value, keep)
        kept = [_shrink_item(value[i], inner, focus) for i in picked]
        return [*kept, f"…({len(value) - len(kept)} more)"] if len(value) > len(kept) else kept
    names = list(value)[:keep] if focus is None else focus.pick_keys(value, keep)
    out = {k: _shrink_item(value[k], inner, focus, k) for k in names}
    if len(value) > len(names):
        out["…"] = f"({len(value) - len(names)} more keys)"
    return out


def _shrink_item(value: JSON, inner: Level, focus: Focus | None, key: str | None = None) -> JSON:
    """An entry of a container: at `inner`, or more openly when the focus names it."""
    if focus is not None and focus.names(key, value):
        return shrink(value, focus.opened(inner), focus)
    return shrink(value, inner, focus)


@dataclass(frozen=True)
class Focus:
    """What an action names, for the action-focused state view (a checkpoint trained with
    `state_focus`): the values of its arguments (strings of 2+ characters and integers, at
    any depth). An entry is *named* when its key or its (scalar) value is one of them, or
    it is an object whose `id`-like field holds one. When a container must lose entries,
    named entries are kept first, then the ones with a named entry inside (these two are
    never left out, whatever the item limit, nor collapsed by the depth limit, so the way
    down stays open), then numbers, booleans and nulls (counters and flags: cheap, and
    often what the next observation is made of), then the rest; kept entries stay in their
    order. A named entry is shown at `opened`: two levels deeper than its siblings, with
    more items and longer strings (`open` 2), one level deeper (`open` 1), or at their
    level (`open` 0): the passes of `fit_focused`."""

    terms: frozenset[str]
    open: int = 2
    _inside: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, action: Action) -> Focus:
        terms: set[str] = set()

        def walk(value: JSON) -> None:
            if isinstance(value, bool) or value is None:
                return
            if isinstance(value, int):
                terms.add(str(value))
            elif isinstance(value, str) and len(value) >= 2:
                terms.add(value)
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        if isinstance(action, ToolCallsAction):
            for call in action.calls:
                walk(call.arguments)
        return cls(frozenset(terms))

    def names(self, key: str | None, value: JSON) -> bool:
        """Whether the entry `key: value` (key None: a list item) is one the action names."""
        if key is not None and key in self.terms:
            return True
        if not isinstance(value, dict | list):
            return _scalar_text(value) in self.terms
        if isinstance(value, dict):
            return any(
                k.lower().endswith("id") and _scalar_text(v) in self.terms for k, v in value.items()
            )
        return False

    def within(self, value: JSON) -> bool:
        """Whether a named entry lies anywhere inside `value` (memoized per object)."""
        if not isinstance(value, dict | list) or not self.terms:
            return False
        known = self._inside.get(id(value))
        if known is None:
            entries = value.items() if isinstance(value, dict) else ((None, v) for v in value)
            known = any(self.names(k, v) or self.within(v) for k, v in entries)
            self._inside[id(value)] = known
        return known

    def opened(self, level: Level) -> Level:
        if self.open == 2:
            return Level(
                None if level.depth is None else max(level.depth, 0) + 2,
                None if level.items is None else max(2 * level.items, 6),
                None if level.chars is None else max(4 * level.chars, 24),
            )
        if self.open == 1:
            return Level(
                None if level.depth is None else max(level.depth, 0) + 1,
                None if level.items is None else max(level.items, 3),
                None if level.chars is None else max(level.chars, 12),
            )
        return level

    def _rank(self, key: str | None, value: JSON) -> int:
        if self.names(key, value):
            return 0
        if self.within(value):
            return 1
        return 2 if value is None or isinstance(value, bool | int | float) else 3

    def pick_keys(self, value: Mapping[str, JSON], keep: int) -> list[str]:
        """The keys of `value` to show, in their order: `keep` of them by rank, or more
        when more are named or lead to a named entry (those are never left out)."""
        if keep >= len(value):
            return list(value)
        keys = list(value)
        return [keys[i] for i in self._pick([self._rank(k, value[k]) for k in keys], keep)]

    def pick_items(self, value: list[JSON], keep: int) -> list[int]:
        """The indices of the items of `value` to show, as `pick_keys` picks keys."""
        if keep >= len(value):
            return list(range(len(value)))
        return self._pick([self._rank(None, item) for item in value], keep)

    @staticmethod
    def _pick(ranks: list[int], keep: int) -> list[int]:
        keep = max(keep, sum(rank <= 1 for rank in ranks))
        return sorted(sorted(range(len(ranks)), key=ranks.__getitem__)[:keep])


def _scalar_text(value: JSON) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | str):
        return str(value)
    return None


def fit(render: Callable[[int], str], steps: int, budget: int, count: Count, block: str) -> str:
    """The first of `render(0) … render(steps - 1)` (ever smaller) that fits `budget`;
    bisects, since sizes fall with the step. BudgetError when even the last is too big."""
    first = render(0)
    if count(first) <= budget:
        return first
    last = render(steps - 1)
    if count(last) > budget:
        raise BudgetError(block, count(last), budget)
    lo, hi, best = 1, steps - 1, last  # render(hi) fits (it is `best`); render(lo - 1) not
    while lo < hi:
        mid = (lo + hi) // 2
        text = render(mid)
        if count(text) <= budget:
            hi, best = mid, text
        else:
            lo = mid + 1
    return best


class StateView(Protocol):
    """Renders a state for the model: compact, within `budget` tokens as `count` counts."""

    def render(self, state: JSON, action: Action, budget: int, count: Count) -> str: ...


def fit_focused(
    render: Callable[[int, Focus | None], str],
    steps: tuple[int, int],
    budget: int,
    count: Count,
    focus: Focus | None,
) -> str:
    """The focused view that fits `budget`: `fit` over `render(i, focus)` (`steps[1]` steps,
    whose last but one keeps a single entry per container and whose last names nothing;
    the plain view has `steps[0]`) down to two entries per container, with what the action
    names opened two levels, then one, then none (`Focus.open`: an action naming a
    booking, a card and a token keeps all three rather than one opened); then the
    single-entry step. When none fits, `fit` over the plain steps, so the focused view
    never fails where the plain one fits, and ends as the plain one does."""
    if focus is not None:
        for passed in (focus, replace(focus, open=1), replace(focus, open=0)):
            try:
                return fit(partial(_at, render, passed), steps[1] - 2, budget, count, "state")
            except BudgetError:
                pass
        single = render(steps[1] - 2, focus)
        if count(single) <= budget:
            return single
    return fit(lambda i: render(i, None), steps[0], budget, count, "state")


def _at(render: Callable[[int, Focus | None], str], focus: Focus, i: int) -> str:
    return render(i, focus)


class JsonView:
    """Any state: compact JSON, shrunk through LEVELS until it fits; with `focus`, what the
    action names is kept first and in more detail (`Focus`)."""

    def __init__(self, focus: bool = False) -> None:
        self.focus = focus

    def render(self, state: JSON, action: Action, budget: int, count: Count) -> str:
        return fit_focused(
            lambda i, f: compact(shrink(state, (LEVELS if f is None else FOCUS_LEVELS)[i], f)),
            (len(LEVELS), len(FOCUS_LEVELS)),
            budget,
            count,
            Focus.of(action) if self.focus else None,
        )


class FrozenLakeView:
    """The lake: board rows, the agent's position and the size, whole or not at all."""

    def render(self, state: JSON, action: Action, budget: int, count: Count) -> str:
        text = compact(state)
        if count(text) > budget:
            raise BudgetError("state", count(text), budget)
        return text


FILE_SYSTEM = "GorillaFileSystem"


class BfclView:
    """BFCL: {ApiClass: {...}} restricted to the classes the action's tools belong to (all
    of them when no called tool has a known class); the file system focused on its `_cwd`.
    With `focus`, what the action names is kept first and in more detail (`Focus`): the
    booking, order or stock an argument names, the file it names, the counters."""

    def __init__(self, tool_classes: Mapping[str, str], focus: bool = False) -> None:
        self.tool_classes = dict(tool_classes)
        self.focus = focus

    @classmethod
    def from_episode(cls, episode: Episode, focus: bool = False) -> BfclView:
        """Tool → class from the tool specs' `bfcl_class` annotation."""
        classes = {}
        for tool in episode.tools:
            name = tool.annotations.get("bfcl_class")
            if isinstance(name, str):
                classes[tool.name] = name
        return cls(classes, focus)

    def classes(self, state: dict[str, JSON], action: Action) -> list[str]:
        called = set()
        if isinstance(action, ToolCallsAction):
            called = {self.tool_classes.get(c.name) for c in action.calls}
        picked = [name for name in state if name in called]
        return picked or list(state)

    def render(self, state: JSON, action: Action, budget: int, count: Count) -> str:
        if not isinstance(state, dict):
            return JsonView(self.focus).render(state, action, budget, count)
        picked = {name: state[name] for name in self.classes(state, action)}

        def render(i: int, focus: Focus | None) -> str:
            outside, items, level = (_FOCUS_STEPS if focus is None else _FOCUSED_STEPS)[i]
            out = {}
            for name, value in picked.items():
                if name == FILE_SYSTEM:
                    away = Level(outside, items, level.chars)
                    out[name] = focus_file_system(value, level, away, focus)
                else:
                    out[name] = shrink(value, level, focus)
            return compact(out)

        focus = Focus.of(action) if self.focus else None
        steps = (len(_FOCUS_STEPS), len(_FOCUSED_STEPS))
        return fit_focused(render, steps, budget, count, focus)


# (how deep the tree outside the current directory is shown, how many of its entries per
# directory, the level inside the current directory): the outside shrinks first.
_FOCUS_STEPS: tuple[tuple[int | None, int | None, Level], ...] = (
    (None, None, LEVELS[0]),
    (None, None, LEVELS[1]),
    *((d, None, LEVELS[1]) for d in (3, 2, 1, 0)),
    *((0, k, LEVELS[1]) for k in (8, 2, 0)),
    *((0, 0, level) for level in LEVELS[2:]),
)
# The same for the action-focused view, whose levels end one step finer (FOCUS_LEVELS).
_FOCUSED_STEPS = (*_FOCUS_STEPS[:-1], (0, 0, FOCUS_LEVELS[-2]), (0, 0, FOCUS_LEVELS[-1]))


def focus_file_system(
    fs: JSON, level: Level, outside: Level | None = None, focus: Focus | None = None
) -> JSON:
    """The file system class state with its tree focused on `_cwd`: the current directory's
    subtree at `level`, the directories on the way to it, and their other entries at
    `outside` (by default, as `level`). A state of another shape is shrunk generically.
    With a `focus`, a file or directory the action names is shown at `focus.opened`."""
    if not isinstance(fs, dict) or not isinstance(fs.get("root"), dict):
        return shrink(fs, level, focus)
    cwd = fs.get("_cwd")
    parts = [p for p in cwd.split("/") if p] if isinstance(cwd, str) else []
    out: dict[str, JSON] = {}
    for key, value in fs.items():
        if key == "root":
            out[key] = _focus(value, parts, level, outside or level, focus)
        else:
            out[key] = shrink(value, Level(None, level.items, level.chars))
    return out


def _focus(
    tree: dict[str, JSON], parts: list[str], level: Level, away: Level, focus: Focus | None
) -> JSON:
    """One directory's entries: the one on the path to the cwd (focused), then at most
    `away.items` others, each `away.depth` directory levels deep."""
    out: dict[str, JSON] = {}
    others = 0
    for name, node in tree.items():
        on_path = bool(parts) and name == parts[0]
        if on_path and isinstance(node, dict) and isinstance(node.get("contents"), dict):
            if len(parts) == 1:
                out[name] = _node(node, level, focus)
            else:
                inner = _focus(node["contents"], parts[1:], level, away, focus)
                rest = {k: v for k, v in node.items() if k != "contents"}
                out[name] = {**rest, "contents": inner}
            continue
        others += 1
        if away.items is None or others <= away.items:
            out[name] = _node(node, away, focus, name)
    if away.items is not None and others > away.items:
        out["…"] = f"({others - away.items} more entries)"
    return out


def _node(node: JSON, level: Level, focus: Focus | None = None, name: str | None = None) -> JSON:
    """A file or directory node; the depth counts directory levels, not JSON levels. A node
    whose `name` the focus names is shown at `focus.opened(level)`."""
    if focus is not None and name is not None and name in focus.terms:
        level = focus.opened(level)
    if not isinstance(node, dict) or not isinstance(node.get("contents"), dict):
        return shrink(node, Level(None, level.items, level.chars))
    contents: dict[str, JSON] = node["contents"]
    rest = {k: v for k, v in node.items() if k != "contents"}
    spent = level.depth is not None and level.depth <= 0
    if spent and (focus is None or not focus.within(contents)):
        return {**rest, "contents": f"{{…{len(contents)} entries}}" if contents else {}}
    inner = Level(None if level.depth is None else level.depth - 1, level.items, level.chars)
    keep = len(contents) if level.items is None else level.items
    names = list(contents)[:keep] if focus is None else focus.pick_keys(contents, keep)
    out = {name: _node(contents[name], inner, focus, name) for name in names}
    if len(contents) > keep:
        out["…"] = f"({len(contents) - keep} more entries)"
    return {**rest, "contents": out}


class DataScienceView:
    """datascience: {"source", "pipeline", then the profile's shape, task, target, columns,
    sample}; detail leaves in levels until it fits: the sample rows, then the number
    columns' min and max, then every column's statistics and top categories (dtype and
    missing count stay), then the columns themselves (a summary: how many number columns,
    the category names, the missing counts), then the pipeline's older entries (the last 9,
    4, then 2 kept). Source, shape, task and target always stay."""

    def render(self, state: JSON, action: Action, budget: int, count: Count) -> str:
        if not isinstance(state, dict) or not isinstance(state.get("profile"), dict):
            return JsonView().render(state, action, budget, count)
        return fit(lambda i: compact(datascience_level(state, i)), 7, budget, count, "state")


def datascience_level(state: dict[str, JSON], level: int) -> JSON:
    """A datascience state at detail `level` (0: whole … 6: no columns, last 2 operations)."""
    profile, pipeline = dict(state["profile"]), list(state.get("pipeline", []))
    columns = profile.pop("columns", {})
    sample = profile.pop("sample", [])
    cut = {0: 9, 1: 9, 2: 4, 3: 2}.get(level - 3, len(pipeline))
    if len(pipeline) > cut:
        pipeline = [f"…({len(pipeline) - cut} earlier)", *pipeline[-cut:]]
    out = {"source": state.get("source"), "pipeline": pipeline, **profile}
    keep = {0: None, 1: None, 2: 4, 3: 2}.get(level, 0)
    if level <= 3 and isinstance(columns, dict):
        out["columns"] = {n: v[:keep] if keep else v for n, v in columns.items()}
    elif level <= 5 and isinstance(columns, dict):
        listed = {n: v for n, v in columns.items() if isinstance(v, list) and len(v) >= 2}
        out["columns"] = {
            "numbers": sum(v[0] in ("int", "float") for v in listed.values()),
            "categories": [n for n, v in listed.items() if v[0] == "category"],
            "missing": {n: v[1] for n, v in listed.items() if v[1]},
        }
    if level == 0:
        out["sample"] = sample
    return out


ViewFactory = Callable[[Episode, bool], StateView]

VIEWS: dict[str, ViewFactory] = {
    "bfcl": BfclView.from_episode,
    "datascience": lambda episode, focus: DataScienceView(),
    "frozenlake": lambda episode, focus: FrozenLakeView(),
}


def view_for(episode: Episode, focus: bool = False) -> StateView:
    """The state view of the episode's env (the generic JSON view for an unknown env);
    `focus`: the action-focused rendering (`Focus`) where the view has one."""
    factory = VIEWS.get(episode.env)
    return JsonView(focus) if factory is None else factory(episode, focus)


__all__ = [
    "LEVELS",
    "VIEWS",
    "BfclView",
    "BudgetError",
    "Count",
    "Focus",
    "FrozenLakeView",
    "JsonView",
    "Level",
    "StateView",
    "compact",
    "fit",
    "focus_file_system",
    "shrink",
    "view_for",
]
