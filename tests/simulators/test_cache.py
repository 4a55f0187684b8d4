"""The exact cache: what the key ignores and what it tells apart, LRU eviction, re-keyed
call ids on a hit, counters, and many threads sharing one cache.

    python -m pytest -q tests/simulators/test_cache.py
"""

from __future__ import annotations

import json
import threading

import pytest

from simworld.data.records import (
    JSON,
    TextAction,
    TextObservation,
    ToolCall,
    ToolCallsAction,
    ToolResult,
    ToolResultsObservation,
)
from simworld.simulators.cache import CachedAnswer, ExactCache, cache_key, canonical_action


def calls(*specs: tuple[str, str, dict[str, JSON]]) -> ToolCallsAction:
    return ToolCallsAction([ToolCall(i, n, a, json.dumps(a)) for i, n, a in specs])


STATE = {"cwd": "/home", "files": ["a.txt"]}


def test_key_ignores_call_ids_key_order_and_content() -> None:
    one = calls(("call_1", "mv", {"source": "a", "destination": "b"}))
    two = calls(("call_9", "mv", {"destination": "b", "source": "a"}))
    two.content = "moving it now"
    state_reordered = {"files": ["a.txt"], "cwd": "/home"}
    assert cache_key("bfcl", STATE, one) == cache_key("bfcl", state_reordered, two)
    assert len(cache_key("bfcl", STATE, one)) == 64


def test_key_tells_apart_env_state_arguments_order_and_kind() -> None:
    base = calls(("c", "cd", {"folder": "a"}))
    key = cache_key("bfcl", STATE, base)
    others = [
        cache_key("mock", STATE, base),
        cache_key("bfcl", {**STATE, "cwd": "/tmp"}, base),
        cache_key("bfcl", None, base),
        cache_key("bfcl", STATE, calls(("c", "cd", {"folder": "b"}))),
        cache_key("bfcl", STATE, calls(("c", "ls", {"folder": "a"}))),
        cache_key("bfcl", STATE, calls(("c", "cd", {"folder": "a"}), ("d", "ls", {}))),
        cache_key("bfcl", STATE, TextAction("cd a")),
    ]
    assert len({key, *others}) == len(others) + 1
    a_then_b = calls(("1", "cd", {"folder": "a"}), ("2", "cd", {"folder": "b"}))
    b_then_a = calls(("1", "cd", {"folder": "b"}), ("2", "cd", {"folder": "a"}))
    assert cache_key("bfcl", STATE, a_then_b) != cache_key("bfcl", STATE, b_then_a)


def test_unparsed_arguments_key_on_their_raw_text() -> None:
    action = ToolCallsAction([ToolCall("c", "cd", None, '{"folder": ')])
    assert canonical_action(action) == {
        "kind": "tool_calls",
        "calls": [{"name": "cd", "arguments": {"raw": '{"folder": '}}],
    }
    assert canonical_action(TextAction("LEFT")) == {"kind": "text", "text": "LEFT"}


def answer(text: str = "ok", n: int = 1) -> CachedAnswer:
    results = [ToolResult(f"orig_{i}", text, {"v": i}) for i in range(n)]
    patch: list[JSON] = [{"op": "add", "path": "/x", "value": 1}]
    return CachedAnswer.of(ToolResultsObservation(results), patch)


def first_text(stored: CachedAnswer) -> str:
    observation = stored.observation_for(calls(("c", "t", {})))
    assert isinstance(observation, ToolResultsObservation)
    return observation.results[0].text


def test_hit_rekeys_call_ids_and_hands_out_copies() -> None:
    cache = ExactCache()
    stored = answer(n=2)
    assert isinstance(stored.observation, ToolResultsObservation)
    assert all(r.call_id == "" for r in stored.observation.results)
    key = cache_key("bfcl", STATE, calls(("a", "ls", {}), ("b", "pwd", {})))
    cache.put(key, stored)
    again = calls(("call_x", "ls", {}), ("call_y", "pwd", {}))
    hit = cache.get(key)
    assert hit is not None
    observation = hit.observation_for(again)
    assert isinstance(observation, ToolResultsObservation)
    assert [r.call_id for r in observation.results] == ["call_x", "call_y"]
    assert [r.structured for r in observation.results] == [{"v": 0}, {"v": 1}]
    observation.results[0].structured["v"] = 99  # mutating a copy leaves the cache alone
    patch = hit.patch_copy()
    assert patch is not None
    patch.clear()
    fresh = hit.observation_for(again)
    assert isinstance(fresh, ToolResultsObservation)
    assert fresh.results[0].structured == {"v": 0} and hit.patch_copy() != []
    with pytest.raises(ValueError, match="does not fit"):
        hit.observation_for(calls(("only", "ls", {})))


def test_text_answers() -> None:
    stored = CachedAnswer.of(TextObservation("You see a chest."))
    assert stored.patch is None
    assert stored.observation_for(TextAction("look")) == TextObservation("You see a chest.")


def test_lru_eviction_and_counters() -> None:
    cache = ExactCache(max_entries=2)
    cache.put("a", answer("A"))
    cache.put("b", answer("B"))
    assert cache.get("a") is not None  # a is now the most recent: b goes first
    cache.put("c", answer("C"))
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2
    assert cache.get("b") is None
    assert (cache.hits, cache.misses) == (1, 1)
    cache.put("a", answer("A2"))  # replacing refreshes, it does not grow
    cache.put("d", answer("D"))
    assert "c" not in cache and len(cache) == 2
    hit = cache.get("a")
    assert hit is not None and first_text(hit) == "A2"
    cache.clear()
    assert (len(cache), cache.hits, cache.misses) == (0, 0, 0)
    with pytest.raises(ValueError, match="at least 1"):
        ExactCache(max_entries=0)


def test_concurrent_put_and_get_keep_the_cache_whole() -> None:
    cache = ExactCache(max_entries=64)
    rounds, threads = 500, 8
    errors: list[str] = []

    def worker(t: int) -> None:
        for i in range(rounds):
            key = f"k{(t * 7 + i) % 100}"
            cache.put(key, answer(key))
            got = cache.get(f"k{(t + i) % 100}")
            if got is not None:
                text = first_text(got)
                if not text.startswith("k"):
                    errors.append(text)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert errors == []
    assert len(cache) == 64
    assert cache.hits + cache.misses == rounds * threads
