"""The simulated envs: loading by name, tasks by id and seed, BFCL's error text, FrozenLake's
check, rendering parity with every recorded observation, the real backends, and light imports
(BFCL's real backend: test_bfcl_real.py; the textworld env: test_textworld_env.py).

    python -m pytest -q tests/simulators/test_envs.py
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from simworld.data.bundle import load_bundled
from simworld.data.records import (
    JSON,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResultsObservation,
)
from simworld.simulators.env import SimEnv
from simworld.simulators.envs import SIM_ENVS, FrozenLakeReal, MockReal, load_sim_env
from simworld.simulators.envs.frozenlake import ACTIONS, check, render, slip_targets
from simworld.simulators.validation import validate_calls


def calls(*specs: tuple[str, dict[str, JSON]]) -> ToolCallsAction:
    return ToolCallsAction(
        [
            ToolCall(f"call_{i}", name, args, json.dumps(args))
            for i, (name, args) in enumerate(specs)
        ]
    )


def lake(position: int, board: tuple[str, ...] = ("SFFF", "FHFH", "FFFH", "HFFG")) -> JSON:
    return {"board": list(board), "position": position, "size": len(board)}


# textworld compiles its games on first use (seconds each): that load is a slow test.
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "textworld" else n for n in SIM_ENVS],
)
def test_each_env_loads_once_with_tasks(name: str) -> None:
    env = load_sim_env(name)
    assert isinstance(env, SimEnv) and env.name == name and env.tasks
    assert load_sim_env(name) is env  # cached per process
    first = next(iter(env.tasks))
    assert env.task_for(first).id == first
    assert env.task_for(seed=5) == env.task_for(seed=5)
    with pytest.raises(KeyError, match="has no task 'nope'"):
        env.task_for("nope")


def test_unknown_env_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="bfcl, datascience, frozenlake, mock, search"):
        load_sim_env("chess")


def test_bfcl_tasks_hold_tools_state_and_seeded_choice() -> None:
    env = load_sim_env("bfcl")
    assert len(env.tasks) == 200 and env.action_kind == "tool_calls" and env.max_steps == 50
    task = env.task_for("bfcl-4")
    assert task.tools and task.apis and isinstance(task.initial_state, dict)
    assert set(task.initial_state) == set(task.apis)  # state is {ClassName: {...}}
    assert {task.id for task in (env.task_for(seed=s) for s in range(30))} != {"bfcl-0"}
    assert {v.key for v in env.volatile} >= {"new_id", "access_token", "timestamp"}


def test_bfcl_error_style_matches_every_recorded_missing_arg_error() -> None:
    env = load_sim_env("bfcl")
    compared = 0
    for episode in load_bundled("val", env="bfcl"):
        if episode.provenance.policy != "off_policy:missing_arg":
            continue
        tools = {tool.name: tool for tool in env.tasks[episode.task.id].tools}
        for step in episode.steps:
            assert isinstance(step.action, ToolCallsAction)
            assert isinstance(step.observation, ToolResultsObservation)
            result = step.observation.results[0]
            if step.info["policy"] != "off_policy:missing_arg" or not result.is_error:
                continue
            checks = validate_calls(step.action, tools, style=env.error_style)
            assert checks[0].text == result.text
            compared += 1
    assert compared == 34  # every missing-arg error of the val split


def test_frozenlake_check_on_goal_hole_and_ice() -> None:
    def outcome(before: int, after: JSON) -> tuple[float, bool]:
        result = check(lake(before), TextAction("DOWN"), TextObservation(""), after)
        return result.reward, result.terminated

    assert outcome(14, lake(15)) == (1.0, True)  # G
    assert outcome(4, lake(5)) == (0.0, True)  # H
    assert outcome(0, lake(4)) == (0.0, False)  # F
    assert outcome(0, lake(0)) == (0.0, False)  # S
    assert outcome(0, {"board": ["SF", "FG"], "position": 99, "size": 2}) == (0.0, False)


def test_frozenlake_rendering_equals_every_recorded_val_observation() -> None:
    steps = resets = 0
    for episode in load_bundled("val", env="frozenlake"):
        assert episode.initial_observation == TextObservation(render(episode.initial_state, None))
        resets += 1
        for step in episode.steps:
            assert isinstance(step.action, TextAction)
            assert step.observation == TextObservation(render(step.next_state, step.action.text))
            assert step.info["next_position"] in slip_targets(step.state, step.action.text)
            expected = check(step.state, step.action, step.observation, step.next_state)
            assert (expected.reward, expected.terminated) == (step.reward, step.terminated)
            steps += 1
    assert (resets, steps) == (40, 1210)


def test_frozenlake_responder_answers_invalid_actions_only() -> None:
    env = load_sim_env("frozenlake")
    assert env.responder is not None and env.max_steps == 200 and env.action_kind == "text"
    assert env.responder(lake(0), TextAction("DOWN")) is None
    answer = env.responder(lake(0), TextAction("down"))
    assert answer is not None and answer.patch == []
    assert isinstance(answer.observation, TextObservation)
    assert all(a in answer.observation.text for a in ACTIONS)
    assert answer.observation.text.endswith(render(lake(0), None))


def test_frozenlake_real_slips_a_third_each_way_and_repeats_per_seed() -> None:
    state = lake(9)  # row 2, col 1: DOWN lands on 13, LEFT-slip on 8, RIGHT-slip on 10
    real = FrozenLakeReal(seed=1)
    landed: Counter[int] = Counter()
    for _ in range(3000):
        answer = real.execute(state, TextAction("DOWN"))
        landed[answer.patch[0]["value"] if answer.patch else 9] += 1
    assert set(landed) == {8, 13, 10}
    assert all(900 < n < 1100 for n in landed.values()), landed
    draws = [FrozenLakeReal(7).execute(state, TextAction("UP")) for _ in range(2)]
    assert draws[0] == draws[1] and load_sim_env("frozenlake").real is not None
    corner = FrozenLakeReal(0).execute(lake(0), TextAction("UP"))  # UP stays or slips
    assert corner.patch in ([], [{"op": "replace", "path": "/position", "value": 1}])
    assert real.cost(state, TextAction("UP")) == 1e-4


def test_mock_responder_and_real_backend() -> None:
    env = load_sim_env("mock")
    assert env.responder is not None and env.real is not None
    got = env.responder({"total": 4}, calls(("get", {})))
    assert got is not None and got.patch == []
    assert isinstance(got.observation, ToolResultsObservation)
    assert got.observation.results[0].structured == {"total": 4}
    assert env.responder({"total": 4}, calls(("add", {"n": 2}))) is None
    real = MockReal()
    ran = real.execute({"total": 8}, calls(("add", {"n": 3}), ("get", {})))
    assert ran.patch == [{"op": "replace", "path": "/total", "value": 11}]
    assert isinstance(ran.observation, ToolResultsObservation)
    assert [r.structured for r in ran.observation.results] == [{"total": 11}, {"total": 11}]
    assert real.cost({"total": 0}, calls(("add", {"n": 1}), ("get", {}))) == 0.5
    assert real.cost({"total": 0}, calls(("get", {}))) == 0.0
    done = env.check({"total": 8}, calls(), ran.observation, {"total": 11})
    assert (done.reward, done.terminated) == (1.0, True)
    assert not env.check({"total": 0}, calls(), ran.observation, {"total": 9}).terminated


def test_mock_tool_schemas_reject_bad_calls() -> None:
    env = load_sim_env("mock")
    tools = {tool.name: tool for tool in env.task_for().tools}
    checks = validate_calls(calls(("add", {"n": 0})), tools, style=env.error_style)
    assert not checks[0].ok and "minimum" in json.loads(checks[0].text)["error"]


def test_bfcl_tools_declare_output_schemas_the_real_results_follow() -> None:
    from jsonschema import Draft202012Validator

    env = load_sim_env("bfcl")
    tools = {t.name: t for task in env.tasks.values() for t in task.tools}
    assert tools["send_message"].output_schema is not None
    checked = 0
    for episode in load_bundled("val", env="bfcl"):
        for step in episode.steps:
            assert isinstance(step.action, ToolCallsAction)
            assert isinstance(step.observation, ToolResultsObservation)
            for call, result in zip(step.action.calls, step.observation.results, strict=True):
                schema = tools[call.name].output_schema if call.name in tools else None
                if result.is_error or schema is None or call.name != "send_message":
                    continue
                assert Draft202012Validator(schema).is_valid(json.loads(result.text))
                checked += 1
    assert checked > 5  # the declared schema said message_id is an integer: it is an object
