"""Retrieval over recorded transitions: a TF-IDF nearest-neighbour index, and the compact
memory file a checkpoint carries so that its model retrieves with nothing else around.

    from simworld.worldmodel.retrieval import Retriever, recorded_steps
    retriever = Retriever([r for ep in train for r in recorded_steps(ep)])
    found = retriever.neighbour(env, action, previous)          # a Recorded, or None
    found = retriever.neighbour(env, action, previous, exclude=episode.task.id)
    found = retriever.neighbours(env, action, previous, k=3)      # the 3 nearest, nearest first
    save_memory("ckpt/memory.jsonl.gz", retriever.entries)      # reproducible bytes
    retriever = Retriever(load_memory("ckpt/memory.jsonl.gz"))

Each call of a recorded step (or its text action) is one candidate. A query call is matched
against the candidates of the same env with the same tool name (the env's tool calls of
any name when the name is unseen; text actions among text actions); similarity is the mean
of the TF-IDF cosines (sublinear tf, smoothed idf) of the actions (name + canonical JSON
arguments, or the text) and of the previous observations. Ties go to the earliest
candidate. `exclude` leaves out every candidate of one scenario (a `Task.id`): a training
step must not be shown its own answer, which the scenario's other recordings hold.
`distinct` (neighbours) leaves out the candidates whose call is the query's own, name and
arguments alike: a training step then sees only other calls' answers, as a held-out call
that no recording repeats does.

Pure Python and numpy: no torch.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from simworld.data.canonical import observation_text
from simworld.data.records import (
    Action,
    Episode,
    Observation,
    ToolCall,
    ToolCallsAction,
    from_json,
    to_json,
)
from simworld.worldmodel.patch import Patch, diff

MEMORY_FILE = "memory.jsonl.gz"
MEMORY_SCHEMA_VERSION = 1
ACTION_WEIGHT = 0.5  # similarity = w * cos(action) + (1 - w) * cos(previous observation)
ANY_TOOL = "\x00any tool"  # the env-wide group of tool calls (unseen tool names)
TEXT = "\x00text"  # the group of text actions
_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Recorded:
    """One recorded transition as retrieval keeps it: where it comes from (env, scenario),
    what it is matched on (the action and the text of the observation it followed) and
    what it shows (its observation, and its state patch when the data has states)."""

    env: str
    scenario: str
    action: Action
    previous: str
    observation: Observation
    patch: Patch | None = None


def recorded_step(episode: Episode, index: int) -> Recorded:
    """`episode.steps[index]` as a Recorded."""
    step = episode.steps[index]
    before = episode.steps[index - 1].observation if index else episode.initial_observation
    patch = None
    if step.state is not None and step.next_state is not None:
        patch = diff(step.state, step.next_state)
    previous = observation_text(before) if before is not None else ""
    return Recorded(episode.env, episode.task.id, step.action, previous, step.observation, patch)


def recorded_steps(episode: Episode) -> list[Recorded]:
    return [recorded_step(episode, i) for i in range(len(episode.steps))]


def _call_text(call: ToolCall) -> str:
    arguments = call.raw_arguments if call.arguments is None else call.arguments
    return call.name + " " + json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def queries(action: Action) -> list[tuple[str, str]]:
    """(group, action text) per call, or one for a text action."""
    if isinstance(action, ToolCallsAction):
        return [(call.name, _call_text(call)) for call in action.calls]
    return [(TEXT, action.text)]


def _bag(text: str) -> Counter[str]:
    return Counter(_TOKEN.findall(text.lower()))


@dataclass
class _Group:
    """The candidates that share an env and a tool name: candidate numbers (ascending),
    the rows of each action text, their scenarios (as ids), and per token id the rows
    holding it and their weights."""

    candidates: list[int] = field(default_factory=list)
    by_text: dict[str, list[int]] = field(default_factory=dict)  # action text -> rows
    scenarios: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    postings: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = field(
        default_factory=dict
    )


class Retriever:
    """The TF-IDF nearest-neighbour index over `entries` (see the module docstring)."""

    def __init__(self, entries: Sequence[Recorded]) -> None:
        self.entries = list(entries)
        # candidate -> (entry number, call position; 0 for a text action)
        self._candidates: list[tuple[int, int]] = []
        bags: list[tuple[Counter[str], Counter[str]]] = []
        keys: list[tuple[str, str]] = []
        texts: list[str] = []
        for number, entry in enumerate(self.entries):
            context = _bag(entry.previous)
            for position, (group, text) in enumerate(queries(entry.action)):
                self._candidates.append((number, position))
                bags.append((_bag(text), context))
                keys.append((entry.env, group))
                texts.append(text)
        self._vocab: dict[str, int] = {}
        df: Counter[int] = Counter()
        for action_bag, context_bag in bags:
            df.update(
                {self._id("a", t) for t in action_bag} | {self._id("o", t) for t in context_bag}
            )
        n = len(bags)
        self._idf = {t: math.log((1 + n) / (1 + d)) + 1 for t, d in df.items()}
        self._unseen_idf = math.log(1 + n) + 1
        self._scenario_ids = {
            s: i for i, s in enumerate(dict.fromkeys(e.scenario for e in entries))
        }
        self._groups = self._build_groups(bags, keys, texts)

    def _id(self, part: str, token: str) -> int:
        return self._vocab.setdefault(part + ":" + token, len(self._vocab))

    def _vector(self, action_bag: Counter[str], context_bag: Counter[str]) -> dict[int, float]:
        """Sublinear TF-IDF per part, each part scaled to norm sqrt(its weight)."""
        vector: dict[int, float] = {}
        for part, bag, weight in (
            ("a", action_bag, ACTION_WEIGHT),
            ("o", context_bag, 1 - ACTION_WEIGHT),
        ):
            raw: dict[int, float] = {}
            unseen = 0.0
            for token, tf in bag.items():
                key = self._vocab.get(part + ":" + token)
                w = (1 + math.log(tf)) * (self._idf[key] if key is not None else self._unseen_idf)
                if key is None:
                    unseen += w * w  # counts in the norm, matches nothing
                else:
                    raw[key] = w
            norm = math.sqrt(sum(w * w for w in raw.values()) + unseen)
            for key, w in raw.items():
                vector[key] = w / norm * math.sqrt(weight)
        return vector

    def _build_groups(
        self,
        bags: list[tuple[Counter[str], Counter[str]]],
        keys: list[tuple[str, str]],
        texts: list[str],
    ) -> dict[tuple[str, str], _Group]:
        lists: dict[tuple[str, str], dict[int, tuple[list[int], list[float]]]] = {}
        groups: dict[tuple[str, str], _Group] = defaultdict(_Group)
        for candidate, ((action_bag, context_bag), (env, name)) in enumerate(
            zip(bags, keys, strict=True)
        ):
            vector = self._vector(action_bag, context_bag)
            for key in {(env, name), (env, TEXT if name == TEXT else ANY_TOOL)}:
                group = groups[key]
                row = len(group.candidates)
                group.candidates.append(candidate)
                group.by_text.setdefault(texts[candidate], []).append(row)
                postings = lists.setdefault(key, {})
                for token, weight in vector.items():
                    rows, weights = postings.setdefault(token, ([], []))
                    rows.append(row)
                    weights.append(weight)
        for key, group in groups.items():
            group.postings = {
                t: (np.array(r, dtype=np.int64), np.array(w, dtype=np.float64))
                for t, (r, w) in lists[key].items()
            }
            numbers = [self._candidates[c][0] for c in group.candidates]
            scenario = [self._scenario_ids[self.entries[n].scenario] for n in numbers]
            group.scenarios = np.array(scenario, dtype=np.int64)
        return dict(groups)

    def _nearest(
        self, env: str, group: str, action_text: str, previous: str, exclude: str | None
    ) -> tuple[int, int] | None:
        """(entry number, call position) of the candidate most similar to the query; None
        when the env is unseen or every candidate belongs to the excluded scenario."""
        found = self._ranked(env, group, action_text, previous, exclude, 1, False)
        return found[0] if found else None

    def _ranked(
        self,
        env: str,
        group: str,
        action_text: str,
        previous: str,
        exclude: str | None,
        k: int,
        distinct: bool,
    ) -> list[tuple[int, int]]:
        """(entry number, call position) of the k candidates most similar to the query,
        most similar first (ties to the earliest), from the query's group, else from the
        env's fallback group when the first has none left; excluded candidates never, nor
        with `distinct` those whose action text is the query's."""
        vector = self._vector(_bag(action_text), _bag(previous))
        skip = self._scenario_ids.get(exclude) if exclude is not None else None
        fallback = TEXT if group == TEXT else ANY_TOOL
        for key in ((env, group), (env, fallback)):
            candidates = self._groups.get(key)
            if candidates is None:
                continue
            scores = np.zeros(len(candidates.candidates))  # (candidates,)
            for token, weight in vector.items():
                hit = candidates.postings.get(token)
                if hit is not None:
                    scores[hit[0]] += weight * hit[1]
            if skip is not None:
                scores[candidates.scenarios == skip] = -np.inf
            if distinct:
                scores[candidates.by_text.get(action_text, [])] = -np.inf
            if k == 1:  # argmax: the first of ties, without sorting every candidate
                order: list[int] = [int(np.argmax(scores))]
            else:
                order = np.argsort(-scores, kind="stable")[:k].tolist()
            kept = [i for i in order if scores[i] > -np.inf]
            if kept:
                return [self._candidates[candidates.candidates[i]] for i in kept]
        return []

    def nearest_calls(
        self, env: str, action: Action, previous: str, exclude: str | None = None
    ) -> list[tuple[Recorded, int] | None]:
        """Per call of `action` (one for a text action): the most similar recorded step and
        the position of its matching call, or None where nothing matches."""
        out: list[tuple[Recorded, int] | None] = []
        for group, text in queries(action):
            found = self._nearest(env, group, text, previous, exclude)
            out.append(None if found is None else (self.entries[found[0]], found[1]))
        return out

    def neighbour(
        self, env: str, action: Action, previous: str, exclude: str | None = None
    ) -> Recorded | None:
        """The recorded step most similar to this one (by its first call), or None."""
        first = queries(action)[:1]
        if not first:
            return None
        found = self._nearest(env, first[0][0], first[0][1], previous, exclude)
        return None if found is None else self.entries[found[0]]

    def neighbours(
        self,
        env: str,
        action: Action,
        previous: str,
        k: int,
        exclude: str | None = None,
        distinct: bool = False,
    ) -> list[Recorded]:
        """The k recorded steps most similar to this one (by its first call), most similar
        first; `neighbours(..., 1)` is `[neighbour(...)]` where there is one. `distinct`:
        never a step whose (first) call is this one's, name and arguments alike."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        first = queries(action)[:1]
        if not first:
            return []
        ranked = self._ranked(env, first[0][0], first[0][1], previous, exclude, k, distinct)
        return [self.entries[entry] for entry, _ in ranked]


# ---------------------------------------------------------------------------- the memory file


def save_memory(path: str | Path, entries: Sequence[Recorded]) -> Path:
    """Write `entries` as gzip JSONL (a header line, then one entry a line); the same
    entries always give the same bytes (no timestamp or file name in the gzip header)."""
    out = Path(path)
    lines = [json.dumps({"schema_version": MEMORY_SCHEMA_VERSION, "entries": len(entries)})]
    for entry in entries:
        record = {
            "env": entry.env,
            "scenario": entry.scenario,
            "action": to_json(entry.action),
            "previous": entry.previous,
            "observation": to_json(entry.observation),
            "patch": entry.patch,
        }
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    out.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
    return out


def load_memory(path: str | Path) -> list[Recorded]:
    """The entries of a memory file; ValueError naming the line when one is unreadable."""
    where = Path(path)
    lines = gzip.decompress(where.read_bytes()).decode("utf-8").splitlines()
    header = json.loads(lines[0]) if lines else {}
    if header.get("schema_version") != MEMORY_SCHEMA_VERSION:
        raise ValueError(
            f"{where}: memory schema_version {header.get('schema_version')!r}, this simworld "
            f"reads {MEMORY_SCHEMA_VERSION}: retrain the checkpoint"
        )
    entries = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            raw = json.loads(line)
            entries.append(
                Recorded(
                    env=str(raw["env"]),
                    scenario=str(raw["scenario"]),
                    action=from_json(Action, raw["action"], "action"),  # type: ignore[arg-type]
                    previous=str(raw["previous"]),
                    observation=from_json(Observation, raw["observation"], "observation"),  # type: ignore[arg-type]
                    patch=raw["patch"],
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}, line {number}: {exc}") from exc
    if len(entries) != header.get("entries"):
        raise ValueError(
            f"{where}: header says {header.get('entries')} entries, read {len(entries)}"
        )
    return entries


__all__ = [
    "MEMORY_FILE",
    "Recorded",
    "Retriever",
    "load_memory",
    "queries",
    "recorded_step",
    "recorded_steps",
    "save_memory",
]
