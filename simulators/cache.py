"""The router's exact cache: the same action in the same state of the same env gets the
same answer, without asking the model.

The key is the sha256 of a canonical JSON of (env, state, action), where the action keeps
only what the env acts on: each call's tool name and arguments (object keys sorted), or the
text of a text action. Call ids differ from request to request and are left out, and so is
the free text sent beside tool calls. Where an env tracks no state, pass what stands for it
(the history). Answers are stored with their call ids blanked and re-keyed to the asking
action's ids on a hit:

    cache = ExactCache(max_entries=10_000)
    key = cache_key("bfcl", state, action)
    answer = cache.get(key)
    if answer is None:
        observation, patch = model_step(state, action)
        cache.put(key, CachedAnswer.of(observation, patch))
    else:
        observation, patch = answer.observation_for(action), answer.patch_copy()

Bounded by least-recent use, no time-based expiry, deterministic; one lock guards it, so
server threads may share one cache.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from simworld.data.records import (
    JSON,
    Action,
    Observation,
    TextAction,
    TextObservation,
    ToolResult,
    ToolResultsObservation,
)


def canonical_action(action: Action) -> JSON:
    """What of `action` the env answers to: call names and arguments (a call whose
    arguments are not a JSON object keeps its raw string), or the text."""
    if isinstance(action, TextAction):
        return {"kind": "text", "text": action.text}
    calls: list[JSON] = []
    for call in action.calls:
        arguments = {"raw": call.raw_arguments} if call.arguments is None else call.arguments
        calls.append({"name": call.name, "arguments": arguments})
    return {"kind": "tool_calls", "calls": calls}


def cache_key(env: str, state: JSON, action: Action) -> str:
    """sha256 (hex) of the canonical JSON of (env, state, canonical action)."""
    payload = [env, state, canonical_action(action)]
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedAnswer:
    """An answer as stored: the observation with its call ids blanked, and the state patch
    (a JSON Patch list, or None where the env has no explicit state). Build with `of`."""

    observation: Observation
    patch: list[JSON] | None = None

    @classmethod
    def of(cls, observation: Observation, patch: list[JSON] | None = None) -> CachedAnswer:
        """A private copy of the answer, call ids blanked."""
        if isinstance(observation, ToolResultsObservation):
            results = [
                ToolResult("", r.text, copy.deepcopy(r.structured), r.is_error)
                for r in observation.results
            ]
            return cls(ToolResultsObservation(results), copy.deepcopy(patch))
        return cls(TextObservation(observation.text), copy.deepcopy(patch))

    def observation_for(self, action: Action) -> Observation:
        """A fresh copy of the observation, its results keyed to `action`'s call ids in
        order. ValueError when the action's shape does not match the stored answer."""
        stored = self.observation
        if isinstance(stored, TextObservation):
            return TextObservation(stored.text)
        if isinstance(action, TextAction) or len(action.calls) != len(stored.results):
            raise ValueError("the cached answer does not fit this action (a key collision?)")
        return ToolResultsObservation(
            [
                ToolResult(call.id, r.text, copy.deepcopy(r.structured), r.is_error)
                for call, r in zip(action.calls, stored.results, strict=True)
            ]
        )

    def patch_copy(self) -> list[JSON] | None:
        """A fresh copy of the patch, safe to apply and keep."""
        return copy.deepcopy(self.patch)


class ExactCache:
    """key -> CachedAnswer, least recently used first out past `max_entries`."""

    def __init__(self, max_entries: int = 10_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, key: str) -> CachedAnswer | None:
        """The answer under `key` (now the most recently used), counted as a hit or a miss."""
        with self._lock:
            answer = self._entries.get(key)
            if answer is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return answer

    def put(self, key: str, answer: CachedAnswer) -> None:
        """Store (or replace) the answer under `key`, evicting the least recently used."""
        with self._lock:
            self._entries[key] = answer
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    @property
    def hits(self) -> int:
        with self._lock:
            return self._hits

    @property
    def misses(self) -> int:
        with self._lock:
            return self._misses

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        """Membership without touching the order or the counters."""
        with self._lock:
            return key in self._entries

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = 0


__all__ = ["CachedAnswer", "ExactCache", "cache_key", "canonical_action"]
