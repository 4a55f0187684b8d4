"""The one serialization: render_target then parse_target gives back every bundled step's
observation and patch exactly; malformed model output is reported, never raised; the chat
and plain renderings carry the same blocks, the example block (a similar recorded step)
among them, right before the action; prompts without the action-focused state view are
byte for byte the ones version 2 rendered."""

from __future__ import annotations

import hashlib
import json

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    Episode,
    Step,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.worldmodel.context import Budget, Context, build_context, with_example
from simworld.worldmodel.patch import apply
from simworld.worldmodel.render import (
    HEADINGS,
    SERIALIZATION_VERSION,
    TARGET_MARKER,
    format_target,
    parse_target,
    prompt_from_messages,
    render_messages,
    render_prompt,
    render_target,
    section,
)
from simworld.worldmodel.retrieval import Retriever, recorded_steps
from simworld.worldmodel.views import BudgetError


def test_round_trip_on_every_bundled_step(contexts: list[tuple[Episode, Step, Context]]) -> None:
    assert {e.env for e, _, _ in contexts} == {"bfcl", "frozenlake"}
    for _, step, ctx in contexts:
        parsed = parse_target(render_target(ctx), step.action, expect_patch=True)
        assert parsed.problems == []
        assert parsed.observation == step.observation
        assert ctx.target is not None and parsed.patch == ctx.target.patch
        assert json.dumps(apply(step.state, parsed.patch)) == json.dumps(step.next_state)


def test_the_target_format() -> None:
    action = ToolCallsAction([ToolCall("a", "f", {}, "{}"), ToolCall("b c", "g", {}, "{}")])
    observation = ToolResultsObservation(
        [ToolResult("a", '{"x": 1}', {"x": 1}), ToolResult("b c", "two\nlines", None, True)]
    )
    text = format_target(observation, [])
    assert text == 'a ok {"x": 1}\n"b c" error "two\\nlines"\npatch []'
    assert parse_target(text, action).observation == observation
    lake = TextObservation("  (Down)\nSF\nAG\n")
    assert format_target(lake, None) == '"  (Down)\\nSF\\nAG\\n"'
    for odd in ("", '"quoted"', "patch me", " pad"):
        parsed = parse_target(format_target(TextObservation(odd), None), TextAction("x"))
        assert parsed.observation == TextObservation(odd) and parsed.ok
    assert SERIALIZATION_VERSION == 4


# sha256 of every plain prompt of the bundled val split (Budget(384), "over" for a refused
# step), as serialization version 2 rendered them: a checkpoint trained without the
# action-focused view must see the prompts it was trained on
VERSION_2_VAL_PROMPTS = "9c96bd3fc6418a06e52eb26f5d2e4b7246b30963da6ee9ef3b37f1b59b727b36"


def test_plain_prompts_are_the_ones_version_2_rendered() -> None:
    digest = hashlib.sha256()
    for episode in load_bundled("val"):
        for index in range(len(episode.steps)):
            try:
                prompt = render_prompt(build_context(episode, index, Budget(384)))
            except BudgetError:
                prompt = "over"
            digest.update(prompt.encode())
    assert digest.hexdigest() == VERSION_2_VAL_PROMPTS


CALLS = ToolCallsAction([ToolCall("c0", "ls", {}, "{}"), ToolCall("c1", "pwd", {}, "{}")])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no result for call 'c0', 'c1'"),
        ("c0 ok []", "no result for call 'c1'"),
        ('c0 ok []\nc1 ok "unterminated', "result line 2: an unreadable quoted text"),
        ("c0 ok []\nc1 ok {}\nc2 ok {}", "result line 3: an unknown call id 'c2'; dropped"),
        ("c0 ok []\nc9 ok {}", "result line 2: an unknown call id 'c9'; taken as call 'c1'"),
        ("c0 fine []\nc1 ok {}", "result line 1: expected '<call id> ok|error <text>'"),
        ("c0 ok []\nc1 ok {}\npatch [{", "patch: not JSON"),
        ("c0 ok []\nc1 ok {}\npatch [{}]", "patch: op 0: unknown op None"),
        ("c0 ok []\nc1 ok {}\npatch {}", "patch: a patch is a JSON array of ops, got dict"),
        ("c0 ok []\nc1 ok {}", "no patch line"),
        ("c0 ok []\nc1 ok {}\npatch []\npatch []", "2 patch lines; the last one is used"),
    ],
)
def test_malformed_output_is_reported_not_raised(text: str, problem: str) -> None:
    parsed = parse_target(text, CALLS, expect_patch=True)
    assert any(p.startswith(problem) for p in parsed.problems), parsed.problems


def test_text_observations_and_fences() -> None:
    parsed = parse_target('```\n"a\\nb"\npatch []\n```', TextAction("UP"))
    assert parsed.observation == TextObservation("a\nb") and parsed.patch == [] and parsed.ok
    parsed = parse_target("line one\nline two", TextAction("UP"))
    assert parsed.observation == TextObservation("line one\nline two")
    assert parsed.problems == ["expected one observation line, got 2; joined them"]
    assert parse_target("   ", TextAction("UP")).problems == ["no observation line"]


def test_chat_and_plain_carry_the_same_blocks(
    contexts: list[tuple[Episode, Step, Context]],
) -> None:
    for _, _, ctx in contexts[:: max(1, len(contexts) // 200)]:
        prompt = render_prompt(ctx)
        messages = render_messages(ctx)
        system, user = messages[0], messages[-1]
        assert prompt.endswith(TARGET_MARKER) and system["role"] == "system"
        assert prompt_from_messages(messages) == prompt  # the same blocks, both ways
        chat = "\n\n".join(m["content"] for m in messages) + "\n"
        for block in ("state", "task", "tools", "rules", "steering", "history", "action"):
            body = getattr(ctx, block)
            assert (f"## {HEADINGS[block]}\n{body}\n" in chat) == bool(body)
        assert user["content"] == f"## ACTION\n{ctx.action}"
        assert ("patch" in system["content"]) == ctx.tracks_state
        assert "Answer only with the prediction" in system["content"]


def test_the_example_block_comes_before_the_action_in_both_renderings(
    train: list[Episode], contexts: list[tuple[Episode, Step, Context]]
) -> None:
    budget = Budget(example=200)
    memory = Retriever([r for ep in train[::2] for r in recorded_steps(ep)])
    shown = 0
    for episode, _, ctx in contexts[1::97]:
        found = memory.neighbour(ctx.env, ctx.action_record, ctx.previous, episode.task.id)
        assert found is not None and found.scenario != episode.task.id
        filled = with_example(ctx, found, budget)
        if not filled.example:
            continue
        shown += 1
        prompt, messages = render_prompt(filled), render_messages(filled)
        block = f"## SIMILAR RECORDED STEP\n{filled.example}\n\n## ACTION\n{filled.action}\n"
        assert block in prompt and prompt_from_messages(messages) == prompt
        # chat: the example as a solved turn (its action, then its outcome), then the action
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        action, _, outcome = filled.example.partition("\n")
        assert messages[1]["content"] == f"## ACTION\n{action}"
        assert messages[2]["content"] == outcome
        # the block is an addition: without it the prompt is the one version 1 rendered
        assert prompt.replace(section("example", filled.example), "") == render_prompt(ctx)
        assert "SIMILAR RECORDED STEP" not in render_prompt(ctx)
    assert shown >= 0.9 * len(contexts[1::97])
