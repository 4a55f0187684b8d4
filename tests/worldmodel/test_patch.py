"""State patches: diff then apply gives the next state on every bundled step, diffs are
deterministic and compact, and a patch that does not apply says which op and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from simworld.data.records import Episode
from simworld.worldmodel.patch import PatchError, apply, check, diff


def test_diff_then_apply_gives_the_next_state_on_every_bundled_step(train: list[Episode]) -> None:
    steps = [s for e in train for s in e.steps]
    assert len({e.env for e in train}) == 2 and len(steps) > 10_000
    for step in steps:
        ops = diff(step.state, step.next_state)
        after = apply(step.state, ops)
        assert json.dumps(after) == json.dumps(step.next_state)  # key order and types too
        assert diff(step.state, step.next_state) == ops  # deterministic


def test_apply_does_not_touch_its_input() -> None:
    state = {"a": [1, 2], "b": {"c": 1}}
    apply(state, [{"op": "add", "path": "/a/-", "value": 3}, {"op": "remove", "path": "/b/c"}])
    assert state == {"a": [1, 2], "b": {"c": 1}}


def test_types_are_told_apart() -> None:
    assert diff({"a": 1}, {"a": True}) == [{"op": "replace", "path": "/a", "value": True}]
    assert diff({"a": 1}, {"a": 1.0}) == [{"op": "replace", "path": "/a", "value": 1.0}]
    assert diff({"a": [1]}, {"a": [1]}) == []


def test_a_reshuffled_list_becomes_one_replace() -> None:
    before = {"xs": list(range(10))}
    after = {"xs": list(range(9, -1, -1))}
    assert diff(before, after) == [{"op": "replace", "path": "/xs", "value": after["xs"]}]


def test_errors_name_the_op() -> None:
    with pytest.raises(PatchError) as err:
        apply(
            {"a": 1}, [{"op": "replace", "path": "/a", "value": 2}, {"op": "remove", "path": "/b"}]
        )
    assert err.value.index == 1 and str(err.value).startswith("op 1: remove '/b'")
    with pytest.raises(PatchError, match="op 0: unknown op 'set'"):
        apply({}, [{"op": "set", "path": "/a"}])
    assert check({"op": "add"}) == ["a patch is a JSON array of ops, got dict"]
    assert check([{"op": "add", "path": "a"}]) == [
        "op 0: path 'a' is not a JSON pointer",
        "op 0: add needs 'value'",
    ]


def test_patches_do_not_depend_on_the_hash_seed() -> None:
    """The same states give the same ops in the same order in every process (jsonpatch
    alone visits object keys through sets, whose order follows PYTHONHASHSEED)."""
    code = (
        "import hashlib, json; from simworld.data.bundle import load_bundled;"
        "from simworld.worldmodel.patch import diff; h = hashlib.sha256();"
        "[h.update(json.dumps(diff(s.state, s.next_state)).encode())"
        " for ep in load_bundled('val', env='bfcl') for s in ep.steps];"
        "print(h.hexdigest())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
