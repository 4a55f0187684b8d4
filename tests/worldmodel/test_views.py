"""State views: a view fits its budget by shrinking structure with explicit markers, BFCL
shows only the called tools' classes, and the file system keeps the current directory's
subtree whole before its parents and siblings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simworld.data.records import Episode, TextAction, ToolCall, ToolCallsAction
from simworld.worldmodel.context import approx_tokens
from simworld.worldmodel.views import (
    BfclView,
    BudgetError,
    FrozenLakeView,
    JsonView,
    Level,
    shrink,
    view_for,
)


def _call(name: str) -> ToolCallsAction:
    return ToolCallsAction([ToolCall("c0", name, {}, "{}")])


def test_shrink_marks_what_it_leaves_out() -> None:
    value = {"s": "x" * 100, "xs": list(range(10)), "deep": {"a": {"b": 1}}, "k": 1}
    got = shrink(value, Level(depth=2, items=3, chars=10))
    assert got == {
        "s": "xxxxxxxxxx…(+90 chars)",
        "xs": [0, 1, 2, "…(7 more)"],
        "deep": {"a": "{…1 keys}"},
        "…": "(1 more keys)",
    }


def test_json_view_fits_or_says_how_much_it_needs() -> None:
    state = {"items": [{"id": i, "text": "word " * 50} for i in range(200)]}
    for budget in (2000, 300, 60, 10):
        text = JsonView().render(state, TextAction("x"), budget, approx_tokens)
        assert approx_tokens(text) <= budget
        json.loads(text)  # still JSON
    with pytest.raises(BudgetError, match="the state block needs at least 4 tokens but only 1"):
        JsonView().render(state, TextAction("x"), 1, approx_tokens)


def _cwd_node(fs: dict[str, Any]) -> dict[str, Any]:
    node = {"contents": fs["root"]}
    for part in fs["_cwd"].strip("/").split("/"):
        node = node["contents"][part]
    return node


def _bfcl_with_fs(train: list[Episode]) -> tuple[Episode, int]:
    """A long-context file-system step, the file system alone in its state, whose current
    directory holds under a quarter of the tree."""
    for episode in train:
        for index, step in enumerate(episode.steps):
            fs = (step.state or {}).get("GorillaFileSystem")
            if not fs or not fs["long_context"] or len(step.state) != 1:
                continue
            if len(json.dumps(_cwd_node(fs))) * 4 < len(json.dumps(fs)):
                return episode, index
    raise AssertionError("no such long-context file-system step in the bundle")


def test_bfcl_shows_only_the_called_tools_classes(train: list[Episode]) -> None:
    episode, state = next(
        (e, s.state)
        for e in train
        for s in e.steps
        if "GorillaFileSystem" in (s.state or {}) and len(s.state) == 2
    )
    other = next(name for name in state if name != "GorillaFileSystem")
    view = view_for(episode)
    assert isinstance(view, BfclView)
    shown = json.loads(view.render(state, _call("ls"), 100_000, approx_tokens))
    assert list(shown) == ["GorillaFileSystem"]
    assert shown["GorillaFileSystem"] == state["GorillaFileSystem"]  # whole when it fits
    unknown = json.loads(view.render(state, _call("no_such_tool"), 100_000, approx_tokens))
    assert list(unknown) == list(state) and other in unknown  # no known class: all of them


def test_the_file_system_view_keeps_the_cwd_subtree(train: list[Episode]) -> None:
    episode, index = _bfcl_with_fs(train)
    fs = episode.steps[index].state["GorillaFileSystem"]
    cwd_text = json.dumps(_cwd_node(fs), ensure_ascii=False, separators=(",", ":"))
    full = approx_tokens(json.dumps(fs, separators=(",", ":")))
    budget = approx_tokens(cwd_text) + 80
    assert budget < full / 2  # the long-context tree does not fit, the subtree does
    text = view_for(episode).render(episode.steps[index].state, _call("ls"), budget, approx_tokens)
    assert approx_tokens(text) <= budget
    assert cwd_text in text  # the current directory whole
    assert '"_cwd":"' + fs["_cwd"] + '"' in text and "…" in text  # the rest marked elided


def test_frozenlake_shows_the_whole_board(train: list[Episode]) -> None:
    lake = next(e for e in train if e.env == "frozenlake")
    state = lake.steps[0].state
    assert isinstance(view_for(lake), FrozenLakeView)
    text = view_for(lake).render(state, lake.steps[0].action, 200, approx_tokens)
    assert json.loads(text) == state
    with pytest.raises(BudgetError, match="state block"):
        view_for(lake).render(state, lake.steps[0].action, 20, approx_tokens)
