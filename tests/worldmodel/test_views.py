"""State views: a view fits its budget by shrinking structure with explicit markers, BFCL
shows only the called tools' classes, and the file system keeps the current directory's
subtree whole before its parents and siblings. The action-focused view (`Focus`) keeps
what the action's arguments name, opened, and numbers before other entries, and never
fails where the plain view fits."""

from __future__ import annotations

import json
from typing import Any

import pytest

from simworld.data.records import Episode, TextAction, ToolCall, ToolCallsAction
from simworld.worldmodel.context import approx_tokens
from simworld.worldmodel.views import (
    BfclView,
    BudgetError,
    Focus,
    FrozenLakeView,
    JsonView,
    Level,
    shrink,
    view_for,
)


def _call(tool: str, /, **arguments: Any) -> ToolCallsAction:
    return ToolCallsAction([ToolCall("c0", tool, arguments, json.dumps(arguments))])


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


TRAVEL = {
    "TravelAPI": {
        "credit_card_list": {"card_1": {"number": "4876-6834", "holder": "M. Thompson"}},
        "booking_record": {
            f"booking_{i}": {
                "travel_date": f"2026-12-{10 + i}",
                "travel_from": "SFO",
                "travel_to": "LAX",
                "travel_class": "economy",
                "travel_cost": 950.0 + i,
            }
            for i in range(5)
        },
        "access_token": "token_abc123",
        "token_type": "Bearer",
        "user_first_name": "Michael",
        "invoice_counter": 17,
        "authenticated": True,
    }
}


def test_focus_keeps_the_named_entry_opened_and_numbers_first() -> None:
    action = _call("retrieve_invoice", booking_id="booking_3", access_token="token_abc123")
    focus = Focus.of(action)
    assert focus.terms == {"booking_3", "token_abc123"}
    level = Level(depth=2, items=3, chars=12)
    plain = shrink(TRAVEL, level)["TravelAPI"]
    focused = shrink(TRAVEL, level, focus)["TravelAPI"]
    # plain: the first three keys, the booking record collapsed below the depth limit
    assert list(plain)[:3] == ["credit_card_list", "booking_record", "access_token"]
    assert plain["booking_record"] == "{…5 keys}"
    # focused: the way to the named booking, the named token, then numbers and flags
    assert list(focused) == ["booking_record", "access_token", "invoice_counter", "…"]
    assert focused["booking_record"] == {
        "booking_0": "{…5 keys}",
        "booking_1": "{…5 keys}",
        "booking_3": TRAVEL["TravelAPI"]["booking_record"]["booking_3"],
        "…": "(2 more keys)",
    }  # the named booking opened, every field, though its siblings' depth is spent
    assert focused["…"] == "(4 more keys)"


def test_focus_names_list_items_by_their_id() -> None:
    tickets = [{"id": i, "title": f"ticket {i}", "status": "open"} for i in range(6)]
    queue = {"ticket_queue": tickets}
    level = Level(depth=2, items=2, chars=8)
    got = shrink(queue, level, Focus.of(_call("get_ticket", ticket_id=4)))
    assert got["ticket_queue"] == [
        "{…3 keys}",
        {"id": 4, "title": "ticket 4", "status": "open"},
        "…(4 more)",
    ]  # item 4 named (opened, whole), item 0 in its place; the marker counts the rest
    plain = shrink(queue, level)
    assert plain["ticket_queue"] == ["{…3 keys}", "{…3 keys}", "…(4 more)"]


def test_the_focused_view_fits_and_falls_back_to_the_plain_one() -> None:
    focused, plain = JsonView(focus=True), JsonView()
    action = _call("retrieve_invoice", booking_id="booking_3")
    for budget in (400, 120, 60, 30, 8):
        text = focused.render(TRAVEL, action, budget, approx_tokens)
        assert approx_tokens(text) <= budget
        json.loads(text)
    assert "2026-12-13" in focused.render(TRAVEL, action, 90, approx_tokens)
    assert "2026-12-13" not in plain.render(TRAVEL, action, 90, approx_tokens)
    # past what the named entry needs, the focused view ends as the plain one does
    assert focused.render(TRAVEL, action, 8, approx_tokens) == plain.render(
        TRAVEL, action, 8, approx_tokens
    )
    # a named entry too large for any focused level: the plain rendering, not a refusal
    huge = {"notes": {"big": {f"k{i}": "word " * 40 for i in range(40)}}, "n": 1, "m": 2}
    big = _call("read_note", name="big")
    assert focused.render(huge, big, 9, approx_tokens) == plain.render(huge, big, 9, approx_tokens)
    # without arguments the focus names nothing: only numbers and flags move ahead
    assert focused.render(TRAVEL, _call("logout"), 100_000, approx_tokens) == plain.render(
        TRAVEL, _call("logout"), 100_000, approx_tokens
    )


def test_an_action_naming_several_entries_keeps_them_all() -> None:
    # purchase_insurance names a booking, a card and the token: none of the three is left
    # out for the item limit (at one entry per container all three stay), and when they
    # cannot all be opened they are shown less opened, then unopened, not dropped
    action = _call(
        "purchase_insurance", booking_id="booking_3", card_id="card_1", access_token="token_abc123"
    )
    single = shrink(TRAVEL, Level(depth=3, items=1, chars=8), Focus.of(action))["TravelAPI"]
    assert list(single) == ["credit_card_list", "booking_record", "access_token", "…"]
    assert list(single["booking_record"]) == ["booking_3", "…"]
    focused = JsonView(focus=True)
    for budget in (70, 90, 120):
        text = focused.render(TRAVEL, action, budget, approx_tokens)
        assert approx_tokens(text) <= budget
        assert all(name in text for name in ("card_1", "booking_3", "token_abc123")), budget
    # with room, the named booking is opened (its date shown), its siblings are not
    roomy = focused.render(TRAVEL, action, 120, approx_tokens)
    assert "2026-12-13" in roomy and "2026-12-10" not in roomy


def test_the_focused_file_system_opens_the_named_file(train: list[Episode]) -> None:
    episode, index = _bfcl_with_fs(train)
    state = episode.steps[index].state
    fs = state["GorillaFileSystem"]
    cwd = _cwd_node(fs)["contents"]
    name, node = max(
        ((n, v) for n, v in cwd.items() if v.get("type") == "file"),
        key=lambda item: len(item[1]["content"]),
        default=(None, None),
    )
    if name is None:
        pytest.skip("the current directory holds no file")
    action = _call("tail", file_name=name)
    focused = BfclView.from_episode(episode, focus=True)
    plain = view_for(episode)
    content = json.dumps(node["content"], ensure_ascii=False)[1:-1]
    cwd_text = json.dumps(_cwd_node(fs), ensure_ascii=False, separators=(",", ":"))
    least = approx_tokens(cwd_text)
    for budget in (least // 2, least, least + 80):
        text = focused.render(state, action, budget, approx_tokens)
        assert approx_tokens(text) <= budget
        shown = len(content) if content in text else 0
        plain_text = plain.render(state, action, budget, approx_tokens)
        assert shown >= (len(content) if content in plain_text else 0)
