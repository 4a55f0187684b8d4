"""The router: rules before the cache before the model, cache hits re-keyed, output-schema
retries (bounded, reported, never raised), unreadable predictions, real-backend routing by
tool and by cost, shadow mode, and the call ids the model is asked with. (That importing
the simulators stays light is checked in tests/test_repo.py.)

    python -m pytest -q tests/simulators/test_router.py
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import pytest
from scripted import Script, ScriptedModel

from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    Step,
    Task,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    VolatileField,
)
from simworld.simulators.env import Answer, SimEnv, SimTask
from simworld.simulators.router import (
    RETRY_TEMPERATURE,
    UNREADABLE,
    Router,
    RouterConfig,
    canonical_observation,
)
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target

VALUE = {"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}
TOOLS = (
    ToolSpec("ping", "Answers pong.", {"type": "object", "properties": {}}),
    ToolSpec("get", "The counter.", {"type": "object", "properties": {}}, output_schema=VALUE),
    ToolSpec(
        "add",
        "Adds n to the counter.",
        {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
        output_schema=VALUE,
    ),
)


def calls(*specs: tuple[str, str, dict[str, JSON]]) -> ToolCallsAction:
    return ToolCallsAction([ToolCall(i, n, a, json.dumps(a)) for i, n, a in specs])


def results(*items: tuple[str, str]) -> ToolResultsObservation:
    return ToolResultsObservation([ToolResult(i, t, json.loads(t)) for i, t in items])


def truth(state: JSON, action: Action) -> Answer:
    """What the tiny env really answers: get -> the counter, add -> the new counter."""
    assert isinstance(action, ToolCallsAction)
    counter, out = state["counter"], []
    for call in action.calls:
        counter += (call.arguments or {}).get("n", 0)
        out.append(ToolResult(call.id, json.dumps({"value": counter}), {"value": counter}))
    return Answer(
        ToolResultsObservation(out), [{"op": "replace", "path": "/counter", "value": counter}]
    )


class FakeReal:
    """A real backend that counts its calls; `add` costs 5, anything else 0.5."""

    def __init__(self, fail: bool = False) -> None:
        self.executed = 0
        self.fail = fail

    def execute(self, state: JSON, action: Action) -> Answer:
        self.executed += 1
        if self.fail:
            raise ConnectionError("backend down")
        return truth(state, action)

    def cost(self, state: JSON, action: Action) -> float:
        assert isinstance(action, ToolCallsAction)
        return sum(5.0 if c.name == "add" else 0.5 for c in action.calls)


def pong(state: JSON, action: Action) -> Answer | None:
    if isinstance(action, ToolCallsAction) and [c.name for c in action.calls] == ["ping"]:
        return Answer(ToolResultsObservation([ToolResult(action.calls[0].id, "pong")]))
    return None


def make_env(real: FakeReal | None = None) -> SimEnv:
    task = SimTask("t0", "Count.", {"counter": 0}, tools=TOOLS)
    return SimEnv("tiny", {"t0": task}, "tool_calls", responder=pong, real=real)


def model_truth(ctx: Context, attempt: int) -> str:
    """The right answer, read off the context's state block and action."""
    state = {"counter": int(ctx.state.split('"counter":')[1].strip(" }\n"))}
    answer = truth(state, ctx.action_record)
    return format_target(answer.observation, answer.patch)


def history(env: SimEnv, steps: Sequence[Step] = ()) -> Episode:
    task = env.tasks["t0"]
    return Episode("e", env.name, Task(task.id, task.instruction), list(steps), list(task.tools))


STATE = {"counter": 3}


def test_rules_answer_before_the_cache_and_the_model() -> None:
    env, model = make_env(), ScriptedModel(model_truth)
    router = Router(env, model)
    for call_id in ("a", "b"):
        routed = router.answer(history(env), STATE, calls((call_id, "ping", {})), seed=0)
        assert routed.source == "rules"
        assert routed.answer.observation == ToolResultsObservation([ToolResult(call_id, "pong")])
    assert model.cfgs == [] and router.cache is not None and len(router.cache) == 0
    assert router.stats_dict()["rules"] == 2


def test_second_identical_step_is_a_cache_hit_with_its_call_ids() -> None:
    env, model = make_env(), ScriptedModel(model_truth)
    router = Router(env, model)
    first = router.answer(history(env), STATE, calls(("c1", "add", {"n": 2})), seed=0)
    again = router.answer(history(env), dict(STATE), calls(("c9", "add", {"n": 2})), seed=1)
    assert (first.source, again.source) == ("model", "cache")
    assert again.answer.observation == results(("c9", '{"value": 5}'))
    assert (
        again.answer.patch
        == first.answer.patch
        == [{"op": "replace", "path": "/counter", "value": 5}]
    )
    other = router.answer(history(env), {"counter": 4}, calls(("c2", "add", {"n": 2})), seed=0)
    assert other.source == "model" and len(model.cfgs) == 2
    off = Router(env, ScriptedModel(model_truth), RouterConfig(use_cache=False))
    off.answer(history(env), STATE, calls(("c1", "add", {"n": 2})), seed=0)
    assert off.answer(history(env), STATE, calls(("c1", "add", {"n": 2})), 0).source == "model"


def test_without_state_the_cache_keys_on_the_history() -> None:
    task = SimTask("t0", "Talk.", None)
    env = SimEnv("chat", {"t0": task}, "text")
    model = ScriptedModel(lambda ctx, attempt: '"heard you"')
    router = Router(env, model)
    empty = Episode("e", "chat", Task("t0"), [])
    assert router.answer(empty, None, TextAction("hi"), 0).source == "model"
    assert router.answer(empty, None, TextAction("hi"), 0).source == "cache"
    later = Episode("e", "chat", Task("t0"), [Step(TextAction("x"), TextObservation("y"))])
    assert router.answer(later, None, TextAction("hi"), 0).source == "model"


def wrong_first(times: int) -> Script:
    def script(ctx: Context, attempt: int) -> str:
        if attempt < times:  # a result that breaks the output schema
            return f'{ctx.action_record.calls[0].id} ok {{"value": "many"}}\npatch []'  # type: ignore[union-attr]
        return model_truth(ctx, attempt)

    return script


def test_a_result_that_breaks_the_output_schema_is_retried_with_seeded_sampling() -> None:
    env, model = make_env(), ScriptedModel(wrong_first(2), max_new_tokens=77)
    router = Router(env, model)
    routed = router.answer(history(env), STATE, calls(("c", "get", {})), seed=5)
    assert (routed.source, routed.retries, routed.problems) == ("model", 2, [])
    assert routed.answer.observation == results(("c", '{"value": 3}'))
    first, *retries = model.cfgs
    assert first is None  # the model's own (greedy) config
    assert all(c is not None and c.do_sample and c.max_new_tokens == 77 for c in retries)
    assert all(c is not None and c.temperature == RETRY_TEMPERATURE < 1 for c in retries)
    assert len({c.seed for c in retries if c is not None}) == 2
    again = ScriptedModel(wrong_first(2), max_new_tokens=77)
    Router(env, again).answer(history(env), STATE, calls(("c", "get", {})), seed=5)
    assert again.cfgs == model.cfgs  # the same seed samples the same way
    assert router.stats_dict()["retries"] == 2 and router.stats_dict()["unreadable"] == 0


def test_exhausted_retries_are_reported_not_raised_nor_cached() -> None:
    env, model = make_env(), ScriptedModel(wrong_first(99))
    router = Router(env, model, RouterConfig(output_retries=1))
    routed = router.answer(history(env), STATE, calls(("c", "get", {})), seed=0)
    assert routed.retries == 1 and len(model.cfgs) == 2
    assert routed.problems and "breaks the output schema" in routed.problems[0]
    assert routed.answer.observation == results(("c", '{"value": "many"}'))  # the last try
    assert router.answer(history(env), STATE, calls(("c", "get", {})), 0).source == "model"
    assert router.stats_dict()["unreadable"] == 2


def test_error_results_are_exempt_from_the_output_schema() -> None:
    model = ScriptedModel(lambda ctx, attempt: 'call_0_0 error {"oops": 1}\npatch []')
    routed = Router(make_env(), model).answer(
        history(make_env()), STATE, calls(("c", "get", {})), seed=0
    )
    assert routed.retries == 0 and routed.problems == []


def test_an_unreadable_prediction_becomes_error_results() -> None:
    env, model = make_env(), ScriptedModel(lambda ctx, attempt: "gibberish")
    action = calls(("a", "get", {}), ("b", "add", {"n": 1}))
    routed = Router(env, model).answer(history(env), STATE, action, seed=0)
    assert routed.retries == 2 and routed.problems and routed.answer.patch is None
    observation = routed.answer.observation
    assert isinstance(observation, ToolResultsObservation)
    assert [r.call_id for r in observation.results] == ["a", "b"]
    assert all(r.is_error and UNREADABLE in r.text for r in observation.results)
    assert observation.results[0].structured == {"error": UNREADABLE}  # the env's error style
    text_env = SimEnv("chat", {"t0": SimTask("t0", "Talk.", None)}, "text")
    text = Router(text_env, ScriptedModel(lambda ctx, attempt: "")).answer(
        Episode("e", "chat", Task("t0"), []), None, TextAction("hi"), 0
    )
    assert text.answer.observation == TextObservation(UNREADABLE)


def test_real_tools_route_whole_actions_to_the_real_backend() -> None:
    real, model = FakeReal(), ScriptedModel(model_truth)
    router = Router(make_env(real), model, RouterConfig(real_tools=frozenset({"get"})))
    env = router.env
    routed = router.answer(history(env), STATE, calls(("c", "get", {})), seed=0)
    assert routed.source == "real" and real.executed == 1 and model.cfgs == []
    mixed = calls(("c", "get", {}), ("d", "add", {"n": 1}))
    assert router.answer(history(env), STATE, mixed, seed=0).source == "model"
    assert router.answer(history(env), STATE, calls(("c", "ping", {})), 0).source == "rules"
    assert real.executed == 1
    assert Router(make_env(real), model).answer(
        history(env), STATE, calls(("c", "get", {})), 0
    ).source in ("model", "cache")  # off by default


def test_the_cost_threshold_routes_cheap_steps_to_the_real_backend() -> None:
    real = FakeReal()
    router = Router(make_env(real), ScriptedModel(model_truth), RouterConfig(max_real_cost=1.0))
    env = router.env
    assert router.answer(history(env), STATE, calls(("c", "get", {})), 0).source == "real"
    assert router.answer(history(env), STATE, calls(("c", "add", {"n": 1})), 0).source == "model"
    stats = router.stats_dict()
    assert (stats["real"], stats["model"]) == (1, 1)


def test_real_routing_needs_a_backend_and_known_tools() -> None:
    with pytest.raises(ValueError, match="no real backend"):
        Router(make_env(), ScriptedModel(model_truth), RouterConfig(real_tools=frozenset({"get"})))
    with pytest.raises(ValueError, match="does not have"):
        Router(
            make_env(FakeReal()),
            ScriptedModel(model_truth),
            RouterConfig(real_tools=frozenset({"rm"})),
        )
    with pytest.raises(ValueError, match="output_retries"):
        RouterConfig(output_retries=-1)
    with pytest.raises(TypeError, match="set of tool names"):
        RouterConfig(real_tools="get")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no world model"):
        Router(make_env(), None).answer(history(make_env()), STATE, calls(("c", "get", {})), 0)


def test_shadow_mode_records_matches_and_mismatches() -> None:
    real = FakeReal()
    off_by_one = ScriptedModel(lambda ctx, attempt: 'c ok {"value": 99}\npatch []')
    router = Router(
        make_env(real), ScriptedModel(model_truth), RouterConfig(shadow=True, use_cache=False)
    )
    env = router.env
    same = router.answer(history(env), STATE, calls(("c", "get", {})), 0)
    assert same.source == "model" and same.shadow is not None
    assert same.shadow.json_canonical_match and same.shadow.real.observation == results(
        ("c", '{"value": 3}')
    )
    router.model = off_by_one
    differs = router.answer(history(env), STATE, calls(("c", "get", {})), 0)
    assert differs.shadow is not None and not differs.shadow.json_canonical_match
    assert router.answer(history(env), STATE, calls(("c", "ping", {})), 0).shadow is not None
    stats = router.stats_dict()
    assert (stats["shadow_steps"], stats["shadow_matches"], real.executed) == (3, 1, 3)


def test_a_failing_shadow_backend_never_fails_the_step() -> None:
    router = Router(
        make_env(FakeReal(fail=True)), ScriptedModel(model_truth), RouterConfig(shadow=True)
    )
    routed = router.answer(history(router.env), STATE, calls(("c", "get", {})), 0)
    assert routed.source == "model" and routed.shadow is None
    assert routed.problems == ["shadow: the real backend failed: ConnectionError: backend down"]
    assert router.stats_dict()["shadow_errors"] == 1


def test_canonical_observation_ignores_key_order_and_outer_space() -> None:
    a: Observation = results(("x", '{"a": 1, "b": [1, 2]}'))
    b: Observation = results(("y", '{"b":[1,2],"a":1}'))
    assert canonical_observation(a) == canonical_observation(b)
    assert canonical_observation(TextObservation(" hi\n")) == canonical_observation(
        TextObservation("hi")
    )
    err = ToolResultsObservation([ToolResult("x", '{"a": 1}', is_error=True)])
    assert canonical_observation(err) != canonical_observation(results(("x", '{"a": 1}')))


def test_the_model_sees_call_ids_in_the_recorded_form_and_the_client_gets_its_own() -> None:
    env, seen = make_env(), []

    def echo_ids(ctx: Context, attempt: int) -> str:
        assert isinstance(ctx.action_record, ToolCallsAction)
        seen.append([c.id for c in ctx.action_record.calls])
        return model_truth(ctx, attempt)

    router = Router(env, ScriptedModel(echo_ids))
    action = calls(("toolu_01A", "add", {"n": 1}), ("call-xyz", "get", {}))
    routed = router.answer(history(env), STATE, action, seed=0)
    assert seen == [["call_0_0", "call_0_1"]]  # the id form of the bundled data
    assert routed.problems == [] and routed.retries == 0
    assert routed.answer.observation == results(
        ("toolu_01A", '{"value": 4}'), ("call-xyz", '{"value": 4}')
    )


def test_the_env_names_the_id_form_its_model_is_asked_in() -> None:
    seen: list[list[str]] = []

    def echo_ids(ctx: Context, attempt: int) -> str:
        assert isinstance(ctx.action_record, ToolCallsAction)
        seen.append([c.id for c in ctx.action_record.calls])
        return model_truth(ctx, attempt)

    env = replace(make_env(), call_id_form="call_0_{index}")
    earlier = Step(calls(("a", "ping", {})), ToolResultsObservation([ToolResult("a", "pong")]))
    routed = Router(env, ScriptedModel(echo_ids)).answer(
        history(env, [earlier] * 12), STATE, calls(("mine", "get", {})), seed=0
    )
    assert seen == [["call_0_0"]]  # step 12, asked as the recorded data's turn 0
    assert routed.answer.observation == results(("mine", '{"value": 3}'))
    with pytest.raises(ValueError, match="only"):
        replace(make_env(), call_id_form="call_{turn}")
    with pytest.raises(ValueError, match="tell the calls"):
        replace(make_env(), call_id_form="call_{step}")


def test_shadow_mode_compares_volatile_fields_by_type_and_format() -> None:
    token = VolatileField("token", "token", pattern=r'"[a-z]{3}[0-9]{3}"')

    class TokenReal(FakeReal):
        def execute(self, state: JSON, action: Action) -> Answer:
            assert isinstance(action, ToolCallsAction)
            return Answer(results((action.calls[0].id, '{"token": "abc123", "ok": true}')))

    def answering(text: str) -> ScriptedModel:
        return ScriptedModel(lambda ctx, attempt: f"call_0_0 ok {text}\npatch []")

    env = make_env(TokenReal())
    env = SimEnv(env.name, env.tasks, "tool_calls", real=env.real, volatile=(token,))
    config = RouterConfig(shadow=True, use_cache=False)
    matches = []
    for text in ('{"ok": true, "token": "zzz999"}', '{"ok": true, "token": "not a token"}'):
        routed = Router(env, answering(text), config).answer(
            history(env), STATE, calls(("c", "ping2", {})), 0
        )
        assert routed.shadow is not None
        matches.append(routed.shadow.json_canonical_match)
    assert matches == [True, False]  # another token of the right format; a malformed one
