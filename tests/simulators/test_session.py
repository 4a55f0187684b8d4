"""Sessions: reset picks the task (or takes an explicit state), invalid calls get the real
API's error and leave the state alone, patches update the state, the env's check gives
reward and termination, the step limit truncates, a finished episode refuses more steps,
the same seed gives the same episode, the episode round-trips as a record, and the shipped
default world model runs a FrozenLake session.

    python -m pytest -q tests/simulators/test_session.py
"""

from __future__ import annotations

import json

import pytest
from scripted import ScriptedModel

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    JSON,
    Action,
    Episode,
    Observation,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
    ToolSpec,
    from_json,
    to_json,
)
from simworld.simulators.env import SimEnv, SimTask, StepCheck
from simworld.simulators.router import Router, RouterConfig
from simworld.simulators.session import Session, SessionError
from simworld.worldmodel.context import Context
from simworld.worldmodel.render import format_target

ADD = ToolSpec(
    "add",
    "Adds n to the counter.",
    {
        "type": "object",
        "required": ["n"],
        "properties": {"n": {"type": "integer"}},
        "additionalProperties": False,
    },
)


def add(call_id: str, n: JSON) -> ToolCallsAction:
    return ToolCallsAction([ToolCall(call_id, "add", {"n": n}, json.dumps({"n": n}))])


def goal(before: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
    """Reward 1 and the end when the counter reaches 5."""
    done = after["counter"] >= 5
    return StepCheck(float(done), done)


def make_env(max_steps: int = 4) -> SimEnv:
    tasks = {
        f"t{start}": SimTask(f"t{start}", "Reach 5.", {"counter": start}, tools=(ADD,))
        for start in (0, 1, 2, 3)
    }
    return SimEnv("tiny", tasks, "tool_calls", max_steps=max_steps, check=goal)


def adds(ctx: Context, attempt: int) -> str:
    """The true answer, read off the state block and the action."""
    counter = int(ctx.state.split('"counter":')[1].strip(" }\n"))
    assert isinstance(ctx.action_record, ToolCallsAction)
    call = ctx.action_record.calls[0]
    total = counter + (call.arguments or {})["n"]
    observation = ToolResultsObservation([ToolResult(call.id, json.dumps({"value": total}))])
    return format_target(observation, [{"op": "replace", "path": "/counter", "value": total}])


def session(env: SimEnv | None = None, model: ScriptedModel | None = None) -> Session:
    env = env or make_env()
    return Session(env, Router(env, model or ScriptedModel(adds)), episode_id="ep-1")


def test_reset_picks_the_task_by_id_or_seed_and_takes_an_explicit_state() -> None:
    s = session()
    first = s.reset(task_id="t2")
    assert first.task.id == "t2" and first.info["task_id"] == "t2"
    assert s.state() == {
        "episode_id": "ep-1",
        "task_id": "t2",
        "step_count": 0,
        "state": {"counter": 2},
        "done": False,
    }
    assert s.reset(seed=11).task.id == make_env().task_for(seed=11).id
    s.reset(task_id="t0", initial_state={"counter": 4})
    assert s.state()["state"] == {"counter": 4}
    with pytest.raises(KeyError, match="no task 'nope'"):
        s.reset(task_id="nope")


def test_a_step_patches_the_state_and_the_check_rewards_and_terminates() -> None:
    s = session()
    s.reset(task_id="t3")
    one = s.step(add("c1", 1))
    assert one.observation == ToolResultsObservation(
        [ToolResult("c1", '{"value": 4}', {"value": 4})]
    )
    assert (one.reward, one.terminated, one.truncated) == (0.0, False, False)
    assert one.info == {"source": "model", "retries": 0, "problems": [], "step": 0}
    assert s.state()["state"] == {"counter": 4}
    two = s.step(add("c2", 1))
    assert (two.reward, two.terminated, two.truncated) == (1.0, True, False)
    assert s.state()["done"] and s.state()["step_count"] == 2
    with pytest.raises(SessionError, match="is over \\(terminated\\)"):
        s.step(add("c3", 1))


def test_an_invalid_or_unknown_call_gets_an_error_and_leaves_the_state() -> None:
    s = session()
    s.reset(task_id="t1")
    bad = s.step(add("c1", "two"))
    assert bad.info["source"] == "validation" and s.state()["state"] == {"counter": 1}
    assert isinstance(bad.observation, ToolResultsObservation)
    (result,) = bad.observation.results
    assert result.is_error and result.call_id == "c1" and "'two' is not of type" in result.text
    unknown = ToolCallsAction([ToolCall("c2", "rm", {}, "{}")])
    (missing,) = s.step(unknown).observation.results  # type: ignore[union-attr]
    assert missing.is_error and "Unknown tool 'rm'" in missing.text
    assert s.state()["step_count"] == 2 and s.state()["state"] == {"counter": 1}


def test_a_patch_that_does_not_apply_leaves_the_state_and_is_reported() -> None:
    script = 'c1 ok {"value": 9}\npatch [{"op":"remove","path":"/nope"}]'
    s = session(model=ScriptedModel(lambda ctx, attempt: script))
    s.reset(task_id="t0")
    out = s.step(add("c1", 1))
    assert s.state()["state"] == {"counter": 0}
    assert isinstance(out.info["problems"], list)
    assert any(p.startswith("patch not applied") for p in out.info["problems"])


def test_the_step_limit_truncates_and_then_refuses_more_steps() -> None:
    s = session(make_env(max_steps=2))
    s.reset(task_id="t0")
    assert not s.step(add("a", 1)).truncated
    last = s.step(add("b", 1))
    assert last.truncated and not last.terminated and s.state()["done"]
    with pytest.raises(SessionError, match="truncated at 2 steps"):
        s.step(add("c", 1))
    s.reset(task_id="t0")  # a reset starts over
    assert s.step(add("d", 1)).info["step"] == 0


def test_steps_before_reset_after_close_or_of_the_wrong_kind_are_refused() -> None:
    s = session()
    with pytest.raises(SessionError, match="reset\\(\\) first"):
        s.step(add("a", 1))
    s.reset()
    with pytest.raises(ValueError, match="takes tool calls, not a text action"):
        s.step(TextAction("add 1"))
    with pytest.raises(ValueError, match="at least one call"):
        s.step(ToolCallsAction([]))
    text_env = SimEnv("chat", {"t": SimTask("t", "Talk.", None)}, "text")
    chat = Session(text_env, Router(text_env, ScriptedModel(adds)), episode_id="x")
    chat.reset()
    with pytest.raises(ValueError, match="takes a text action"):
        chat.step(add("a", 1))
    s.close()
    with pytest.raises(SessionError, match="closed"):
        s.step(add("a", 1))
    with pytest.raises(ValueError, match="the router answers env"):
        Session(make_env(), Router(text_env, ScriptedModel(adds)), episode_id="y")


def run(seed: int) -> Episode:
    s = session()
    s.reset(seed=seed)
    for n, action in enumerate([add("a", 1), add("b", "x"), add("c", 1), add("d", 1)]):
        if s.state()["done"]:
            break
        s.step(action)
        assert s.state()["step_count"] == n + 1
    return s.episode()


def test_the_same_seed_and_actions_give_the_same_episode_which_round_trips() -> None:
    one, two = run(7), run(7)
    assert to_json(one) == to_json(two)
    assert [s.info["source"] for s in one.steps][:2] == ["model", "validation"]
    assert one.steps[0].next_state == one.steps[2].state  # the rejected step changed nothing
    assert one.tools == [ADD] and one.seed == 7 and one.env == "tiny"
    text = json.dumps(to_json(one))
    assert from_json(Episode, json.loads(text)) == one


def frozenlake_env() -> SimEnv:
    """A FrozenLake-like env from one bundled val episode (its task from the first state)."""
    episode = load_bundled("val", env="frozenlake")[0]
    first = episode.steps[0].state
    task = SimTask(episode.task.id, episode.task.instruction, first, episode.initial_observation)

    def lake(before: JSON, action: Action, observation: Observation, after: JSON) -> StepCheck:
        cell = after["board"][after["position"] // after["size"]][after["position"] % after["size"]]
        return StepCheck(float(cell == "G"), cell in "GH")

    return SimEnv("frozenlake", {task.id: task}, "text", tuple(episode.rules), check=lake)


def test_the_default_world_model_runs_a_frozenlake_session() -> None:
    from simworld.worldmodel import load_world_model

    env = frozenlake_env()
    router = Router(env, load_world_model("default", device="cpu"), RouterConfig(output_retries=1))
    s = Session(env, router, episode_id="lake")
    reset = s.reset()
    assert isinstance(reset.observation, TextObservation)
    for move in ("DOWN", "RIGHT", "DOWN"):
        out = s.step(TextAction(move))
        assert isinstance(out.observation, TextObservation) and out.info["source"] == "model"
        if out.terminated:
            break
    recorded = s.episode()
    assert recorded.steps and all(st.state is not None for st in recorded.steps)
    assert router.stats_dict()["model"] == len(recorded.steps)
