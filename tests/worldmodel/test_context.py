"""Contexts within budgets: on every bundled step (long-context BFCL included) the plain
prompt never exceeds its budget, with the default estimate and with a stricter counter;
blocks shrink before anything is refused (the called tools' schema descriptions last, and
only when whole schemas cannot fit); a refusal names the block."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simworld.data.records import Episode, Step, TextAction, ToolCallsAction
from simworld.worldmodel.context import (
    Budget,
    Context,
    approx_tokens,
    build_context,
    context_for_action,
    iter_contexts,
)
from simworld.worldmodel.render import render_prompt
from simworld.worldmodel.views import BudgetError


def test_every_bundled_prompt_fits_the_default_budget(
    train: list[Episode], contexts: list[tuple[Episode, Step, Context]]
) -> None:
    steps = sum(len(e.steps) for e in train)
    assert len(contexts) >= steps - 20  # only steps whose action alone is past it are refused
    assert any("long_context" in e.episode_id for e, _, _ in contexts)
    for _, _, ctx in contexts:
        assert approx_tokens(render_prompt(ctx)) <= Budget().total


def strict(text: str) -> int:
    """A harsher count than approx_tokens: one token per 2 characters, plus one per line."""
    return (len(text) + 1) // 2 + text.count("\n")


@pytest.mark.parametrize(("total", "most_refused"), [(600, 1000), (3000, 10)])
def test_a_stricter_counter_is_respected(
    train: list[Episode], total: int, most_refused: int
) -> None:
    """At 600 strict tokens many BFCL steps cannot hold their tool's schema (refused, by
    name); at 3000 only those with a giant action are refused."""
    budget = Budget(total, count=strict)
    refused = 0
    for episode in train[::3]:
        for index in range(len(episode.steps)):
            try:
                ctx = build_context(episode, index, budget)
            except BudgetError as exc:
                refused += 1
                assert exc.block in ("action", "tools", "state")
                continue
            assert strict(render_prompt(ctx)) <= total
    assert refused <= most_refused


def test_blocks_shrink_in_order(train: list[Episode]) -> None:
    episode = next(e for e in train if e.env == "bfcl" and len(e.steps) > 6)
    roomy = build_context(episode, 6, Budget(100_000))
    tight = build_context(episode, 6, Budget(500))
    assert roomy.history.startswith('["…(2 earlier steps)"')  # the last 4 of 6
    assert len(tight.state) < len(roomy.state) or roomy.state == tight.state
    assert tight.action == roomy.action  # the action is never cut
    assert '"tools":[{"name":' in tight.tools  # nor the called tool's schema


def _strip_descriptions(schema: object) -> object:
    if isinstance(schema, dict):
        return {k: _strip_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_strip_descriptions(v) for v in schema]
    return schema


def test_schemas_lose_descriptions_only_when_whole_ones_cannot_fit(train: list[Episode]) -> None:
    """displayCarStatus's output schema (~2,300 characters, mostly descriptions): at 1,000
    estimated tokens it stays whole; at 900 and below, where the whole schema cannot fit, the
    prompt still fits with every description inside the schemas left out (marked), and the
    schemas' structure (property names, types, required) kept exactly."""
    episode, index = next(
        (e, i)
        for e in train
        for i, s in enumerate(e.steps)
        if isinstance(s.action, ToolCallsAction)
        and any(c.name == "displayCarStatus" for c in s.action.calls)
    )
    spec = next(t for t in episode.tools if t.name == "displayCarStatus")
    whole = json.loads(build_context(episode, index, Budget(1000)).tools)["tools"][0]
    assert whole["output_schema"] == spec.output_schema and "schema_descriptions" not in whole
    for total in (900, 400):
        ctx = build_context(episode, index, Budget(total))
        assert approx_tokens(render_prompt(ctx)) <= total
        shown = json.loads(ctx.tools)["tools"][0]
        assert shown["schema_descriptions"] == "left out"
        assert shown["input_schema"] == _strip_descriptions(spec.input_schema)
        assert shown["output_schema"] == _strip_descriptions(spec.output_schema)
        assert ctx.action == build_context(episode, index, Budget(1000)).action


def test_refusals_name_the_block(train: list[Episode]) -> None:
    lake = next(e for e in train if e.env == "frozenlake")
    with pytest.raises(BudgetError, match="the action block needs"):
        build_context(lake, 0, Budget(5))
    with pytest.raises(BudgetError, match="the steering block needs"):
        build_context(lake, 0, Budget(60), steering=["be terse " * 40])
    with pytest.raises(BudgetError, match="the state block needs"):
        build_context(lake, 0, Budget(40))
    with pytest.raises(ValueError, match=r"Budget\.total must be positive"):
        Budget(0)
    with pytest.raises(ValueError, match=r"Budget\.shares takes positive weights"):
        Budget(shares={"action": 1.0})
    with pytest.raises(ValueError, match=r"Budget\.example must be >= 0"):
        Budget(example=-1)


def test_steering_and_live_contexts(train: list[Episode]) -> None:
    lake = next(e for e in train if e.env == "frozenlake")
    ctx = build_context(lake, 0, steering=["The ice is not slippery today."])
    assert ctx.steering == "- The ice is not slippery today."
    live = context_for_action(lake, lake.steps[-1].next_state, TextAction("LEFT"))
    assert live.target is None and live.action == "LEFT" and live.tracks_state
    assert len(list(iter_contexts([lake]))) == len(lake.steps)
    skipped: list[tuple[str, int, BudgetError]] = []
    assert list(iter_contexts([lake], Budget(5), skipped)) == []
    assert [(e, i) for e, i, _ in skipped] == [(lake.episode_id, i) for i in range(len(lake.steps))]
    no_state = replace(lake, steps=[replace(s, state=None) for s in lake.steps])
    ctx = build_context(no_state, 0)
    assert ctx.state == "" and not ctx.tracks_state and ctx.target and ctx.target.patch is None


def test_the_focused_view_fits_and_shows_what_the_action_names(train: list[Episode]) -> None:
    """With `state_focus` every BFCL prompt still fits its budget, and the state block takes
    up what the other blocks leave: a booking the action names is shown field by field
    (the plain view at the same budget leaves it as "{…6 keys}" or out)."""
    budget = replace(Budget(384), state_focus=True)
    bfcl = [e for e in train if e.env == "bfcl"]
    shown = plain_shown = 0
    for episode in bfcl[::2]:
        for index, step in enumerate(episode.steps):
            try:
                ctx = build_context(episode, index, budget)
            except BudgetError:
                with pytest.raises(BudgetError):
                    build_context(episode, index, Budget(384))
                continue
            assert approx_tokens(render_prompt(ctx)) <= budget.total
            call = step.action.calls[0] if isinstance(step.action, ToolCallsAction) else None
            booking = call.arguments.get("booking_id") if call and call.arguments else None
            record = ((step.state or {}).get("TravelAPI") or {}).get("booking_record") or {}
            if call is None or call.name != "retrieve_invoice" or booking not in record:
                continue
            date = json.dumps(record[booking]["travel_date"])
            shown += f'"travel_date":{date}' in ctx.state
            plain = build_context(episode, index, Budget(384))
            plain_shown += f'"travel_date":{date}' in plain.state
    assert shown >= 3 and shown > plain_shown
