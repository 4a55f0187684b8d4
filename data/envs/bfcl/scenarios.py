"""BFCL multi-turn entries and their ground truth, as shipped inside the bfcl-eval wheel.

    for scenario in load_scenarios("base"):
        scenario.entry_id, scenario.turns, scenario.ground_truth

Each category has a question file `data/BFCL_v4_multi_turn_<category>.json` (JSONL: `id`,
`question` = turns of user messages, `initial_config`, `involved_classes`, `path`, and
optionally `excluded_function` / `missed_function`) and a file of the same name under
`data/possible_answer/` holding `{"id", "ground_truth": [[call strings of turn 0], ...]}`.
The numeric suffix of an id names the scenario: base_12, long_context_12, miss_func_12 and
miss_param_12 are the same task told four ways.

`excluded_function` is kept but has no effect: bfcl-eval 2026.3.23 never reads it (its
function list for an entry is every doc of the involved classes), and no ground-truth call
uses an excluded function. `missed_function` ({turn: [names]}) is what the miss_func
category holds out: BFCL removes those docs from the list and adds them back at that turn.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from typing import Any

from simworld.data.envs.bfcl.env import CATEGORIES
from simworld.data.records import JSON, Message


@dataclass(frozen=True)
class Scenario:
    """One BFCL entry of one category with its ground truth (treat it as read-only)."""

    entry_id: str  # "multi_turn_base_12"
    category: str  # "base"
    index: int  # 12, shared by the categories
    turns: list[list[Message]]
    initial_config: dict[str, JSON]
    involved_classes: list[str]
    ground_truth: list[list[str]]
    missed_function: dict[int, list[str]]
    excluded_function: list[str]

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"


def load_scenarios(category: str) -> list[Scenario]:
    """Every entry of `category` in file order (cached; treat the result as read-only)."""
    return list(_load(category))


@functools.cache
def _load(category: str) -> tuple[Scenario, ...]:
    if category not in CATEGORIES:
        raise ValueError(f"unknown BFCL category {category!r}; known: {', '.join(CATEGORIES)}")
    data = importlib.resources.files("bfcl_eval") / "data"
    name = f"BFCL_v4_multi_turn_{category}.json"
    answers = {
        entry["id"]: (where, entry) for where, entry in _read_jsonl(data / "possible_answer" / name)
    }
    scenarios = []
    for where, entry in _read_jsonl(data / name):
        if entry["id"] not in answers:
            raise ValueError(f"{where}: {entry['id']} has no ground truth in possible_answer/")
        scenarios.append(_scenario(category, where, entry, answers.pop(entry["id"])[1]))
    if answers:
        extra = next(iter(answers.values()))[0]
        raise ValueError(f"{extra}: ground truth for an id with no question")
    return tuple(scenarios)


def _scenario(category: str, where: str, entry: dict[str, Any], answer: dict[str, Any]) -> Scenario:
    turns = [[Message("user", _user_text(m, where)) for m in turn] for turn in entry["question"]]
    ground_truth = answer["ground_truth"]
    if len(ground_truth) != len(turns):
        raise ValueError(f"{where}: {len(turns)} turns but {len(ground_truth)} ground-truth turns")
    missed = {int(turn): list(names) for turn, names in entry.get("missed_function", {}).items()}
    return Scenario(
        entry_id=entry["id"],
        category=category,
        index=int(entry["id"].rsplit("_", 1)[1]),
        turns=turns,
        initial_config=entry["initial_config"],
        involved_classes=list(entry["involved_classes"]),
        ground_truth=[list(calls) for calls in ground_truth],
        missed_function=missed,
        excluded_function=list(entry.get("excluded_function", [])),
    )


def _user_text(message: dict[str, Any], where: str) -> str:
    if message.get("role") != "user" or not isinstance(message.get("content"), str):
        raise ValueError(f"{where}: expected user messages with text, got {message!r:.80}")
    content: str = message["content"]
    return content


def _read_jsonl(path: Traversable) -> list[tuple[str, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            rows.append((where, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc.msg})") from exc
    return rows


__all__ = ["CATEGORIES", "Scenario", "load_scenarios"]
