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

Streamed episodes (what a server's recorder appends, see simworld.server.recording): an
episode line with `"streamed": true` in place of `num_steps`. Its step lines may come
anywhere after it, interleaved with other episodes' lines, in index order per episode:

    {"type": "episode", "streamed": true, "episode_id": "rec-1", ...}
    {"type": "episode", "streamed": true, "episode_id": "rec-2", ...}
    {"type": "step", "episode_id": "rec-2", "index": 0, ...}
    {"type": "step", "episode_id": "rec-1", "index": 0, ...}

A streamed episode is complete at the end of its file (the next header line or the end of
the dump) with whatever steps arrived, none included; streamed episodes are yielded there,
in the order of their episode lines (counted ones as soon as their last step is read). A
streamed line never interrupts a counted episode's steps. Bad records besides the above: a
second episode line for an episode id still open in the file ("duplicate episode id"), an
episode line with both `num_steps` and `streamed`. An unreadable line (a torn last line
that a crash mid-write leaves) is reported and breaks the counted episode being read, but
no streamed episode: a lost step shows as a gap in its episode's indices, which drops that
episode (said so at its episode line), and a lost last step loses only itself. Files
without streamed lines read exactly as before, so the schema version is unchanged; a reader
that predates streaming reports a streamed line as bad (no `num_steps`), never misreads it.
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


def episode_line(episode: Episode, *, streamed: bool = False) -> dict[str, JSON]:
    """The episode line of `episode`: its fields but the steps, with `num_steps` (or, when
    `streamed`, `"streamed": true` and its steps left to come later)."""
    fields = to_json(episode)
    steps = fields.pop("steps")
    count: dict[str, JSON] = {"streamed": True} if streamed else {"num_steps": len(steps)}
    return {"type": "episode", **count, **fields}


def step_line(episode_id: str, index: int, step: Step) -> dict[str, JSON]:
    """The line of step `index` of episode `episode_id`."""
    return {"type": "step", "episode_id": episode_id, "index": index, **to_json(step)}


def write(episodes: Iterable[Episode], out: TextIO) -> int:
    """Stream episodes out: the header, then each episode line and its step lines."""
    out.write(dumps(HEADER) + "\n")
    count = 0
    for episode in episodes:
        out.write(dumps(episode_line(episode)) + "\n")
        for index, step in enumerate(episode.steps):
            out.write(dumps(step_line(episode.episode_id, index, step)) + "\n")
        count += 1
    return count


@dataclass
class _Open:
    """An episode whose steps are being read; `expected` is None for a streamed one."""

    record: RawRecord
    episode: Episode
    expected: int | None
    broken: str = ""  # why the episode will be dropped, once a step of it is bad
    skipped: int = 0  # step lines of a broken episode passed over
    steps: list[Step] = field(default_factory=list)


def read(records: Iterable[RawRecord | BadRecord]) -> Iterator[Item]:
    """The episodes of a transitions file, and a BadRecord for everything that is wrong."""
    reader = _Reader()
    for record in records:
        yield from reader.feed(record)
    yield from reader.end_of_file()


class _Reader:
    """The reading state: the counted episode whose steps follow its line, and the
    streamed episodes of the file being read (by id, in the order of their lines)."""

    def __init__(self) -> None:
        self.seen_header = False
        self.current: _Open | None = None
        self.streamed: dict[str, _Open] = {}

    def feed(self, record: RawRecord | BadRecord) -> Iterator[Item]:
        if isinstance(record, BadRecord):
            if self.current is not None and not self.current.broken:
                self.current.broken = f"a line of it is unreadable ({record.location})"
            yield record
            return
        value = record.value
        kind = value.get("type") if isinstance(value, dict) else None
        if sniff(value):
            _check_version(record)
            yield from self.end_of_file()
            self.seen_header = True
        elif not self.seen_header:
            yield record.bad(f"expected the header line {dumps(HEADER)} first")
        elif kind == "episode":
            yield from self._episode(record)
        elif kind == "step":
            yield from self._step(record)
        else:
            yield record.bad(f"expected a line with type 'episode' or 'step', got {kind!r}")

    def end_of_file(self) -> Iterator[Item]:
        """Close everything open: the end of the dump, or a header line starting a new file."""
        yield from _close(self.current)
        for opened in self.streamed.values():
            yield from _close(opened)
        self.current, self.streamed = None, {}

    def _episode(self, record: RawRecord) -> Iterator[Item]:
        assert isinstance(record.value, dict)
        streamed = "streamed" in record.value
        if not streamed:  # a counted episode line ends the counted episode before it
            yield from _close(self.current)
            self.current = None
        opened = _open(record)
        if isinstance(opened, BadRecord):
            yield opened
            return
        episode_id = opened.episode.episode_id
        first = self.streamed.get(episode_id) or (
            self.current if self.current and self.current.episode.episode_id == episode_id else None
        )
        if first is not None:
            yield record.bad(
                f"duplicate episode id {episode_id!r}: the episode line at "
                f"{first.record.location} is still open (its steps would be ambiguous)"
            )
        elif streamed:
            self.streamed[episode_id] = opened
        elif opened.expected == 0:
            yield from _close(opened)
        else:
            self.current = opened

    def _step(self, record: RawRecord) -> Iterator[Item]:
        assert isinstance(record.value, dict)
        episode_id = record.value.get("episode_id")
        current = self.current
        if current is not None and episode_id == current.episode.episode_id:
            target = current
        elif isinstance(episode_id, str) and episode_id in self.streamed:
            target = self.streamed[episode_id]
        elif current is None:
            reason = "which no open episode line announced (unknown episode, or past its num_steps)"
            yield record.bad(f"step for episode {episode_id!r}, {reason}")
            return
        else:
            reason = f"but the episode being read is {current.episode.episode_id!r}"
            yield record.bad(f"step for episode {episode_id!r}, {reason}")
            return
        bad = _add_step(target, record)
        if bad is not None:
            yield bad
        elif target is current and not current.broken and len(current.steps) == current.expected:
            yield from _close(current)
            self.current = None


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
    expected: int | None = None
    if "streamed" in fields:
        streamed = fields.pop("streamed")
        if streamed is not True:
            return record.bad(f"streamed: expected true (or no such field), got {streamed!r}")
        if "num_steps" in fields:
            return record.bad("num_steps: a streamed episode line has no step count")
    else:
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


def _add_step(target: _Open, record: RawRecord) -> BadRecord | None:
    fields: dict[str, JSON] = dict(record.value)
    del fields["type"], fields["episode_id"]
    index = fields.pop("index", None)
    if target.broken:
        target.skipped += 1
        return None
    expected = len(target.steps)
    if not isinstance(index, int) or isinstance(index, bool) or index != expected:
        target.broken = f"step {expected} is out of order ({record.location})"
        return record.bad(f"step index {index!r} is out of order: expected {expected}")
    try:
        target.steps.append(from_json(Step, fields))
    except RecordError as exc:
        target.broken = f"step {index} is bad ({record.location})"
        return record.bad(str(exc))
    return None


def _close(current: _Open | None) -> Iterator[Item]:
    """The finished episode, or why it was dropped."""
    if current is None:
        return
    if current.broken:
        skipped = f"; {current.skipped} later step lines of it skipped" if current.skipped else ""
        reason = f"episode {current.episode.episode_id!r} dropped: {current.broken}{skipped}"
        yield current.record.bad(reason)
    elif current.expected is not None and len(current.steps) < current.expected:
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

__all__ = ["FORMAT", "HEADER", "NAME", "episode_line", "read", "sniff", "step_line", "write"]
