"""simworld's own transition dumps: JSON Lines with explicit state and next_state, lossless.

    {"format": "simworld-transitions", "schema_version": 1}
    {"type": "episode", "num_steps": 2, "episode_id": "ep-0", "env": ..., ...}   # no "steps"
    {"type": "step", "episode_id": "ep-0", "index": 0, "action": ..., "observation": ...,
     "state": ..., "next_state": ..., "reward": ..., ...}
    {"type": "step", "episode_id": "ep-0", "index": 1, ...}

Every episode line holds the Episode's fields (to_json) but its steps, plus `num_steps`; its
steps follow it, one line each, in order. Reading is exact (`from_json`), so a file written
from Episodes reads back equal and rewrites byte for byte; a validation error names the
line and the field path ("dump.jsonl:7: observation.results[0].is_error: expected a
boolean, got string ('no')"). Bad records: a step out of order, for an unknown episode, or
past `num_steps`; an episode missing steps (reported at its episode line) or holding a bad
step (dropped whole, and said so). Header lines may repeat (concatenated files); an unknown
`schema_version` stops reading with a DumpError, whatever the mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TextIO

from simworld.data.formats.base import Format, Item
from simworld.data.jsonio import BadRecord, DumpError, RawRecord, dumps
from simworld.data.records import (
    JSON,
    SCHEMA_VERSION,
    Episode,
    RecordError,
    Step,
    from_json,
    to_json,
)

NAME = "simworld"
HEADER = {"format": "simworld-transitions", "schema_version": SCHEMA_VERSION}


def sniff(value: JSON) -> bool:
    return isinstance(value, dict) and value.get("format") == HEADER["format"]


def write(episodes: Iterable[Episode], out: TextIO) -> int:
    """Stream episodes out: the header, then each episode line and its step lines."""
    out.write(dumps(HEADER) + "\n")
    count = 0
    for episode in episodes:
        fields = to_json(episode)
        steps = fields.pop("steps")
        out.write(dumps({"type": "episode", "num_steps": len(steps), **fields}) + "\n")
        for index, step in enumerate(steps):
            line = {"type": "step", "episode_id": episode.episode_id, "index": index, **step}
            out.write(dumps(line) + "\n")
        count += 1
    return count


@dataclass
class _Open:
    """The episode whose steps are being read."""

    record: RawRecord
    episode: Episode
    expected: int
    broken: str = ""  # why the episode will be dropped, once a step of it is bad
    skipped: int = 0  # step lines of a broken episode passed over
    steps: list[Step] = field(default_factory=list)


def read(records: Iterable[RawRecord | BadRecord]) -> Iterator[Item]:
    """The episodes of a transitions file, and a BadRecord for everything that is wrong."""
    current: _Open | None = None
    seen_header = False
    for record in records:
        if isinstance(record, BadRecord):
            if current is not None and not current.broken:
                current.broken = f"a line of it is unreadable ({record.location})"
            yield record
            continue
        value = record.value
        kind = value.get("type") if isinstance(value, dict) else None
        if sniff(value):
            _check_version(record)
            seen_header = True
            yield from _close(current)
            current = None
        elif not seen_header:
            yield record.bad(f"expected the header line {dumps(HEADER)} first")
        elif kind == "episode":
            yield from _close(current)
            opened = _open(record)
            current = None
            if isinstance(opened, BadRecord):
                yield opened
            elif opened.expected == 0:
                yield from _close(opened)
            else:
                current = opened
        elif kind == "step":
            bad = _add_step(current, record)
            if bad is not None:
                yield bad
            elif current is not None and not current.broken and _complete(current):
                yield from _close(current)
                current = None
        else:
            yield record.bad(f"expected a line with type 'episode' or 'step', got {kind!r}")
    yield from _close(current)


def _check_version(record: RawRecord) -> None:
    assert isinstance(record.value, dict)
    version = record.value.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DumpError(
            record.location,
            f"schema_version {version!r} is not one this simworld reads ({SCHEMA_VERSION}); "
            "a newer simworld wrote it, or it is not a simworld dump",
        )


def _open(record: RawRecord) -> _Open | BadRecord:
    fields: dict[str, JSON] = dict(record.value)
    del fields["type"]
    expected = fields.pop("num_steps", None)
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
        return record.bad(f"num_steps: expected a step count, got {expected!r}")
    if "steps" in fields:
        return record.bad("steps: an episode line holds no steps (they follow it, one a line)")
    try:
        episode = from_json(Episode, {**fields, "steps": []})
    except RecordError as exc:
        return record.bad(str(exc))
    return _Open(record, episode, expected)


def _add_step(current: _Open | None, record: RawRecord) -> BadRecord | None:
    fields: dict[str, JSON] = dict(record.value)
    del fields["type"]
    episode_id = fields.pop("episode_id", None)
    index = fields.pop("index", None)
    if current is None:
        reason = "which no open episode line announced (unknown episode, or past its num_steps)"
        return record.bad(f"step for episode {episode_id!r}, {reason}")
    if episode_id != current.episode.episode_id:
        reason = f"but the episode being read is {current.episode.episode_id!r}"
        return record.bad(f"step for episode {episode_id!r}, {reason}")
    if current.broken:
        current.skipped += 1
        return None
    if index != len(current.steps):
        current.broken = f"step {len(current.steps)} is out of order ({record.location})"
        return record.bad(f"step index {index!r} is out of order: expected {len(current.steps)}")
    try:
        current.steps.append(from_json(Step, fields))
    except RecordError as exc:
        current.broken = f"step {index} is bad ({record.location})"
        return record.bad(str(exc))
    return None


def _complete(current: _Open) -> bool:
    return len(current.steps) == current.expected


def _close(current: _Open | None) -> Iterator[Item]:
    """The finished episode, or why it was dropped."""
    if current is None:
        return
    if current.broken:
        skipped = f"; {current.skipped} later step lines of it skipped" if current.skipped else ""
        reason = f"episode {current.episode.episode_id!r} dropped: {current.broken}{skipped}"
        yield current.record.bad(reason)
    elif len(current.steps) < current.expected:
        have, want = len(current.steps), current.expected
        reason = f"episode {current.episode.episode_id!r} has {have} of {want} steps"
        reason += f" (missing from step {have})"
        yield current.record.bad(reason)
    else:
        current.episode.steps = current.steps
        yield current.episode


FORMAT = Format(
    name=NAME,
    shape='a {"format": "simworld-transitions", ...} header line, then episode and step lines',
    sniff=sniff,
    read=read,
    write=write,
)

__all__ = ["FORMAT", "HEADER", "NAME", "read", "sniff", "write"]
